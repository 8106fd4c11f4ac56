"""Start-up cache: the parsed op graph and folder listings, kept in the output folder.

A second start on a big workspace should take well under a second (product.md §8): parsing a
20k-op graph text and listing 50k dump files takes seconds, unpickling their result does not.
Every entry is keyed by what it was made from (paths, sizes, mtimes, the pshell version), so
changed inputs miss the cache and are read again. The cache is an optimisation only: any problem
reading or writing it is ignored and the workspace is read from the files.
"""

from __future__ import annotations

import gc
import hashlib
import os
import pickle
from pathlib import Path
from typing import Any

from precision_shell import __version__
from precision_shell.atomic_write import write_atomic
from precision_shell.errors import FormatError

CACHE_FORMAT = 1


def _code_stamp() -> str:
    """The cached objects are instances of these modules' classes: any edit to them (not only a
    version bump) must invalidate old entries."""
    here = Path(__file__).resolve().parent
    digest = hashlib.sha1()
    for rel in ("op_graph.py", "op_node.py", "op_attrs.py", "folder_listing.py", "../formats/dump_names.py",
                "../formats/graph_scan.py"):
        try:
            digest.update((here / rel).read_bytes())
        except OSError:
            pass
    return digest.hexdigest()[:16]


_CODE_STAMP = _code_stamp()


def file_key(path: Path) -> tuple:
    st = path.stat()
    return (str(path.resolve()), st.st_size, st.st_mtime_ns)


def folder_key(path: Path) -> tuple:
    """A folder's mtime changes when entries are added, removed or renamed in it."""
    return (str(path.resolve()), path.stat().st_mtime_ns)


class LoadCache:
    def __init__(self, folder: Path | None):
        self.folder = folder

    def _file(self, kind: str, key: tuple) -> Path | None:
        if self.folder is None:
            return None
        digest = hashlib.sha1(repr((kind, key)).encode()).hexdigest()[:20]
        return self.folder / f"{kind}-{digest}.pkl"

    def load(self, kind: str, key: tuple) -> Any | None:
        path = self._file(kind, key)
        if path is None or not path.exists():
            return None
        try:
            with open(path, "rb") as fh:
                data = fh.read()
        except OSError:
            return None
        return self.value_of(data, key)

    @staticmethod
    def value_of(data: bytes, key: tuple) -> Any | None:
        """The value of an entry's bytes (:meth:`entry`), or None if stale or damaged."""
        gc_was_enabled = gc.isenabled()
        gc.disable()  # unpickling 100k+ small objects: cyclic GC passes would double the time
        try:
            fmt, version, stored_key, value = pickle.loads(data)
        except Exception:  # a stale or damaged cache is never an error: read the files instead
            return None
        finally:
            if gc_was_enabled:
                gc.enable()
        if (fmt, version, stored_key) != (CACHE_FORMAT, (__version__, _CODE_STAMP), key):
            return None
        return value

    @staticmethod
    def entry(key: tuple, value: Any) -> bytes:
        """The bytes of a cache entry (what :meth:`store_entry` writes and :meth:`value_of` reads)."""
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            return pickle.dumps((CACHE_FORMAT, (__version__, _CODE_STAMP), key, value),
                                protocol=pickle.HIGHEST_PROTOCOL)
        finally:
            if gc_was_enabled:
                gc.enable()

    def store_entry(self, kind: str, key: tuple, data: bytes) -> None:
        """Write entry bytes made by :meth:`entry` (atomically; a failed write is no error)."""
        path = self._file(kind, key)
        if path is None:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, lambda fh: fh.write(data), binary=True)
        except (OSError, FormatError):
            pass  # read-only output folder, full disk: start-up just stays uncached

    def store(self, kind: str, key: tuple, value: Any, *, background: bool = False) -> None:
        """Write an entry. ``background``: in a detached child process (POSIX), so the first
        start does not wait the second or so that pickling a 50k-op graph takes."""
        path = self._file(kind, key)
        if path is None:
            return
        if background and hasattr(os, "fork"):
            self._store_detached(kind, key, value)
            return
        self._write(kind, key, value)

    def _store_detached(self, kind: str, key: tuple, value: Any) -> None:
        # Double fork: the grandchild writes, the child exits at once and is reaped here, so no
        # zombie is left behind in a long REPL session. Copy-on-write makes the fork cheap.
        try:
            pid = os.fork()
        except OSError:
            self._write(kind, key, value)
            return
        if pid == 0:  # child
            try:
                if os.fork() == 0:  # grandchild
                    try:
                        os.setsid()
                        self._write(kind, key, value)
                    finally:
                        os._exit(0)
            finally:
                os._exit(0)
        os.waitpid(pid, 0)

    def _write(self, kind: str, key: tuple, value: Any) -> None:
        try:
            data = self.entry(key, value)
        except Exception:
            return  # not picklable: stay uncached
        self.store_entry(kind, key, data)
