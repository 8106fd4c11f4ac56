"""Plain-data start-up cache entries: what each kind stores, and the checks that read it back.

The output folder may be shared or planted, so a cache entry must never be able to run code (no
pickle): an entry's value is JSON, and its kind's ``decode`` checks every field it reads (types,
lengths, ranges) before building pshell's own objects from it, by explicit constructors. A check
that fails raises :class:`EntryError` with the reason, and the cache (load_cache.py) ignores the
entry with one warning. The values are laid out in columns (one JSON list per field) so that
decoding and checking 10^5 ops or files runs at C speed: ``set(map(type, column))``, ``min``,
``max`` and ``sum`` over whole lists instead of a Python step per value.
"""

from __future__ import annotations

import base64
from array import array
from itertools import accumulate
from typing import Any, Callable, NamedTuple

__all__ = ["Attached", "CacheKind", "EntryError", "counts", "cut", "need", "fields", "ints", "packed", "strings",
           "from_table", "to_table", "unpacked"]


class EntryError(ValueError):
    """A cache entry is not what its kind stores: the reason, for the warning."""


class CacheKind(NamedTuple):
    """One kind of cache entry: ``encode(value)`` gives JSON-able data (or raises to leave the
    value uncached), ``decode(data, key)`` checks it against the key it was stored under and
    builds the value (EntryError if it is not what ``encode`` makes)."""

    name: str  # the entry file's prefix
    encode: Callable[[Any], Any]
    decode: Callable[[Any, tuple], Any]


class Attached(NamedTuple):
    """What an ``encode`` may return instead of plain JSON: the JSON value and raw byte blobs it
    refers to by index (array columns: written as they are, read back with ``np.frombuffer``,
    no base64 and no number to parse). ``decode`` then gets an Attached whose blobs are
    memoryviews of the entry, checked by the kind like any other field."""

    value: Any
    blobs: list


def need(ok: bool, reason: str) -> None:
    if not ok:
        raise EntryError(reason)


_NONE = type(None)


def fields(value: Any, what: str, names: tuple[str, ...]) -> list:
    """The values of ``names`` in the JSON object ``value`` (exactly these keys)."""
    need(type(value) is dict and value.keys() == set(names),
         f"{what}: expected an object with {', '.join(names)}")
    return [value[n] for n in names]


def strings(value: Any, what: str, length: int | None = None, *, nullable: bool = False) -> list:
    """A list of str (and None when ``nullable``), of ``length`` items when given."""
    need(type(value) is list, f"{what}: not a list")
    need(length is None or len(value) == length, f"{what}: {len(value)} items, expected {length}")
    need(set(map(type, value)) <= ({str, _NONE} if nullable else {str}), f"{what}: not all strings")
    return value


def ints(value: Any, what: str, length: int | None = None, lo: int | None = 0, hi: int | None = None) -> list:
    """A list of int with ``lo <= v < hi`` (None: that side unchecked, one pass less)."""
    need(type(value) is list, f"{what}: not a list")
    need(set(map(type, value)) <= {int}, f"{what}: not all integers")  # bool is not int here
    return _in_range(value, what, length, lo, hi)


def _in_range(value: list, what: str, length: int | None, lo: int | None, hi: int | None) -> list:
    need(length is None or len(value) == length, f"{what}: {len(value)} items, expected {length}")
    if value:
        need((lo is None or min(value) >= lo) and (hi is None or max(value) < hi), f"{what}: value out of range")
    return value


_WIDTHS = "bhiq"  # array typecodes of 1, 2, 4, 8-byte signed ints


def packed(values: list[int]) -> str:
    """A long column of ints as base64 of the narrowest signed ints that hold them, after the
    typecode ("b:AQID"): read back (:func:`unpacked`) with no number to parse and no type to
    check, twice as fast as a JSON list (OverflowError beyond int64)."""
    lo, hi = (min(values), max(values)) if values else (0, 0)
    code = next(c for c in _WIDTHS if c == "q" or -_bound(c) <= lo and hi < _bound(c))
    return f"{code}:{base64.b64encode(array(code, values).tobytes()).decode('ascii')}"


def _bound(code: str) -> int:
    return 1 << (8 * array(code).itemsize - 1)


def unpacked(value: Any, what: str, length: int | None = None, lo: int | None = 0, hi: int | None = None) -> list:
    """The ints of :func:`packed`, checked as :func:`ints` checks a list."""
    return unpacked_array(value, what, length, lo, hi).tolist()


def unpacked_array(value: Any, what: str, length: int | None = None, lo: int | None = 0,
                   hi: int | None = None) -> array:
    """:func:`unpacked` as the packed array itself (no list of 10^5 ints), for a column kept
    as an array."""
    need(type(value) is str and value[:1] in tuple(_WIDTHS) and value[1:2] == ":", f"{what}: not a packed column")
    column = array(value[0])
    try:
        column.frombytes(base64.b64decode(value[2:], validate=True))
    except ValueError as exc:  # not base64, not whole ints
        raise EntryError(f"{what}: not a packed column ({exc})") from None
    return _in_range(column, what, length, lo, hi)


def counts(value: Any, what: str, length: int, total: int, *, nullable: bool = False) -> list:
    """Per item, how many of ``total`` consecutive flat values are its own (-1 for None when
    ``nullable``): a :func:`packed` column of ``length`` ints adding up to ``total`` (see
    :func:`cut`)."""
    value = unpacked(value, what, length, -1 if nullable else 0)
    need(sum(value) + value.count(-1) == total, f"{what}: counts do not add up")  # -1 counts 0
    return value


def cut(counts: list, flat: list) -> list:
    """``flat`` in consecutive slices of ``counts`` (checked by :func:`counts`) items; None for -1."""
    ends = accumulate(c if c > 0 else 0 for c in counts)
    return [flat[e - c:e] if c >= 0 else None for c, e in zip(counts, ends)]


def to_table(values) -> tuple[str, list]:
    """(index of each value in the table, :func:`packed`; table of distinct values): repeated
    values once."""
    table: dict = {}
    return packed([table.setdefault(v, len(table)) for v in values]), list(table)


def from_table(indices: Any, table: list, what: str, length: int | None = None) -> list:
    """The values of ``to_table``'s output, indices :func:`packed`; the table's items are checked
    by the caller."""
    return [table[i] for i in unpacked(indices, what, length, 0, len(table))]
