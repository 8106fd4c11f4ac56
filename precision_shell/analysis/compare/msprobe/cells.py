"""``repr`` of the statistics CSV's floats, a column at a time: the compiled ``_stats_cells``
(our shortest digits, formats/msprobe/shortest_digits.h, in repr's layout, ~5x ``map(repr)``: the CSV of a 100k-entry pair prints
~4.8M floats) when built, else ``map(repr)`` -- the same texts (tests compare them on random bit
patterns and the edge values). ``PSHELL_NO_EXT=1`` takes the Python path."""

from __future__ import annotations

import os

import numpy as np

try:
    from . import _stats_cells as _ext
except ImportError:     # not built (optional extension): map(repr), same texts
    _ext = None


def compiled() -> bool:
    return _ext is not None and os.environ.get("PSHELL_NO_EXT") != "1"


def compiled_ext():
    """The compiled helpers (also name hashing for column_pairing), or None."""
    return _ext if compiled() else None


def repr_texts(values: np.ndarray, suffix: str = "") -> list[list[str]]:
    """``repr(v) + suffix`` of every value of an (n, k) float array, one list per column."""
    if compiled():
        return _ext.repr_columns(np.ascontiguousarray(values, dtype=np.float64), suffix)
    columns = values.T.tolist() if values.ndim == 2 else [values.tolist()]
    if suffix:
        return [[repr(v) + suffix for v in column] for column in columns]
    return [list(map(repr, column)) for column in columns]


def csv_line_bytes(cols: list[list[str]], final: frozenset[int] = frozenset(), fix=None) -> bytes:
    """The CSV lines of a chunk's columns, UTF-8: ``fix(column)`` (stats_table._csv_column: the
    formula guard and the quoting) on each column not in ``final``, then ``",".join(row) +
    "\r\n"``. In C one pass into one buffer: the quoting done there, ``fix`` called only for a
    column with a cell that may be a formula."""
    if compiled():
        return _ext.csv_lines(cols, final, fix)
    cols = [column if k in final else fix(column) for k, column in enumerate(cols)]
    return "".join([",".join(row) + "\r\n" for row in zip(*cols)]).encode("utf-8")
