"""``vcs`` on a statistics compare made on columns, over index arrays: :func:`.run.
find_framework_suspects`' rule (an output fails on its statistics, else through its producer;
root when no input fails; the first root is the first divergence; each suspect lists the first
:data:`.run.DOWNSTREAM_LISTED` failing entries downstream) computed on a
:class:`~precision_shell.model.runs.stats_run.StatsRun` and the compare's
:class:`~precision_shell.analysis.compare.msprobe.column_pairing.ColumnPairing`: verdicts, edges
and roles are arrays over the rows, and objects are made for the failing entries only. Tests
hold it to the object path's suspects, JSON row for JSON row.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from precision_shell.analysis.root_cause.run import DOWNSTREAM_LISTED
from precision_shell.analysis.root_cause.stat_verdict import DEFAULT_TOLERANCE, JUDGED, judge_stats
from precision_shell.analysis.root_cause.suspect_list import SuspectColumns, SuspectList
from precision_shell.model.runs.stats_run import GRAD, INPUT, OUTPUT, StatsRun

if TYPE_CHECKING:
    from precision_shell.analysis.compare.msprobe.column_pairing import ColumnPairing

_LABELS = [label for label, _ in JUDGED]
# the failing statistics' text for each bit mask of (Max, Min, Norm)
_MASK_TEXT = [",".join(label for i, label in enumerate(_LABELS) if mask >> i & 1) for mask in range(8)]


def own_verdicts(run: StatsRun, pairing: ColumnPairing, tolerance: float) -> tuple[np.ndarray, np.ndarray,
                                                                                     list[str]]:
    """Each row's verdict from its own statistics: (state int8: 1 fails, 0 passes, -1 cannot
    be judged; the largest relative error, NaN when not judged; the failing statistics' text)."""
    ok, rel = pairing.statistic_relative_errors()
    n = len(run.io)
    state = np.full(n, -1, dtype=np.int8)
    error = np.full(n, math.nan)
    failed = rel > tolerance
    mask = (failed[:, 0] * 1 + failed[:, 1] * 2 + failed[:, 2] * 4).astype(np.int8) if n else np.zeros(0, np.int8)
    state[ok] = (mask[ok] > 0).astype(np.int8)
    if n:
        error[ok] = rel[ok].max(axis=1)
    texts = [_MASK_TEXT[m] for m in np.where(ok, mask, 0).tolist()]
    from precision_shell.model.runs.base import Stats

    target, golden, found = pairing.target, pairing.golden, pairing.golden_row
    for row in np.flatnonzero(~ok & (run.io >= 0)).tolist():     # odd statistics or unpaired: one by one
        g = found[row]
        if g < 0:
            continue
        high, low, mean, norm = golden.statistics(int(g))
        values = target.statistics(row)
        mine = None if all(v is None for v in values) else Stats(*values)
        theirs = None if high is None and low is None and norm is None else Stats(high, low, mean, norm)
        v = judge_stats(mine, theirs, tolerance)
        if v.fails is None:
            continue
        state[row], error[row], texts[row] = int(v.fails), v.rel_error, ",".join(v.failed)
    return state, error, texts


def find_suspects_on_columns(run: StatsRun, pairing: ColumnPairing, backward: bool = False, *,
                             tolerance: float = DEFAULT_TOLERANCE,
                             unjudged: list[str] | None = None) -> SuspectList:
    """The suspects :func:`.run.find_framework_suspects` finds on the same statistics compare
    (``unjudged`` too: the outputs judged through their producer, in dump order), as a
    :class:`.suspect_list.SuspectList`: columns, a suspect object made when read."""
    state, error, texts = own_verdicts(run, pairing, tolerance)
    io, producer = run.io, run.producer
    fails = state == 1
    through = (state == -1) & (producer >= 0)
    fails[through] = state[producer[through]] == 1
    kinds = ("forward", "backward", "parameters_grad") if backward else ("forward",)
    entry_kinds = [e.kind for e in run.entries]
    wanted = np.array([k in kinds for k in entry_kinds], dtype=bool)
    row_entry = run.columns.row_entry.astype(np.int64)
    in_wanted = wanted[row_entry] if len(row_entry) else np.zeros(0, dtype=bool)
    outputs = ((io == OUTPUT) | (io == GRAD)) & in_wanted
    if unjudged is not None:
        unjudged += run.tensor_names(np.flatnonzero(outputs & (state == -1)).tolist())
    failed_out = _by_entry(np.flatnonzero(outputs & fails), row_entry)
    suspects = np.unique(row_entry[failed_out])          # the failing entries, in dump order
    failed_in = np.flatnonzero((io == INPUT) & in_wanted & fails)
    failed_in = _by_entry(failed_in[np.isin(row_entry[failed_in], suspects)], row_entry)
    # the worst failing output of each entry: the largest error, one judged through its producer last
    rank = np.where(state[failed_out] >= 0, -error[failed_out], math.inf)
    ranked = failed_out[np.lexsort([failed_out, rank, row_entry[failed_out]])]
    firsts = np.flatnonzero(np.r_[True, row_entry[ranked][1:] != row_entry[ranked][:-1]]) if len(ranked) else \
        np.zeros(0, dtype=np.int64)
    in_start = np.r_[np.searchsorted(row_entry[failed_in], suspects), len(failed_in)]
    param_grad = np.array([k == "parameters_grad" for k in entry_kinds], dtype=bool)[suspects] if len(suspects) \
        else np.zeros(0, dtype=bool)
    role = np.where(param_grad, 2, np.where(np.diff(in_start) > 0, 1, 0)).astype(np.int8)
    roots = np.flatnonzero(role == 0)
    return SuspectList(run, SuspectColumns(
        entry=suspects, role=role, worst=ranked[firsts],
        out_rows=failed_out, out_start=np.r_[np.searchsorted(row_entry[failed_out], suspects), len(failed_out)],
        in_rows=failed_in, in_start=in_start, state=state.tolist(), statistic=texts, error=error.tolist(),
        downstream=failing_downstream(run, suspects.tolist()), first=int(roots[0]) if len(roots) else -1))


def _by_entry(rows: np.ndarray, row_entry: np.ndarray) -> np.ndarray:
    """``rows`` grouped by entry, in row order within an entry."""
    return rows[np.argsort(row_entry[rows], kind="stable")]


def failing_downstream(run: StatsRun, failing: list[int]) -> list[list[int]]:
    """Per entry, the first :data:`.run.DOWNSTREAM_LISTED` failing entries reachable along the
    edges, in dump order (:func:`.run._failing_downstream`'s merge, latest entry first: the
    inferred edges all run forward)."""
    is_failing = np.zeros(len(run.entries), dtype=bool)
    is_failing[failing] = True
    flags = is_failing.tolist()
    consumers = run.consumer_lists()
    memo: list[list[int]] = [[] for _ in consumers]
    for at in range(len(consumers) - 1, -1, -1):
        feeds = consumers[at]
        if not feeds:
            continue
        if len(feeds) == 1:          # a chain: the consumer, then its list (all after it)
            dst = feeds[0]
            memo[at] = [dst, *memo[dst][:DOWNSTREAM_LISTED - 1]] if flags[dst] else memo[dst]
            continue
        picked: set[int] = set()
        for dst in feeds:
            if flags[dst]:
                picked.add(dst)
            below = memo[dst]
            if below:
                picked.update(below)
        if picked:
            memo[at] = sorted(picked)[:DOWNSTREAM_LISTED]
    return memo
