"""File sizes of a big tree, counted after start-up (issue 31).

A stat per file costs 2-3 µs, mostly in the kernel: 1.8 s for a tree of 600k files, more than
listing it. So a big tree reaches the prompt without them: a daemon thread reads them (``os.stat``
releases the GIL), folder by folder, and adds them to each folder's start-up cache entry. A
process that exits first (a batch command) leaves the rest to a detached copy of itself, as the
graph cache's writer does, so the next start knows them.
"""

from __future__ import annotations

import atexit
import os
import threading

from precision_shell.model.detached import run_detached
from precision_shell.model.folder_listing import FolderFiles, Listing, end_cache_writes

# Fewer files than this are stat'ed at once (~50 ms); more are counted in a background thread,
# so that a tree of 10^5 files reaches the prompt without 10^5 stats first.
INLINE_SIZES_BELOW = 20_000

_counting: list["SizeCount"] = []  # counts with a thread: what the exit may leave to a copy


class SizeCount:
    """Reads the sizes of every file of ``listings`` that are not known yet: at once when they
    are few, else in a daemon thread. Asking a folder's sizes meanwhile waits for that folder
    only, so ``total_bytes`` stays exact; ``done`` says whether asking would wait."""

    def __init__(self, listings: list[Listing]):
        self._pending = [(listing, f) for listing in listings for f in listing.folders if not f.has_sizes]
        self.thread: threading.Thread | None = None
        if sum(f.count for _, f in self._pending) < INLINE_SIZES_BELOW:
            self._count()
        else:
            _counting.append(self)  # before the thread starts: it removes itself when done
            self.thread = threading.Thread(target=self._count_in_background, name="pshell-sizes", daemon=True)
            self.thread.start()

    def _count_in_background(self) -> None:
        _lower_priority()
        self._count()

    def _count(self) -> None:
        try:
            for listing, files in self._pending:
                files.sizes(listing.warnings)
        finally:  # done: a long session (REPL, MCP) keeps neither the count nor its listings
            self._pending = []
            if self in _counting:
                _counting.remove(self)

    @property
    def folders(self) -> list[FolderFiles]:
        return [f for _, f in self._pending]

    @property
    def done(self) -> bool:
        return self.thread is None or not self.thread.is_alive()

    def wait(self) -> None:
        if self.thread is not None:
            self.thread.join()


@atexit.register
def _at_exit() -> None:
    """The sizes not in the cache yet: stored by a detached copy of this process (the exit
    does not wait for 10^5 stats), once no thread writes any more."""
    end_cache_writes()
    unsaved = [f for count in list(_counting) for f in count.folders if f.sizes_unsaved]
    if unsaved:
        _save_detached(unsaved)


def _lower_priority() -> None:
    """This thread (Linux: a thread is a task with its own nice value) or process yields the
    cores to the work the user waits for: on 2 cores a first start runs the session, the graph
    loader's child and this count at once, and the count is only for later (and for the next
    start's cache). Asking for the sizes still gets them at full speed on an idle core."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
    except (AttributeError, OSError):
        pass


def _save_detached(folders: list[FolderFiles]) -> None:
    def save() -> None:
        _lower_priority()
        for f in folders:
            f.save_sizes_unlocked()

    run_detached(save)
