"""The row names of statistics columns (:class:`.columns.StatsColumns`) as one UTF-8 blob and
offsets: item i is ``blob[off[i]:off[i + 1]]``, a str made when it is read.

Why not a list of str: 300k names a side are ~27 MB of objects, and the statistics CSV is
written by two processes (a forked helper formats half the rows): every str a process reads has
its reference count written, which copies the page holding it, so a shared list of names ended
up in both processes (+~60 MB of the pair's peak). A blob is read without writing to it.
"""

from __future__ import annotations

from typing import Iterable, Iterator, Sequence

import numpy as np


class NameColumn(Sequence):
    __slots__ = ("blob", "off")

    def __init__(self, blob: bytes, off: np.ndarray):
        self.blob, self.off = blob, off      # off: int64, one more than there are names

    @classmethod
    def of(cls, names: Iterable[str]) -> "NameColumn":
        names = list(names)
        joined = "".join(names)
        if joined.isascii():     # one byte a character: the offsets are the lengths' sums
            lengths = np.fromiter(map(len, names), dtype=np.int64, count=len(names))
            return cls(joined.encode("ascii"), np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))
        encoded = [name.encode("utf-8", "surrogatepass") for name in names]
        lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
        return cls(b"".join(encoded), np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))

    def __len__(self) -> int:
        return len(self.off) - 1

    def __getitem__(self, index):
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                return [self[i] for i in range(start, stop, step)]
            return self._texts(self.off[start:stop].tolist(), self.off[start + 1:stop + 1].tolist()) \
                if stop > start else []
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("name index out of range")
        off = self.off
        return self.blob[int(off[index]):int(off[index + 1])].decode("utf-8", "surrogatepass")

    def take(self, rows: np.ndarray) -> list[str]:
        """The names of ``rows`` (an int array, any order)."""
        rows = np.asarray(rows, dtype=np.int64)
        return self._texts(self.off[rows].tolist(), self.off[rows + 1].tolist())

    def _texts(self, starts: list[int], ends: list[int]) -> list[str]:
        blob = self.blob
        return [blob[a:b].decode("utf-8", "surrogatepass") for a, b in zip(starts, ends)]

    def __iter__(self) -> Iterator[str]:
        return iter(self[:])

    def __eq__(self, other) -> bool:
        if isinstance(other, NameColumn):
            return self.blob == other.blob and np.array_equal(self.off, other.off)
        if isinstance(other, (list, tuple)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None     # mutable-looking and compared by value, as a list

    def __repr__(self) -> str:
        return f"NameColumn({len(self)} names)"


def as_names(names: Sequence[str]) -> NameColumn:
    return names if isinstance(names, NameColumn) else NameColumn.of(names)
