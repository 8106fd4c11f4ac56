"""Start-up cache: the parsed op graph and folder listings, kept in the output folder.

A second start on a big workspace should take well under a second (product.md §8): parsing a
20k-op graph text and listing 50k dump files takes seconds, reading back their result does not.
Every entry is keyed by what it was made from (paths, sizes, mtimes) and by the pshell version
and code that made it, so changed inputs miss the cache and are read again. The cache is an
optimisation only: any problem reading or writing it never stops pshell.

Entries are plain data (JSON, then raw array bytes for big columns, see cache_codec.py): the output folder can be shared, so a file
planted there must not be able to run code. Each entry records its format, the pshell version
and code stamp, its kind and the key it was made from, and every field is checked when read; an
entry that is damaged, truncated or not what pshell writes is ignored with one warning line
(``cache entry ignored: <file>: <reason>``, in ``warnings``) and rebuilt from the files.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from precision_shell import __version__
from precision_shell.atomic_write import write_atomic
from precision_shell.errors import FormatError
from precision_shell.formats.input_files import open_regular
from precision_shell.model.detached import run_detached
from precision_shell.model.cache_codec import Attached, CacheKind, EntryError, fields, need
from precision_shell.gc_pause import gc_paused

try:   # CPython's own SHA-1, the same digests as hashlib's without loading OpenSSL (~2 ms at start)
    from _sha1 import sha1
except ImportError:   # pragma: no cover - another interpreter
    from hashlib import sha1

CACHE_FORMAT = 2  # 1: pickled entries (never read: a different file name)
MAX_ENTRY_BYTES = 1 << 30  # a 50k-op graph is ~10 MB; anything near this is not ours
_FIELDS = ("format", "pshell", "kind", "key", "value")


def _code_stamp() -> str:
    """The entries are made and read by these modules: any edit to them (not only a version
    bump) must invalidate old entries."""
    here = Path(__file__).resolve().parent
    digest = sha1()
    for rel in ("load_cache.py", "cache_codec.py", "graph_cache.py", "op_graph.py", "op_node.py",
                "op_attrs.py", "folder_listing.py", "../formats/dump_names.py", "../formats/graph/scan.py"):
        try:
            digest.update((here / rel).read_bytes())
        except OSError:
            pass
    return digest.hexdigest()[:16]


_CODE_STAMP = _code_stamp()
_MADE_BY = [__version__, _CODE_STAMP]


def _digest(text: str) -> str:
    return sha1(text.encode("utf-8", "replace")).hexdigest()[:16]


_VERSION_DIGEST = _digest(repr((CACHE_FORMAT, _MADE_BY)))


def _prefix(kind: CacheKind, key: tuple) -> str:
    return f"{kind.name}-{_digest(repr((kind.name, key)))}-"


def file_key(path: Path) -> tuple:
    st = path.stat()
    return (str(path.resolve()), st.st_size, st.st_mtime_ns)


def folder_key(path: Path) -> tuple:
    """A folder's mtime changes when entries are added, removed or renamed in it."""
    return (str(path.resolve()), path.stat().st_mtime_ns)


def _plain(key: tuple) -> Any:
    """The key as it reads back from JSON (tuples become lists)."""
    return json.loads(json.dumps(key))


