"""A rank's entries in dump order (:attr:`.dump.RankDump.entries`) where the statistics scanner
(:mod:`.scan`) read them: a plain entry is held as its name, byte span and leaf count, and made
into an :class:`.dump.Entry` the first time it is read (then kept: the same object each time).

Why: a 100k-entry dump.json made 100k Entry objects at open (~0.3 s and ~40 MB a side), and a
statistics ``vc`` reads none of them (it works on the columns). ``info`` counts kinds and tensors
without making them (:meth:`EntryList.totals`); :attr:`EntryList.names` are the names.
"""

from __future__ import annotations

from array import array
from typing import Callable, Iterator, Sequence

from .layout import entry_name_fields


class EntryList(Sequence):
    """``make(name, start, end, leaves)``: the Entry of a plain entry."""

    def __init__(self, make: Callable[[str, int, int, int], object]):
        self.names: list[str] = []
        self._spans = array("q")         # start, end of each entry ((0, 0): made already)
        self._leaves = array("i")        # leaf count of each plain entry, -1: in _made
        self._made: dict[int, object] = {}
        self._make = make

    def add_span(self, name: str, start: int, end: int, leaves: int) -> None:
        self.names.append(name)
        self._spans.extend((start, end))
        self._leaves.append(leaves)

    def scan_targets(self) -> tuple[list[str], array, array]:
        """(names, spans, leaf counts) the C scanner appends plain entries to itself: it keeps
        them in step, flushing its spans before any :meth:`append` (``_stats_scan.c``)."""
        return self.names, self._spans, self._leaves

    def append(self, entry) -> None:
        self._made[len(self.names)] = entry
        self.names.append(entry.name)
        self._spans.extend((0, 0))
        self._leaves.append(-1)

    def __len__(self) -> int:
        return len(self.names)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self.names)
        found = self._made.get(index)
        if found is None:
            if not 0 <= index < len(self.names):
                raise IndexError("entry index out of range")
            found = self._made[index] = self._make(self.names[index], self._spans[2 * index],
                                                   self._spans[2 * index + 1], self._leaves[index])
        return found

    def __iter__(self) -> Iterator:
        for i in range(len(self.names)):
            yield self[i]

    def totals(self) -> tuple[dict[str, int], int, int]:
        """(entries by kind in order of first appearance, tensors, tensor files), as counting the
        Entry objects gives them, without making any: a plain entry's leaves are all tensors
        without a file."""
        kinds: dict[str, int] = {}
        tensors = files = 0
        made, leaves = self._made, self._leaves
        for i, name in enumerate(self.names):
            entry = made.get(i)
            if entry is None:
                kind = entry_name_fields(name)[0]
                tensors += leaves[i]
            else:
                kind = entry.kind
                tensors += entry.tensor_count
                files += entry.file_count
            kinds[kind] = kinds.get(kind, 0) + 1
        return kinds, tensors, files


def entry_totals(entries: Sequence) -> tuple[dict[str, int], int, int]:
    """:meth:`EntryList.totals` of any entry sequence."""
    if isinstance(entries, EntryList):
        return entries.totals()
    kinds: dict[str, int] = {}
    tensors = files = 0
    for e in entries:
        kinds[e.kind] = kinds.get(e.kind, 0) + 1
        tensors += e.tensor_count     # without building the leaves (info at start-up)
        files += e.file_count
    return kinds, tensors, files
