"""Golden (CPU/GPU run) tensors: ``{escaped op}.{output_index}.{timestamp}.npy`` files.

Keyed the way the vendor engine looks them up (formats.md §5): the framework op name with ``/``
and ``.`` replaced by ``_``, plus the output index; the newest timestamp wins.

A scanned folder is indexed on first lookup: start-up needs only the tensor count and total size,
which the folder listing's summary gives without parsing 10^5 names (see folder_listing.py).
"""

from __future__ import annotations

import threading
from itertools import repeat
from pathlib import Path
from typing import NamedTuple

from precision_shell.formats.dump_names import (
    GoldenName, escape_op_name, golden_keys_in, golden_names_counted, parse_golden_name, parse_golden_names,
)
from precision_shell.model.cache_codec import ints, need
from precision_shell.model.folder_listing import Listing, list_tree
from precision_shell.model.load_cache import LoadCache


class GoldenFile(NamedTuple):  # a tuple: 10^5 of them are built on first lookup
    folder: Path
    filename: str
    name: GoldenName
    size: int

    @property
    def path(self) -> Path:
        return self.folder / self.filename


def _recency(name: GoldenName, filename: str) -> tuple[int, str]:
    # several dumps of one tensor: the newest timestamp wins (formats.md §5)
    return name.timestamp or 0, filename


_golden_file = GoldenFile._make  # tuple.__new__ directly: a third of the cost of GoldenFile(...)


class GoldenIndex:
    """``GoldenIndex(folder, files)`` indexes the given files now; ``GoldenIndex.from_listing``
    indexes a folder listing lazily: count and size from the listing's summary, lookups from the
    file names' keys, and a file's name is parsed when its tensor is looked up."""

    def __init__(self, folder: Path | None, files: list[GoldenFile]):
        self.folder = folder
        self.warnings: list[str] = []
        self._listing: Listing | None = None
        self._lock = threading.Lock()  # the REPL's completion warm-up thread may build it too
        self._positions: dict[tuple[str, int], int | tuple[int, ...]] | None = None
        self._found: dict[tuple[str, int], GoldenFile] = {}
        self._index(files)

    @classmethod
    def from_listing(cls, folder: Path, listing: Listing) -> "GoldenIndex":
        index = cls(folder, [])
        index.warnings = listing.warnings  # shared: sizes read later add their problems there
        index._listing, index._by_key = listing, None
        return index

    def _index(self, files: list[GoldenFile]) -> None:
        by_key: dict[tuple[str, int], GoldenFile] = {}
        for f in files:
            key = (f.name.op_name, f.name.output_index)
            old = by_key.get(key)
            if old is None or _recency(f.name, f.filename) > _recency(old.name, old.filename):
                by_key[key] = f
        self._by_key = by_key

    def _key_positions(self) -> dict[tuple[str, int], int | tuple[int, ...]]:
        """(op, index) -> position of its file in the listing, or of its files (folder order)
        when there are several."""
        if self._positions is None:
            with self._lock:
                if self._positions is None:
                    positions: dict[tuple[str, int], int | tuple[int, ...]] = {}
                    position = 0
                    for folder_files in self._listing.folders:
                        for _name, op, index in golden_keys_in(folder_files.names):
                            old = positions.get((op, index))
                            if old is None:
                                positions[op, index] = position
                            else:
                                positions[op, index] = (old if isinstance(old, tuple) else (old,)) + (position,)
                            position += 1
                    self._positions = positions
        return self._positions

    def _resolve(self, key: tuple[str, int], where=None) -> GoldenFile | None:
        """The newest file of one tensor, parsing only its own file names (``where``: their
        positions, when the caller found them)."""
        if self._by_key is not None:
            return self._by_key.get(key)
        found = self._found.get(key)
        if found is None:
            if where is None:
                where = self._key_positions().get(key)
            for position in (where,) if isinstance(where, int) else where or ():
                folder_files, i = self._listing.locate(position)
                filename = folder_files.names[i]
                f = GoldenFile(folder_files.folder, filename, parse_golden_name(filename),
                               folder_files.size_of(i, self.warnings))
                if found is None or _recency(f.name, f.filename) > _recency(found.name, found.filename):
                    found = f
            if found is not None:
                self._found[key] = found
        return found

    def _parse_listing(self) -> list[GoldenFile]:
        files: list[GoldenFile] = []
        for f in self._listing.folders:
            names = f.names
            files += map(_golden_file, zip(repeat(f.folder), names, parse_golden_names(names),
                                           f.sizes(self.warnings)))
        return files

    @property
    def by_key(self) -> dict[tuple[str, int], GoldenFile]:
        if self._by_key is None:
            with self._lock:
                if self._by_key is None:
                    self._index(self._parse_listing())
        return self._by_key

    def _keys(self):
        return self._by_key if self._by_key is not None else self._key_positions()

    def __len__(self) -> int:
        if self._by_key is None and len(self._listing.folders) == 1:
            return self._listing.folders[0].summary[0]
        return len(self._keys())

    @property
    def total_bytes(self) -> int:
        """Bytes of the tensors the index resolves to (the newest file of each)."""
        folders = self._listing.folders if self._by_key is None else ()
        if len(folders) == 1:  # without parsing: all files but the shadowed ones
            sizes = folders[0].sizes(self.warnings)
            return sum(sizes) - sum(sizes[i] for i in folders[0].summary[1])
        for f in folders:  # every size is needed: read them folder by folder, not file by file
            f.sizes(self.warnings)
        return sum(self._resolve(key).size for key in self._keys())

    @property
    def known_bytes(self) -> int | None:
        """``total_bytes`` when every size is read already, else None (no stat here)."""
        if self._by_key is None and not self._listing.sizes_known():
            return None
        return self.total_bytes

    @property
    def listing(self) -> Listing | None:
        """The folder listing the index was built from (None: built from given files)."""
        return self._listing

    def find(self, op_name: str, output_index: int) -> GoldenFile | None:
        return self._resolve((escape_op_name(op_name), output_index))

    def outputs_of(self, op_name: str) -> list[GoldenFile]:
        name = escape_op_name(op_name)
        if self._by_key is None and self._positions is None:  # one op (ni): its names only
            where = self._positions_of(name)
            return [self._resolve(key, where[key]) for key in sorted(where)]
        return [self._resolve(key) for key in sorted(k for k in self._keys() if k[0] == name)]

    def _positions_of(self, name: str) -> dict[tuple[str, int], tuple[int, ...]]:
        """Listing positions of the golden files of the op escaped as ``name``, parsing only the
        file names that start with it (one op of 10^5 files: ~10 ms, not ~0.3 s)."""
        prefix, found, base = name + ".", {}, 0
        for folder_files in self._listing.folders:
            names = folder_files.names
            hits = [i for i, n in enumerate(names) if n.startswith(prefix)]
            keyed = golden_keys_in([names[i] for i in hits])
            by_name = {n: i for i, n in zip(hits, (names[i] for i in hits))}
            for n, op, index in keyed:
                if op == name:
                    found[op, index] = found.get((op, index), ()) + (base + by_name[n],)
            base += len(names)
        return found

    def names(self) -> list[str]:
        """``escaped_op:index`` of every golden tensor, sorted (for listings and completion)."""
        return [f"{name}:{idx}" for name, idx in sorted(self._keys())]