class LoadCache:
    """``warnings``: where ignored entries are reported (the session's load warnings)."""

    def __init__(self, folder: Path | None, warnings: list[str] | None = None):
        self.folder = folder
        self.warnings = warnings if warnings is not None else []
        self._warned: set[str] = set()

    def _file(self, kind: CacheKind, key: tuple) -> Path | None:
        """``{kind}-{digest of the key}-{digest of the version}.json``: an entry of another pshell
        version is another file, never read (nor warned about), and replaced when this version
        stores the same key."""
        if self.folder is None:
            return None
        return self.folder / f"{_prefix(kind, key)}{_VERSION_DIGEST}.json"

    def ignored(self, where: object, reason: str) -> None:
        """Report an entry that was not used (once per file)."""
        where = str(where)
        if where not in self._warned:
            self._warned.add(where)
            self.warnings.append(f"cache entry ignored: {where}: {reason[:200]}")

    def load(self, kind: CacheKind, key: tuple) -> Any | None:
        """The value stored for ``key``, or None (no entry; a bad one is reported and ignored)."""
        path = self._file(kind, key)
        if path is None:
            return None
        try:
            with os.fdopen(open_regular(path), "rb") as fh:  # a planted FIFO must not hang start-up
                data = fh.read(MAX_ENTRY_BYTES + 1)
        except FileNotFoundError:
            return None
        except OSError as exc:
            self.ignored(path, f"cannot read ({exc.strerror or exc})")
            return None
        return self.value_of(kind, data, key, path)

    def value_of(self, kind: CacheKind, data: bytes, key: tuple, where: object) -> Any | None:
        """The value of an entry's bytes (:meth:`entry`), or None, reported, if it is not a valid
        entry of ``kind`` made from ``key`` by this pshell."""
        try:
            with gc_paused():
                return self._decode(kind, data, key)
        except EntryError as exc:
            self.ignored(where, str(exc))
        except RecursionError:
            self.ignored(where, "nested too deeply")
        except Exception as exc:  # whatever a damaged entry does to a decoder: never an error
            self.ignored(where, f"{type(exc).__name__}: {exc}")
        return None

    @staticmethod
    def _decode(kind: CacheKind, data: bytes, key: tuple) -> Any:
        need(len(data) <= MAX_ENTRY_BYTES, "too large")
        end = data.find(b"\n")  # a JSON line, then the raw blobs (Attached); no copy of the blobs
        newline = end >= 0
        header = data[:end] if newline else data
        try:
            text = header.decode("utf-8")
        except UnicodeDecodeError:
            raise EntryError("not UTF-8") from None
        try:
            entry = json.loads(text)
        except ValueError as exc:  # JSONDecodeError, or an integer too long to convert
            raise EntryError(f"not JSON ({exc})") from None
        names = _FIELDS + ("blobs",) if newline else _FIELDS
        fmt, made_by, stored_kind, stored_key, value, *sizes = fields(entry, "entry", names)
        need(fmt == CACHE_FORMAT and type(fmt) is int, f"format {fmt!r}, expected {CACHE_FORMAT}")
        need(made_by == _MADE_BY, f"made by pshell {made_by!r}, this is {_MADE_BY!r}")
        need(stored_kind == kind.name, f"kind {stored_kind!r}, expected {kind.name!r}")
        need(stored_key == _plain(key), "made from other files (key differs)")
        if newline:
            sizes = sizes[0]
            need(type(sizes) is list and set(map(type, sizes)) <= {int} and all(n >= 0 for n in sizes),
                 "blobs: not a list of sizes")
            start = len(header) + 1
            need(start + sum(sizes) == len(data), "blobs: sizes do not add up (truncated?)")
            view, blobs = memoryview(data), []
            for n in sizes:
                blobs.append(view[start:start + n])
                start += n
            value = Attached(value, blobs)
        return kind.decode(value, key)

    @staticmethod
    def entry(kind: CacheKind, key: tuple, value: Any) -> bytes:
        """The bytes of a cache entry (what :meth:`store_entry` writes and :meth:`value_of` reads):
        ASCII JSON (file names that are not UTF-8 travel as \\udcxx escapes), then, when the kind
        attaches raw blobs (cache_codec.Attached), a newline and the blobs one after another."""
        encoded = kind.encode(value)
        blobs = None
        if isinstance(encoded, Attached):
            encoded, blobs = encoded
        entry = {"format": CACHE_FORMAT, "pshell": _MADE_BY, "kind": kind.name, "key": key, "value": encoded}
        if blobs is not None:
            entry["blobs"] = [len(b) for b in blobs]
        header = json.dumps(entry, separators=(",", ":"), allow_nan=False).encode("ascii")
        return header if blobs is None else b"".join([header, b"\n", *blobs])

    def store_entry(self, kind: CacheKind, key: tuple, data: bytes) -> None:
        """Write entry bytes made by :meth:`entry` (atomically; a failed write is no error)."""
        path = self._file(kind, key)
        if path is None:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, lambda fh: fh.write(data), binary=True)
            for old in path.parent.glob(f"{_prefix(kind, key)}*.json"):  # other versions' entries
                if old != path:
                    old.unlink(missing_ok=True)
        except (OSError, FormatError):
            pass  # read-only output folder, full disk: start-up just stays uncached

    def store(self, kind: CacheKind, key: tuple, value: Any, *, background: bool = False) -> None:
        """Write an entry. ``background``: in a detached child process (POSIX), so the first
        start does not wait the second or so that encoding a 50k-op graph takes."""
        path = self._file(kind, key)
        if path is None:
            return
        if background:
            self._store_detached(kind, key, value)
            return
        self._write(kind, key, value)

    def _store_detached(self, kind: CacheKind, key: tuple, value: Any) -> None:
        if not run_detached(lambda: self._write(kind, key, value)):
            self._write(kind, key, value)

    def _write(self, kind: CacheKind, key: tuple, value: Any) -> None:
        try:
            data = self.entry(kind, key, value)
        except (ValueError, TypeError, KeyError, OverflowError):
            return  # a value its kind cannot encode (see the encoders): stay uncached
        self.store_entry(kind, key, data)
