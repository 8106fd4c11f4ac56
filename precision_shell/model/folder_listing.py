"""List the files of one kind (dumps, goldens) in a folder tree, cached per folder.

Used for dump folders (tens of thousands of files) and golden folders, so start-up cost matters:

* a folder's listing is columnar: its accepted file names as one ``\\0``-joined string (a list
  of 10^5 ``str`` is made only when a lookup needs the names), a small per-kind summary (counts,
  hashed-name mapping) and sizes in an ``array``. Indexes parse names only on first lookup.
* sizes cost a stat per file (2-3 µs, mostly in the kernel: 1.8 s for a tree of 600k files, more
  than the whole rest of the scan), so they are read on first use (``FolderFiles.sizes``) or by a
  :class:`SizeCount` in a background thread after start-up, and then added to the folder's cache
  entry, where the next start finds them.
* the cache entry (plain JSON, see cache_codec.py) holds the names as one ``\\0``-joined string
  and the sizes packed (cache_codec.packed): one value each to decode and check, not 10^5.

Paths are kept as a shared folder ``Path`` plus a file name: a ``Path`` per file costs more than
the listing itself.
"""

from __future__ import annotations

import functools
import os
import re
import stat
import sys
import threading
from array import array
from bisect import bisect_right
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path
from typing import Any, Callable

from precision_shell.formats.input_files import NOT_REGULAR, cannot_list
from precision_shell.model.cache_codec import CacheKind, fields, need, packed, strings, unpacked_array
from precision_shell.model.load_cache import LoadCache, folder_key, sha1

# select(file names, folder, warnings) -> (accepted names in the given order, summary): which
# names are files of this kind, and what the index needs from them before parsing any (counts,
# names to treat specially). The summary must be JSON-able.
NameSelector = Callable[[list[str], Path, list[str]], tuple[list[str], Any]]
# read_summary(JSON of a summary, the folder's number of names) -> the summary; EntryError if it
# is not one
SummaryReader = Callable[[Any, int], Any]

_SEPARATOR = "\0"  # the one character no file name can hold


@functools.lru_cache(maxsize=None)
def _module_stamp(module: str) -> str:
    """The selector's module makes the cached summaries: an edit to it invalidates them (the
    cache's own code stamp covers this module and the name grammar)."""
    try:
        return sha1(Path(sys.modules[module].__file__).read_bytes()).hexdigest()[:16]
    except (KeyError, TypeError, OSError):
        return ""


