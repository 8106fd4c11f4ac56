"""Where pshell may start processes: typed at the prompt, piped on stdin or given with ``-c``, yes;
from a script (``source FILE``, ``pshell -f FILE``) only when the user allowed it (--allow-shell).

A script is data someone handed over; a command in it that starts processes (``bisect``'s check
command) would run whatever that someone wrote. ``require_process_start`` is the one check every
such command calls; the front end marks script execution with ``running_script()`` and the
``--allow-shell`` option (when given) calls ``allow_processes_in_scripts()``.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from precision_shell.errors import CommandError

_state = {"script_depth": 0, "allowed_in_scripts": False}


@contextmanager
def running_script() -> Iterator[None]:
    """Statements run inside this block come from a script."""
    _state["script_depth"] += 1
    try:
        yield
    finally:
        _state["script_depth"] -= 1


def allow_processes_in_scripts(allowed: bool = True) -> None:
    _state["allowed_in_scripts"] = allowed


def in_script() -> bool:
    return _state["script_depth"] > 0


def require_process_start(what: str) -> None:
    """CommandError (one line) when ``what`` may not start processes here."""
    if in_script() and not _state["allowed_in_scripts"]:
        raise CommandError(f"{what} starts processes, which a script (source, -f) may not do "
                           f"unless pshell runs with --allow-shell; type it at the prompt or give it with -c")
