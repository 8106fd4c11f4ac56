"""Page output taller than the terminal through ``$PAGER`` (default ``less`` with ``LESS=-SRXF``).

``-S`` keeps wide tables unwrapped, ``-R`` passes colours, ``-X`` leaves the text on screen after
quitting, ``-F`` quits at once when the text fits after all. A user's own ``LESS`` wins.
"""

from __future__ import annotations

import io
import os
import re
import shlex
import shutil
import subprocess
import sys
from typing import Callable, TextIO

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def screen_lines(text: str, columns: int) -> int:
    """Terminal rows ``text`` takes when printed (long lines wrap; colour codes take none)."""
    columns = max(1, columns)
    rows = 0
    for line in text.split("\n"):
        width = len(_ANSI.sub("", line).expandtabs())
        rows += max(1, -(-width // columns))
    return rows


def needs_paging(text: str, rows: int, columns: int) -> bool:
    # one row stays free for the prompt that follows
    return screen_lines(text.rstrip("\n"), columns) > max(1, rows - 1)


def pager_command() -> list[str]:
    configured = os.environ.get("PAGER", "").strip()
    if configured:
        try:
            return shlex.split(configured)
        except ValueError:
            pass  # an unbalanced quote in $PAGER: fall back to less
    return ["less"]


def run_pager(text: str, command: list[str] | None = None) -> bool:
    """Feed ``text`` to the pager; False when no pager could run (the caller prints instead)."""
    command = command or pager_command()
    env = dict(os.environ)
    env.setdefault("LESS", "-SRXF")
    try:
        proc = subprocess.Popen(command, stdin=subprocess.PIPE, env=env,
                                encoding="utf-8", errors="replace")
    except OSError:
        return False
    try:
        proc.communicate(text)
    except BrokenPipeError:
        pass  # the user quit the pager before reading everything
    except KeyboardInterrupt:
        # Ctrl-C reaches the pager too; wait for it so the terminal is restored before the prompt
        proc.wait()
    return True


class PagingWriter(io.TextIOBase):
    """A text stream for the front end: each flushed block is paged when taller than the screen.

    The front end writes one statement's whole output and then flushes, so each command is paged
    on its own and its output appears as soon as the command has finished.
    """

    def __init__(self, out: TextIO, enabled: Callable[[], bool],
                 size: Callable[[], os.terminal_size] | None = None,
                 pager: Callable[[str], bool] = run_pager):
        self.out = out
        self.enabled = enabled
        self.size = size or shutil.get_terminal_size
        self.pager = pager
        self._buffer: list[str] = []

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return bool(getattr(self.out, "isatty", lambda: False)())

    def write(self, text: str) -> int:
        self._buffer.append(text)
        return len(text)

    def discard(self) -> None:
        """Drop half-written output (a command interrupted while its output was being written)."""
        self._buffer = []

    def flush(self) -> None:
        text, self._buffer = "".join(self._buffer), []
        if not text:
            return
        if self.enabled():
            size = self.size()
            if needs_paging(text, size.lines, size.columns):
                self.out.flush()
                if self.pager(text):
                    return
        self.out.write(text)
        self.out.flush()


def pager_wanted(no_pager: bool, setting: bool, out: TextIO = sys.stdout) -> bool:
    """Paging only on a terminal, and only when neither ``--no-pager`` nor ``pager off`` say no."""
    return not no_pager and setting and bool(getattr(out, "isatty", lambda: False)())