class FolderFiles:
    """The accepted files of one folder: ``names`` (in the selector's order; ``joined``, the
    same as one string, and ``count`` need no list), ``summary`` and ``sizes()``, plus what the
    scan found on the way (``subdirs``, ``warnings``)."""

    def __init__(self, folder: Path, names: list[str] | str, summary: Any, subdirs: list[str],
                 warnings: list[str], sizes: array | None = None, count: int | None = None):
        self.folder = folder
        self.joined = names if isinstance(names, str) else _SEPARATOR.join(names)
        if count is None:  # (a cache entry's reader counted them already)
            count = self.joined.count(_SEPARATOR) + 1 if self.joined else 0
        self.count = count
        self.summary = summary
        self.subdirs = subdirs
        self.warnings = warnings
        self._sizes = sizes
        self._cache_entry: tuple[LoadCache, CacheKind, tuple] | None = None  # where sizes are added
        self._sizes_saved = sizes is not None  # in the cache entry (read from it, or written)
        self._sizes_failed = False             # a file could not be stat'ed: sizes not cached
        self._lock = threading.Lock()  # the REPL's completion warm-up thread may ask too

    @functools.cached_property
    def names(self) -> list[str]:
        """The file names as a list: made on first use (a lookup), kept from then on."""
        return self._split()

    def _split(self) -> list[str]:
        if "names" in self.__dict__:
            return self.__dict__["names"]
        return self.joined.split(_SEPARATOR) if self.joined else []

    @property
    def has_sizes(self) -> bool:
        return self._sizes is not None

    def keep_sizes_in(self, cache: LoadCache, kind: CacheKind, key: tuple) -> None:
        """Sizes read later are added to this cache entry (the listing itself is already there)."""
        self._cache_entry = (cache, kind, key)

    def sizes(self, warnings: list[str]) -> array:
        """File sizes in ``names`` order, read now if not known. A file that can no longer be
        read counts 0 bytes, with a warning in ``warnings``, and its sizes are not cached."""
        with self._lock:
            if self._sizes is None:
                sizes, problems = _stat_sizes(self.folder, self._split())  # the list: not kept
                self._sizes_failed = bool(problems)
                self._sizes = sizes
                if problems:
                    warnings += problems
                elif self._cache_entry is not None:
                    cache, kind, key = self._cache_entry
                    with _STORING:  # a background count's write is not cut off by the exit
                        if not _exiting:
                            cache.store(kind, key, self)
                            self._sizes_saved = True
            return self._sizes

    @property
    def sizes_unsaved(self) -> bool:
        """Whether this folder has a cache entry that does not hold its sizes (yet)."""
        return self._cache_entry is not None and not self._sizes_saved and not self._sizes_failed

    def save_sizes_unlocked(self) -> None:
        """Read the sizes if not known and write them to the cache entry, without the lock: for
        a process forked at exit, where a thread of the parent may have held it."""
        sizes = self._sizes
        if sizes is None:
            sizes, problems = _stat_sizes(self.folder, self._split())
            if problems:
                return
        self._sizes = sizes
        cache, kind, key = self._cache_entry
        cache.store(kind, key, self)

    def size_of(self, i: int, warnings: list[str], name: str | None = None) -> int:
        """Size of ``names[i]`` (``name``, when the caller has it): from ``sizes`` when known,
        else one stat (a single lookup does not read 10^5 sizes)."""
        if self._sizes is not None:
            return self._sizes[i]
        path = self.folder / (self.names[i] if name is None else name)
        try:
            return os.stat(path).st_size
        except OSError as exc:
            warnings.append(f"{path}: cannot stat ({exc.strerror})")
            return 0

    def positions_of(self, wanted: set[str]) -> dict[str, int]:
        """Name -> position of the names in ``wanted`` (a few) found here, without the list."""
        framed, found = _SEPARATOR + self.joined + _SEPARATOR, {}
        for name in wanted:
            at = framed.find(_SEPARATOR + name + _SEPARATOR)
            if at >= 0:
                found[name] = framed.count(_SEPARATOR, 0, at)
        return found

    def cache_value(self) -> dict:
        """What the folder's cache entry holds (plain data; :func:`_listing_parts` reads it)."""
        sizes = None if self._sizes is None else packed(self._sizes)
        return {"names": self.joined, "sizes": sizes, "summary": self.summary,
                "subdirs": self.subdirs, "warnings": self.warnings}


_ENTRY = ("names", "sizes", "summary", "subdirs", "warnings")
_NOT_NAMES = ("", ".", "..")
_INNER_NOT_NAME = re.compile(f"{_SEPARATOR}\\.{{0,2}}{_SEPARATOR}")  # one regex pass, not three finds


def _listing_parts(read_summary: SummaryReader, value: Any, key: tuple) -> tuple:
    """(names, summary, subdirs, warnings, sizes, count) of a :meth:`FolderFiles.cache_value`,
    checked."""
    joined, size_text, summary, subdirs, warnings = fields(value, "listing", _ENTRY)
    need(type(joined) is str and "/" not in joined, "names: not a string of file names")
    first, last = joined.partition(_SEPARATOR)[0], joined.rpartition(_SEPARATOR)[2]
    need(not joined or (first not in _NOT_NAMES and last not in _NOT_NAMES and not _INNER_NOT_NAME.search(joined)),
         "names: an empty name, '.' or '..'")
    count = joined.count(_SEPARATOR) + 1 if joined else 0
    sizes = None
    if size_text is not None:
        sizes = unpacked_array(size_text, "sizes", count)  # the narrowest ints that hold them
    strings(subdirs, "subdirs")
    need(all(subdirs) and not any(_SEPARATOR in d or "/" in d or d in (".", "..") for d in subdirs),
         "subdirs: not folder names")
    return joined, read_summary(summary, count), subdirs, strings(warnings, "warnings"), sizes, count


