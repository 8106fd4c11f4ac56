"""Statistics-mode compare (msprobe's default task) as column work, written as its CSV in chunks.

The row-at-a-time path (:func:`.framework_compare.compare_pairs` + :func:`.framework_csv.
iter_table_rows`) builds ~10 objects and a dict per row and computes every statistic's diff
cell by cell: 300k rows of a 100k-entry pair took ~15 s and 1.2 GB. Here the pairs are taken
``CHUNK`` rows at a time (cut at entry boundaries, so msprobe's per-API verdicts see whole
entries): the four statistics of both sides become two float64 arrays, every diff and relative
error is one array expression, msprobe's per-API verdicts run on the columns (the statistics
branch of :func:`.framework_csv._verdicts`, kept equal by the tests), and the chunk's CSV lines
are joined from its columns and written. Nothing per row outlives its chunk; ``vc``'s result keeps the pairing and builds a row's
:class:`.framework_compare.RowResult` only when asked (:class:`StatisticsRows`).

Cells are msprobe's, byte for byte the row-at-a-time path's (tests compare the two CSVs): a
row whose two leaves are float tensors with four finite statistics each (nearly every row) is
computed column-wise -- float64 subtraction and division are the same IEEE operations as
Python's, and equal texts (``"0"``) are equal bit patterns; every other row (a missing golden,
None/NaN/Inf statistics, integer or bool tensors, plain values) goes through the per-cell rules
of :func:`.framework_compare.stats_compare`.
"""

from __future__ import annotations

import csv
import os
import re
from typing import Callable, Iterator, Sequence

import numpy as np

from precision_shell.atomic_write import write_atomic
from precision_shell.safe_text import csv_cell
from .cells import repr_texts
from .engine import RowResult, _stats_diff, stat_cells
from .tensor_metrics import N_A
from .csv_layout import _SUMMARY_TEXT, _percent, _shape_cell, header
from .stats_verdicts import judge
from .pairing import Pairing, RowPair

CHUNK = 8192       # rows per chunk: a few MB of cells, few enough Python round trips
# safe_text.csv_row's prefilter (a cell starting with = + @ tab CR, or - not starting a number)
# on cells joined with a separator in front of each: a literal first character searches ~9x faster
_SEP = "\x00"
_FORMULA_AFTER_SEP = re.compile(r"\x00(?:[=+@\t\r]|-(?![0-9.]))")


def _plain_float_tensor(leaf) -> bool:
    """A tensor whose statistics print as ``repr`` of floats (stat_cells' fast branch)."""
    if leaf.shape is None:
        return False
    dtype = leaf.dtype
    return dtype != "bool" and not (dtype or "").startswith(("int", "uint"))


def _stat_array(leaves) -> np.ndarray:
    """(n, 4) float64 of max/min/mean/norm; None becomes NaN (such rows take the slow path)."""
    return np.array([(leaf.max, leaf.min, leaf.mean, leaf.norm) for leaf in leaves], dtype=float).reshape(-1, 4)


def _shape_text(row, shapes: dict[tuple, str]) -> str:
    """framework_csv._shape_cell, with the text of each tensor shape made once (``shapes``)."""
    shape = row.leaf.shape
    if shape is None:
        return _shape_cell(row)
    text = shapes.get(shape)
    if text is None:
        text = shapes[shape] = str(list(shape))
    return text


def _dtype_text(row) -> str:
    leaf = row.leaf
    if leaf.type is None:
        return N_A
    if leaf.shape is not None:
        return leaf.dtype_raw or leaf.dtype or "None"
    return row.dtype


def _grad_text(leaf) -> str:
    rg = leaf.requires_grad
    return N_A if rg is None else ("True" if rg else "False")


def _chunks(pairs: Sequence[RowPair], size: int) -> Iterator[Sequence[RowPair]]:
    """Consecutive slices of about ``size`` pairs that never split a target entry's rows."""
    start, total = 0, len(pairs)
    while start < total:
        end = min(start + size, total)
        if end < total:
            entry = pairs[end - 1].target.entry
            while end < total and pairs[end].target.entry is entry:
                end += 1
        yield pairs[start:end]
        start = end


def _texts(values: np.ndarray) -> list[list[str]]:
    """``repr`` of every value, one list per column of ``values``."""
    return repr_texts(values)


def diff_texts(t_vals: np.ndarray, g_vals: np.ndarray) -> tuple[list[list[str]], list[list[str]],
                                                                  np.ndarray, np.ndarray]:
    """(diff cells, relative-error cells, which values are the same, the relative errors): the cells of rows of statistics (n x 4, target and golden), one list
    per statistic: ``repr`` of the difference and of ``|diff / golden| * 100`` with "%"; equal
    finite values with the same sign (0.0 vs -0.0 differ) print "0", "0"; a zero golden "inf".
    ``same`` and ``rel`` (n x 4) are for the verdicts."""
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        diff = t_vals - g_vals
        rel = np.abs(diff / g_vals * 100)
    diffs, rels = repr_texts(diff), repr_texts(rel, "%")
    same = (t_vals == g_vals) & (np.signbit(t_vals) == np.signbit(g_vals))
    for i, k in zip(*np.nonzero(same)):
        diffs[k][i] = rels[k][i] = "0"
    for i, k in zip(*np.nonzero(~same & (g_vals == 0))):
        rels[k][i] = "inf"
    return diffs, rels, same, rel


