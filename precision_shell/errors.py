"""The one error type every layer raises for bad input.

Readers raise :class:`FormatError` naming the file and the reason; commands raise
:class:`CommandError` (a bad argument, an unknown op). The shell and the batch runner print
``error: <path>: <reason>`` on one line and carry on, so a traceback never reaches the user for
anything a user can cause.
"""

from __future__ import annotations

import os


def install_hint(extra: str) -> str:
    """How to install an optional extra, both ways a user may have pshell: from the package index,
    or from a checkout (an editable install, where the first form would fetch a second copy)."""
    return f"pip install 'precision-shell[{extra}]' (from a checkout: pip install -e '.[{extra}]')"


class PshellError(Exception):
    """Base class: an error a user can cause, shown as one line."""

    exit_code = 1

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class FormatError(PshellError):
    """A file could not be read or decoded: names the file and the reason."""

    def __init__(self, path: str | os.PathLike | None, reason: str):
        self.path = os.fspath(path) if path is not None else None
        self.reason = reason
        super().__init__(f"{self.path}: {reason}" if self.path else reason)


class CommandError(PshellError):
    """A command could not run (unknown op, missing golden, bad slice ...)."""


class UsageError(CommandError):
    """Bad arguments to a command or to pshell itself (batch exit code 2)."""

    exit_code = 2
