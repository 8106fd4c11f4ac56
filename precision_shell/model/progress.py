"""How long-running analyses report progress without knowing who is watching.

Analyses call ``with session.progress("comparing", total) as bar: bar.advance()``. The REPL
installs a prompt_toolkit progress bar (only ``shell/`` imports prompt_toolkit); batch mode and
tests keep this silent default. Ctrl-C arrives as KeyboardInterrupt in the main thread; analyses
catch it where they can keep partial results.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator, Protocol


class ProgressBar(Protocol):
    def advance(self, n: int = 1) -> None: ...


class _Silent:
    def advance(self, n: int = 1) -> None:
        pass


@contextmanager
def silent_progress(label: str, total: int | None) -> Iterator[ProgressBar]:
    yield _Silent()


ProgressFactory = Callable[[str, "int | None"], "contextmanager[ProgressBar]"]
