"""msprobe's exact (and data_mapping) pairing on statistics columns: the rows of both sides as
:class:`~precision_shell.formats.msprobe.columns.StatsColumns`, joined by key into one index array
(the golden row of each target row, -1 for none), with what ``vc`` reports of the pairing
(paired rows, golden rows left over, each entry's problems, coverage) counted on the columns.

The same rules as :func:`.pairing.pair_dumps` (tests compare the two): backward call numbers
renumbered per counter-less name (:func:`.pairing.backward_entry_keys`), the first golden row of
a key taken, a pair of differing dtypes outside msprobe's float group unpaired with the reason
(no dtype check with a mapping), shapes that differ reported on the entry.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from precision_shell.analysis.compare.coverage import NO_GOLDEN, Coverage
from precision_shell.formats.msprobe.columns import TENSOR, StatsColumns
from precision_shell.formats.msprobe.name_column import NameColumn, as_names
from .cells import compiled_ext
from .pairing import _FLOATS, backward_entry_keys

NO_GOLDEN_ROW = "no golden row"


@dataclass
class ColumnPairing:
    mode: str                        # exact | mapping
    target: StatsColumns
    golden: StatsColumns
    golden_row: np.ndarray           # int64 per target row: its golden row, -1 for none
    reasons: dict[int, str] = field(default_factory=dict)     # unpaired target rows other than "no golden row"
    golden_only: int = 0             # golden rows no target row took
    entry_count: int = 0             # target entries with rows
    entry_problems: list[str] = field(default_factory=list)   # "ENTRY: problem; problem"
    _by_name: dict[str, int] | None = field(default=None, repr=False)

    @property
    def paired(self) -> int:
        return int(np.count_nonzero(self.golden_row >= 0))

    def reason(self, row: int) -> str:
        return self.reasons.get(row, NO_GOLDEN_ROW)

    def row_of(self, name: str) -> int | None:
        """The target row named ``name`` (the last of a repeated name, as a dict of rows keeps it)."""
        if self._by_name is None:
            self._by_name = {n: i for i, n in enumerate(self.target.names)}
        return self._by_name.get(name)

    def golden_statistics(self, name: str) -> tuple | None:
        """(max, min, mean, norm) of the golden row paired with the target row ``name``; None
        when unpaired or no such row."""
        row = self.row_of(name)
        if row is None or self.golden_row[row] < 0:
            return None
        return self.golden.statistics(int(self.golden_row[row]))

    def statistic_relative_errors(self) -> tuple[np.ndarray, np.ndarray]:
        """For rows whose two sides are float tensors with finite statistics (the rest: False):
        which, and ``|t - g| / max(|g|, 1e-12)`` of Max, Min and Norm, (n, 3) -- what
        :func:`.root_cause.stat_verdict.judge_stats` computes per row, the same float64 steps."""
        found = self.golden_row
        at = np.where(found >= 0, found, 0)
        if not len(self.golden):
            return np.zeros(len(found), dtype=bool), np.zeros((len(found), 3))
        ok = self.target.simple & self.golden.simple[at] & (found >= 0)
        t, g = self.target.stats[:, [0, 1, 3]], self.golden.stats[at][:, [0, 1, 3]]
        with np.errstate(invalid="ignore", over="ignore"):
            rel = np.abs(t - g) / np.maximum(np.abs(g), 1e-12)
        return ok, rel

    def coverage(self) -> Coverage:
        """As :func:`.coverage.framework_coverage` counts a statistics compare: a row without
        a golden is skipped (its reason), every other row compared."""
        unpaired = np.flatnonzero(self.golden_row < 0).tolist()
        cov = Coverage(total=len(self.golden_row), compared=len(self.golden_row) - len(unpaired))
        names = self.target.names
        for row in unpaired:
            cov.skipped.add(NO_GOLDEN, names[row], self.reason(row))
        return cov


def _keys(columns: StatsColumns) -> list[str]:
    """Exact keys: the row name, a backward entry's rows renumbered (:func:`.pairing.exact_keys`)."""
    entry_names = columns.entry_names
    with_rows = [entry_names[e] for e in _entries_with_rows(columns.row_entry)]
    renamed = backward_entry_keys(with_rows)
    if not renamed:
        return columns.names
    keys = list(columns.names)
    for row, entry in enumerate(columns.row_entry.tolist()):
        key = renamed.get(entry_names[entry])
        if key is not None:
            keys[row] = key + keys[row].replace(entry_names[entry], "")
    return keys