def _select_goldens(names: list[str], folder: Path, warnings: list[str]) -> tuple[list[str], tuple]:
    """The golden files among a folder's file names; summary: (number of distinct tensors,
    positions of the files that a newer file of the same tensor shadows)."""
    accepted, distinct = golden_names_counted(names)
    shadowed: list[int] = []
    if distinct < len(accepted):  # rare: several files of one tensor; the newest wins
        keyed = golden_keys_in(accepted)
        newest: dict[tuple[str, int], int] = {}
        for i, (n, op, index) in enumerate(keyed):
            key = (op, index)
            old = newest.get(key)
            if old is None or (_recency(parse_golden_name(n), n) >
                               _recency(parse_golden_name(accepted[old]), accepted[old])):
                newest[key] = i
        winners = set(newest.values())
        shadowed = [i for i in range(len(accepted)) if i not in winners]
    return accepted, (distinct, shadowed)


def _read_golden_summary(value, count: int) -> tuple[int, list[int]]:
    """A cached summary of :func:`_select_goldens` (JSON: [distinct, shadowed]) of ``count``
    files, checked."""
    need(type(value) is list and len(value) == 2, "summary: not [distinct, shadowed]")
    distinct, shadowed = value
    ints([distinct], "summary: distinct", 1, 0, count + 1)
    ints(shadowed, "summary: shadowed", count - distinct, 0, count)
    need(all(map(int.__lt__, shadowed, shadowed[1:])), "summary: shadowed not in order")
    return distinct, shadowed


def scan_golden_dir(folder: Path | None, cache: LoadCache | None = None) -> GoldenIndex:
    if folder is None:
        return GoldenIndex(None, [])
    return GoldenIndex.from_listing(folder, list_tree(Path(folder), _select_goldens, kind="golden",
                                                      read_summary=_read_golden_summary,
                                                      recursive=True, cache=cache))