def odd_row_cells(i: int, t_stat: list, g_stat: list | None, t_ok: bool, g_ok: bool, columns: tuple) -> None:
    """msprobe's per-cell rules for row ``i`` of a chunk whose statistics are not all plain finite
    floats (``t_stat``/``g_stat``: the cells of each side, None without a golden row), written into
    ``columns`` = (target summary, golden summary, diffs, relative errors, NormRelativeErr
    percent); both chunk paths (rows of leaves here, scanned columns in column_table) use it."""
    t_summary, g_summary, diffs, rels, percent = columns
    if not t_ok:
        for k, c in enumerate(t_stat):
            t_summary[k][i] = _SUMMARY_TEXT.get(c[0], c[0])
    if g_stat is None:
        for k in range(4):
            g_summary[k][i] = diffs[k][i] = rels[k][i] = N_A
    else:
        found = _stats_diff(t_stat, g_stat)
        for k in range(4):
            if not g_ok:
                c = g_stat[k][0]
                g_summary[k][i] = _SUMMARY_TEXT.get(c, c)
            diffs[k][i], rels[k][i] = found.diffs[k], found.relative[k]
    text = rels[3][i]
    value = _percent(text) if text.endswith("%") else -1.0
    percent[i] = value if value == value else -1.0     # max() in _extreme passes NaN over


def _chunk_columns(pairs: Sequence[RowPair]) -> tuple[list[list[str]], list[bool], list[float]]:
    """The CSV columns up to Requires_grad Consistent of a chunk of pairs, one list each; which
    rows took the column-wise path (all eight statistics finite); each row's NormRelativeErr as
    the verdicts read it (a fraction, -1.0 for a cell that is no percentage)."""
    n = len(pairs)
    targets = [p.target for p in pairs]
    goldens = [p.golden for p in pairs]
    t_leaves = [t.leaf for t in targets]
    g_leaves = [g.leaf if g is not None else t_leaves[0] for g in goldens]
    t_vals, g_vals = _stat_array(t_leaves), _stat_array(g_leaves)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        t_ok = np.isfinite(t_vals).all(axis=1) & np.fromiter(map(_plain_float_tensor, t_leaves), bool, n)
        g_ok = np.isfinite(g_vals).all(axis=1) & np.fromiter(
            (g is not None and _plain_float_tensor(g.leaf) for g in goldens), bool, n)
    diffs, rels, same, rel = diff_texts(t_vals, g_vals)
    t_summary, g_summary = _texts(t_vals), _texts(g_vals)
    t_ok_list, g_ok_list = t_ok.tolist(), g_ok.tolist()
    simple = t_ok & g_ok
    # float(repr(x) + "%" without the "%") / 100 is x / 100: the text's number, exactly
    percent = np.where(simple & ~same[:, 3] & (g_vals[:, 3] != 0), rel[:, 3] / 100, -1.0).tolist()
    for i in np.flatnonzero(~simple).tolist():     # msprobe's per-cell rules for the rest
        t, g = targets[i], goldens[i]
        odd_row_cells(i, stat_cells(t.leaf), stat_cells(g.leaf) if g is not None else None, t_ok_list[i],
                      g_ok_list[i], (t_summary, g_summary, diffs, rels, percent))
    n_grads = [_grad_text(leaf) for leaf in t_leaves]
    shapes: dict[tuple, str] = {}
    b_grads = [N_A if g is None else _grad_text(g.leaf) for g in goldens]
    return [[t.name for t in targets], [N_A if g is None else g.name for g in goldens],
            list(map(_dtype_text, targets)), [N_A if g is None else _dtype_text(g) for g in goldens],
            [_shape_text(t, shapes) for t in targets], [N_A if g is None else _shape_text(g, shapes) for g in goldens],
            n_grads, b_grads, *diffs, *rels, *t_summary, *g_summary,
            ["True" if a == b else "False" for a, b in zip(n_grads, b_grads)]], simple.tolist(), percent


def statistics_columns(pairing: Pairing, stack: dict[str, tuple[str, ...]] | None = None,
                       dtype_is_error: bool = False, chunk: int = CHUNK) -> Iterator[list[list[str]]]:
    """The statistics-mode CSV columns of ``pairing`` (:func:`.framework_csv.header`, the stack
    column included), ``chunk`` rows or a little more at a time."""
    def chunks():
        for pairs in _chunks(pairing.pairs, chunk):
            bounds, start = [], 0
            for end in range(1, len(pairs) + 1):
                if end == len(pairs) or pairs[end].target.entry is not pairs[start].target.entry:
                    bounds.append((start, end, pairs[start].target.entry.name))
                    start = end
            yield (*_chunk_columns(pairs), bounds)
    return judged_columns(chunks(), stack, dtype_is_error)