def _renamed(columns: StatsColumns) -> bool:
    """Whether :func:`_keys` renumbers a backward entry (keys are not just the row names)."""
    entry_names = columns.entry_names
    return bool(backward_entry_keys([entry_names[e] for e in _entries_with_rows(columns.row_entry)]))


def _entries_with_rows(row_entry: np.ndarray) -> list[int]:
    """The entries that have rows, in order (rows come entry by entry: no sort needed then)."""
    steps = np.diff(row_entry)
    if np.all(steps >= 0):
        return row_entry[np.r_[True, steps != 0]].tolist() if len(row_entry) else []
    return np.unique(row_entry).tolist()


def _first_rows_by_name(target: NameColumn, golden: NameColumn) -> np.ndarray | None:
    """The first golden row of each target row's name (-1: none), found on the name blobs by
    64-bit hashes and checked byte for byte; None where the C helpers are not built or two
    different names share a hash (then the dict of keys decides). ~0.3 s of str keys less at
    300k rows a side."""
    ext = compiled_ext()
    if ext is None:
        return None
    t_hash = np.frombuffer(ext.name_hashes(target.blob, target.off), dtype=np.uint64)
    g_hash = np.frombuffer(ext.name_hashes(golden.blob, golden.off), dtype=np.uint64)
    order = np.argsort(g_hash, kind="stable")          # equal hashes: golden rows in order
    ranked = g_hash[order]
    first = np.r_[True, ranked[1:] != ranked[:-1]] if len(ranked) else np.zeros(0, dtype=bool)
    if not first.all():      # golden names sharing a hash must be the same name
        group_first = order[np.maximum.accumulate(np.where(first, np.arange(len(order)), 0))]
        rest = ~first
        same = np.frombuffer(ext.names_equal(golden.blob, golden.off, np.ascontiguousarray(order[rest]),
                                             golden.blob, golden.off, np.ascontiguousarray(group_first[rest])),
                             dtype=np.bool_)
        if not same.all():
            return None
    unique_hash, unique_row = ranked[first], order[first]
    at = np.minimum(np.searchsorted(unique_hash, t_hash), max(len(unique_hash) - 1, 0))
    hit = (unique_hash[at] == t_hash) if len(unique_hash) else np.zeros(len(t_hash), dtype=bool)
    found = np.where(hit, unique_row[at] if len(unique_row) else 0, -1).astype(np.int64)
    rows = np.flatnonzero(hit)
    same = np.frombuffer(ext.names_equal(target.blob, target.off, rows.astype(np.int64),
                                         golden.blob, golden.off, np.ascontiguousarray(found[rows])), dtype=np.bool_)
    return found if same.all() else None