def listing_kind(name: str, read_summary: SummaryReader) -> CacheKind:
    return CacheKind(name, FolderFiles.cache_value, functools.partial(_listing_parts, read_summary))


def _stat_sizes(folder: Path, names: list[str]) -> tuple[array, list[str]]:
    sizes, problems = array("q", bytes(8 * len(names))), []
    stat = os.stat
    dir_fd = None
    if stat in os.supports_dir_fd:
        try:
            dir_fd = os.open(folder, os.O_RDONLY)
        except OSError:
            pass
    try:
        for i, name in enumerate(names):
            try:  # relative to the open folder: one path component to resolve instead of ten
                sizes[i] = (stat(name, dir_fd=dir_fd) if dir_fd is not None
                            else stat(os.path.join(folder, name))).st_size
            except OSError as exc:
                problems.append(f"{folder / name}: cannot stat ({exc.strerror})")
    finally:
        if dir_fd is not None:
            os.close(dir_fd)
    return sizes, problems


@dataclass
class Listing:
    folders: list[FolderFiles] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def total_bytes(self) -> int:
        """Sum of all file sizes (reads them if not known; problems go to ``warnings``)."""
        return sum(sum(f.sizes(self.warnings)) for f in self.folders)

    def sizes_known(self) -> bool:
        """Whether every file's size is read already (``total_bytes`` would not stat)."""
        return all(f.has_sizes for f in self.folders)

    @functools.cached_property
    def _starts(self) -> list[int]:
        return list(accumulate((f.count for f in self.folders[:-1]), initial=0))

    def locate(self, position: int) -> tuple[FolderFiles, int]:
        """Folder and index in it of the ``position``-th file, counting through the folders in
        order (an index keeps one int per file instead of a (folder, index) pair)."""
        starts = self._starts
        k = bisect_right(starts, position) - 1
        return self.folders[k], position - starts[k]


_STORING = threading.Lock()  # held by a cache write of sizes: the exit waits for it
_exiting = False


def end_cache_writes() -> None:
    """No sizes are stored by this process from now on; a write under way is waited for (a
    daemon thread would die in the middle of it and leave its temporary file)."""
    global _exiting
    with _STORING:
        _exiting = True


def read_entries(folder: Path) -> tuple[list[str], list[os.DirEntry]]:
    """(names of the regular files, the other entries) of ``folder``, in one ``os.scandir``
    pass; OSError when it cannot be listed."""
    others: list[os.DirEntry] = []  # entries that are not regular files: few, looked at one by one
    try:
        with os.scandir(folder) as it:
            # names only: a DirEntry holds its name and its path (~300 bytes); the type comes
            # with the entry (d_type), no stat. `or` files the others aside.
            return [entry.name for entry in it if entry.is_file(follow_symlinks=False) or others.append(entry)], others
    except OSError:
        pass
    with os.scandir(folder) as it:  # (without d_type) an entry could not be looked at: all as others
        return [], list(it)


# Folders that workspace discovery read, kept for their listing (one scandir per folder at
# start-up): path -> (stamp, names, other entries). Bounded; cleared once the session is loaded.
_remembered: dict[str, tuple[tuple, list[str], list[os.DirEntry]]] = {}
_REMEMBER_AT_MOST = 1_000_000  # names: ~80 MB


def folder_stamp(folder: Path) -> tuple:
    """What changes when entries are added, removed or renamed in ``folder`` (() if gone)."""
    try:
        st = os.stat(folder)
    except OSError:
        return ()
    return st.st_dev, st.st_ino, st.st_mtime_ns


def remember_entries(folder: Path, stamp: tuple, names: list[str], others: list[os.DirEntry]) -> None:
    """Keep what :func:`read_entries` read of ``folder`` (its ``stamp`` taken before) for the
    next listing of it, while the remembered names stay under the bound."""
    if stamp and sum(len(r[1]) for r in _remembered.values()) + len(names) <= _REMEMBER_AT_MOST:
        _remembered[os.fspath(folder)] = (stamp, names, others)


def forget_entries() -> None:
    _remembered.clear()


