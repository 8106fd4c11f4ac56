"""A prompt_toolkit progress bar behind the ``session.progress(label, total)`` protocol.

Analyses only call ``bar.advance()``; this is the one place that draws. Short jobs stay silent:
the bar appears only once work has run for a moment, so `ni` or a small `vc` do not flicker.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator

from prompt_toolkit.shortcuts import ProgressBar

from precision_shell.safe_text import escape_controls

SHOW_AFTER_SECONDS = 0.3


class _LazyBar:
    def __init__(self, label: str, total: int | None, output=None):
        self.label, self.total, self.output = escape_controls(label), total, output
        self.done = 0
        self.start = time.monotonic()
        self._bar: ProgressBar | None = None
        self._counter = None

    def advance(self, n: int = 1) -> None:
        self.done += n
        if self._bar is None and time.monotonic() - self.start >= SHOW_AFTER_SECONDS:
            self._bar = ProgressBar(output=self.output)
            self._bar.__enter__()
            self._counter = self._bar(label=self.label, total=self.total)
            self._counter.items_completed = self.done - n
        if self._counter is not None:
            self._counter.items_completed += n
            self._bar.invalidate()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)
            self._bar = None


def progress_factory(output=None):
    """``session.progress`` for the REPL."""

    @contextmanager
    def progress(label: str, total: int | None) -> Iterator[_LazyBar]:
        bar = _LazyBar(label, total, output)
        try:
            yield bar
        finally:
            bar.close()

    return progress