def pair_columns(target: StatsColumns, golden: StatsColumns, mapping: dict[str, str] | None = None) -> ColumnPairing:
    found = None
    if mapping is None and not _renamed(target) and not _renamed(golden):
        found = _first_rows_by_name(as_names(target.names), as_names(golden.names))
    if found is None:
        t_keys = [mapping.get(n, n) for n in target.names] if mapping is not None else _keys(target)
        first: dict[str, int] = {}
        for row, key in enumerate(_keys(golden)):
            first.setdefault(key, row)
        found = np.fromiter((first.get(k, -1) for k in t_keys), dtype=np.int64, count=len(t_keys))
    paired = found >= 0
    used = np.zeros(len(golden), dtype=bool)
    used[found[paired]] = True
    result = ColumnPairing("mapping" if mapping is not None else "exact", target, golden, found,
                           golden_only=int(len(golden) - np.count_nonzero(used)))
    g = np.where(paired, found, 0)
    if mapping is None and len(golden):
        texts = target.texts, golden.texts
        t_dtype = np.array(texts[0], dtype=object)[target.dtype]
        g_dtype = np.array(texts[1], dtype=object)[golden.dtype[g]]
        t_floats = np.isin(t_dtype, list(_FLOATS))
        g_floats = np.isin(g_dtype, list(_FLOATS))
        tensors = (target.kind == TENSOR) & (golden.kind[g] == TENSOR)
        t_text = np.array(texts[0], dtype=object)[target.dtype_text]
        g_text = np.array(texts[1], dtype=object)[golden.dtype_text[g]]
        compatible = np.where(tensors, (t_dtype == g_dtype) | (t_floats & g_floats), t_text == g_text)
        for row in np.flatnonzero(paired & ~compatible).tolist():
            result.reasons[row] = f"dtype {t_text[row]} vs golden {g_text[row]} cannot be compared"
            found[row] = -1
    _entry_reports(result)
    return result


def _entry_reports(result: ColumnPairing) -> None:
    """Each target entry's problems as :func:`.pairing._entry_reports` words them."""
    t, g, found = result.target, result.golden, result.golden_row
    row_entry = t.row_entry
    if not len(row_entry):
        return
    starts = np.flatnonzero(np.r_[True, row_entry[1:] != row_entry[:-1]])
    ends = np.r_[starts[1:], len(row_entry)]
    result.entry_count = len(starts)
    golden_rows = np.bincount(g.row_entry, minlength=len(g.entry_names)) if len(g) else np.zeros(0, int)
    paired = found >= 0
    g_at = np.where(paired, found, 0)
    # shapes differ: both tensors, shape texts differ (their texts are the shapes as lists)
    shape_differs = paired & (t.kind == TENSOR) & (g.kind[g_at] == TENSOR) & \
        (np.array(t.texts, dtype=object)[t.shape] != np.array(g.texts, dtype=object)[g.shape[g_at]])
    flagged = set(np.flatnonzero(shape_differs).tolist()) | set(result.reasons)
    g_entry = np.where(paired, g.row_entry[g_at] if len(g) else 0, -1)
    first_paired = np.full(len(starts), -1, dtype=np.int64)
    rows_paired = np.flatnonzero(paired)
    block_of = np.searchsorted(starts, rows_paired, side="right") - 1
    # the first paired row of each entry: the first occurrence of its block
    blocks, at = np.unique(block_of, return_index=True)
    first_paired[blocks] = rows_paired[at]
    names, entry_names = t.names, t.entry_names
    problems = result.entry_problems
    flagged_rows = sorted(flagged)
    next_flag = 0
    for block, (start, end) in enumerate(zip(starts.tolist(), ends.tolist())):
        lines = []
        while next_flag < len(flagged_rows) and flagged_rows[next_flag] < end:
            row = flagged_rows[next_flag]
            next_flag += 1
            if row in result.reasons:
                lines.append(f"{names[row]}: {result.reasons[row]}")
            else:
                lines.append(f"{names[row]}: shape {t.texts[t.shape[row]]} vs golden {g.texts[g.shape[found[row]]]}")
        first = first_paired[block]
        if first < 0:
            lines.append("no golden entry")
        else:
            count = int(golden_rows[g_entry[first]])
            if count != end - start:
                lines.append(f"{end - start} rows vs {count} in golden {g.entry_names[g_entry[first]]}")
        if lines:
            problems.append(f"{entry_names[row_entry[start]]}: {'; '.join(lines)}")