def judged_columns(chunks, stack: dict[str, tuple[str, ...]] | None, dtype_is_error: bool
                   ) -> Iterator[list[list[str]]]:
    """Each chunk's columns with msprobe's verdicts and the stack column added: ``chunks``
    yields (columns up to Requires_grad Consistent, simple rows, NormRelativeErr fractions,
    [(start, end, entry name)] of the chunk's entries)."""
    stack = stack or {}
    seen: set[str] = set()
    for cols, simple, percent, bounds in chunks:
        n = len(cols[0])
        results, messages = judge(cols, simple, percent, bounds, dtype_is_error)
        frames_col = [N_A] * n
        for start, end, name in bounds:
            frames = stack.get(name) if name not in seen else None
            seen.add(name)
            if frames:
                frames_col[start] = str(list(frames))
        yield [*cols, results, messages, frames_col]


def _csv_column(column: list[str]) -> list[str]:
    """The cells of a column as csv.writer (QUOTE_MINIMAL) writes them after safe_text.csv_row:
    a formula start neutralised, a cell holding , " CR or LF quoted. Each test is one search
    over the joined column first: most columns (numbers, verdicts) need neither."""
    joined = _SEP + _SEP.join(column)
    if _FORMULA_AFTER_SEP.search(joined):
        column = [csv_cell(c) for c in column]
        joined = _SEP.join(column)
    if "," in joined or '"' in joined or "\r" in joined or "\n" in joined:
        column = [('"' + c.replace('"', '""') + '"') if ("," in c or '"' in c or "\r" in c or "\n" in c) else c
                  for c in column]
    return column


def write_statistics_csv(path: str | os.PathLike, pairing: Pairing, stack: dict[str, tuple[str, ...]] | None = None,
                         dtype_is_error: bool = False, advance: Callable[[int], None] | None = None,
                         chunk: int = CHUNK) -> None:
    """msprobe's statistics-mode CSV of ``pairing`` written chunk by chunk (bounded memory),
    each chunk's lines joined from its columns (the bytes csv.writer writes: tests compare)."""
    write_table_csv(path, statistics_columns(pairing, stack, dtype_is_error, chunk), advance)


def csv_lines(cols: list[list[str]]) -> str:
    """The CSV lines of a chunk's columns."""
    return "".join([",".join(row) + "\r\n" for row in zip(*map(_csv_column, cols))])


def write_table_csv(path: str | os.PathLike, columns: Iterator[list[list[str]]],
                    advance: Callable[[int], None] | None = None) -> None:
    def write(f) -> None:
        csv.writer(f).writerow(header("statistics"))
        for cols in columns:
            f.write(csv_lines(cols))
            if advance is not None:
                advance(len(cols[0]))

    write_atomic(path, write)


class StatisticsRows(Sequence):
    """``vc``'s rows in statistics mode, each :class:`RowResult` built from the pairing when
    read (the CSV was written column-wise; 300k kept rows would hold ~1 GB)."""

    def __init__(self, pairing: Pairing):
        self.pairing = pairing
        self._index: dict[str, int] | None = None

    def __len__(self) -> int:
        return len(self.pairing.pairs)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [statistics_row(p) for p in self.pairing.pairs[index]]
        return statistics_row(self.pairing.pairs[index])

    def __iter__(self) -> Iterator[RowResult]:
        return map(statistics_row, self.pairing.pairs)

    def by_name(self) -> _RowsByName:
        """Rows by NPU name (the last of a repeated name, as a dict built from the rows keeps),
        each built when looked up; the name index is made once."""
        if self._index is None:
            self._index = {p.target.name: i for i, p in enumerate(self.pairing.pairs)}
        return _RowsByName(self, self._index)

    def where(self, keep: Callable[[RowPair], bool]) -> list[RowResult]:
        """The rows whose pair ``keep`` accepts, only those built."""
        return [statistics_row(p) for p in self.pairing.pairs if keep(p)]


def statistics_row(pair: RowPair) -> RowResult:
    """One row as :func:`.framework_compare.compare_pairs` yields it in statistics mode."""
    t_cells = stat_cells(pair.target.leaf)
    g_cells = stat_cells(pair.golden.leaf) if pair.golden is not None else None
    result = RowResult(pair, summary=[c[0] for c in t_cells] + ([c[0] for c in g_cells] if g_cells else [N_A] * 4))
    if g_cells is not None:
        result.stats = _stats_diff(t_cells, g_cells)
    return result


class _RowsByName:
    """``get(name)`` of :meth:`StatisticsRows.by_name`."""

    def __init__(self, rows: StatisticsRows, index: dict[str, int]):
        self._rows, self._index = rows, index

    def get(self, name: str, default=None):
        at = self._index.get(name)
        return default if at is None else self._rows[at]


def rows_by_name(rows: Sequence[RowResult]):
    """``{row.name: row}`` of a compare's rows, for ``.get`` lookups: on statistics rows an index
    that builds only the rows looked up (a panel reads a few of 300k)."""
    lookup = getattr(rows, "by_name", None)
    return lookup() if lookup is not None else {r.name: r for r in rows}