def _scan_one(folder: Path, select: NameSelector) -> tuple[list[str], Any, list[str], list[str], bool]:
    """(accepted names, summary, subfolders, warnings, whether the folder could be listed) of
    one folder, from its directory entries only (plus a stat for each accepted symbolic link,
    which may point nowhere). Subfolders named like accepted files, and links back to a folder
    above, are named in the warnings (the links are not followed)."""
    remembered = _remembered.pop(os.fspath(folder), None)
    try:
        if remembered is not None and remembered[0] == folder_stamp(folder):  # read by discovery
            _, names, others = remembered
        else:
            names, others = read_entries(folder)
    except OSError as exc:
        warnings = [cannot_list(folder, exc)]
        return *select([], folder, warnings), [], warnings, False
    if not others:  # regular files only (the usual dump folder)
        warnings = []
        accepted, summary = select(names, folder, warnings)
        return accepted, summary, [], warnings, True
    subdirs, links, special, warnings = [], {}, [], []
    for entry in others:
        try:
            if entry.is_dir():
                if not (entry.is_symlink() and _loops_back(folder, entry.path, warnings)):
                    subdirs.append(entry.name)
                continue
            if entry.is_symlink():
                links[entry.name] = entry
            elif not entry.is_file():  # a FIFO would block the read forever, a device stream
                special.append(entry.name)
                continue
            names.append(entry.name)
        except OSError as exc:
            warnings.append(f"{entry.path}: cannot stat ({exc.strerror})")
    accepted, summary = select(names, folder, warnings)
    # folders and special files where a file of this kind is expected: named, not silently skipped
    if subdirs:
        warnings += [f"{folder / name}: is a directory, not a file" for name in select(subdirs, folder, [])[0]]
    if special:
        warnings += [f"{folder / name}: {NOT_REGULAR}" for name in select(special, folder, [])[0]]
    if links:  # a dangling link is reported and left out, as a file that cannot be read
        broken = set()
        for name in links.keys() & set(accepted):
            try:
                if not stat.S_ISREG(links[name].stat().st_mode):
                    warnings.append(f"{links[name].path}: {NOT_REGULAR}")
                    broken.add(name)
            except OSError as exc:
                warnings.append(f"{links[name].path}: cannot stat ({exc.strerror})")
                broken.add(name)
        if broken:
            accepted, summary = select([n for n in names if n not in broken], folder, [])
    return accepted, summary, sorted(subdirs), warnings, True


def _loops_back(folder: Path, link: str, warnings: list[str]) -> bool:
    """Whether the folder link ``link`` in ``folder`` points to ``folder`` or a folder above it
    (then listing below it would never end); says so in ``warnings``."""
    target, here = os.path.realpath(link), os.path.realpath(folder)
    if here == target or here.startswith(target.rstrip(os.sep) + os.sep):
        warnings.append(f"{link}: symbolic link loop (points to {target}, a folder above it); not followed")
        return True
    return False


def list_tree(root: Path, select: NameSelector, *, kind: str, read_summary: SummaryReader, recursive: bool,
              cache: LoadCache | None = None, extra_key: Callable[[Path], tuple] = lambda p: ()) -> Listing:
    """``kind`` names the folders' cache entries; ``read_summary`` checks a cached summary."""
    listing = Listing()
    entry_kind = listing_kind(kind, read_summary)
    stack = [root]
    while stack:
        folder = stack.pop()
        key = None
        files = None
        if cache is not None:
            try:
                key = (_module_stamp(select.__module__),) + folder_key(folder) + extra_key(folder)
                cached = cache.load(entry_kind, key)
                if cached is not None:
                    files = FolderFiles(folder, *cached)
            except OSError:
                key = None
        if files is None:
            *scanned, listed = _scan_one(folder, select)
            files = FolderFiles(folder, *scanned)
            if not listed:
                key = None  # not cached: an unreadable folder is read again next time
            elif key is not None:
                cache.store(entry_kind, key, files)
        if key is not None:
            files.keep_sizes_in(cache, entry_kind, key)
        listing.folders.append(files)
        listing.warnings += files.warnings
        if recursive:
            stack.extend(folder / d for d in reversed(files.subdirs))
    return listing
