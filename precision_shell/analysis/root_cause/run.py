"""Which entries of a framework run fail the compare, and which started it (``vcs`` on msprobe
dumps), with :mod:`.root_cause`'s rule: an entry *fails* when one of its outputs fails
(:func:`.framework_compare.is_failing`: cosine at or below the threshold, or NaN/Inf); it is a
``root`` when every data input still passes and ``propagated`` when one fails. The first root
in dump (execution) order is the first divergence.

msprobe dumps every input, so an input is judged by its own compare; an input that could not be
compared (no golden row, no file) is judged through the dataflow graph instead: it fails when
the output that produced it fails. Forward entries only unless ``backward`` (then backward and
``parameters_grad`` entries too).

A failing ``parameters_grad`` entry gets its own role, ``param_grad``, never ``root``: msprobe
records a parameter's gradient as an entry with no inputs (framework-dumps.md A2, ``{param:
[leaf]}``), so "every input passes" would hold vacuously; the gradient is accumulated by the
backward of the module that owns the parameter, whose entries are judged themselves. It is
listed (a failing gradient is worth seeing), never the first divergence nor a keep-fp32 name.

Statistics-mode dumps (``mode="statistics"``) judge each output by its statistics instead
(:mod:`.stat_verdict`: Max, Min or Norm off by more than ``tolerance``, relative); a tensor
whose statistics cannot be compared is judged through the dataflow graph and listed in
``unjudged``. The same root/propagated/first rule follows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable

from precision_shell.model.framework_run import FrameworkRun, FrameworkTensor
from precision_shell.analysis.compare.msprobe.engine import RowResult, is_failing
from precision_shell.analysis.root_cause.stat_verdict import DEFAULT_TOLERANCE, JUDGED, judge_stats

if TYPE_CHECKING:
    from precision_shell.analysis.compare.msprobe.column_pairing import ColumnPairing


@dataclass(frozen=True)
class Judged:
    """One tensor's verdict: from its compare (tensor mode) or its statistics."""
    fails: bool
    cosine: float | str | None = None     # tensor mode: msprobe's value or text
    statistic: str = ""                   # statistics mode: which failed ("Max,Norm")
    rel_error: float | None = None        # statistics mode: the largest relative error
    metrics: object = None                # tensor mode: the TensorMetrics


@dataclass(slots=True)     # one per failing entry: ~100k on a 100k-entry statistics pair
class FrameworkSuspect:
    index: int                    # dump order
    op: str
    kind: str                     # forward | backward | parameters_grad
    role: str                     # root | propagated | param_grad (module docstring)
    failed_outputs: list[str]     # pshell tensor names
    failed_inputs: list[str]
    cosine: float | str | None    # the worst failing output's (msprobe's value or text); None: statistics
    modules: list[str]            # enclosing modules, outermost first
    downstream: list[str] = field(default_factory=list)    # failing entries reached by dataflow
    first: bool = False
    tensor: str = ""              # the worst failing output (pshell name)
    statistic: str = ""           # statistics mode: the worst output's failing statistics
    stat_error: float | None = None    # statistics mode: its largest relative error
    type: str = ""                # the API or module type (Functional.linear)
    metrics: object = None        # tensor mode: the worst output's TensorMetrics

    @property
    def order(self) -> int:
        return self.index

    @property
    def fusion_blame(self) -> None:
        return None           # no fusion in eager runs

    def to_json(self) -> dict:
        from precision_shell.analysis.root_cause.schema import framework_row

        return framework_row(self)

    def to_flat_json(self) -> dict:
        from precision_shell.analysis.root_cause.schema import framework_flat_row

        return framework_flat_row(self)


def judge_rows(run: FrameworkRun, results: Iterable[RowResult], mode: str, threshold: float,
               tolerance: float = DEFAULT_TOLERANCE,
               columns: ColumnPairing | None = None) -> Callable[[FrameworkTensor], Judged | None]:
    """The verdict of a tensor from its own compare row, None when it has none (no golden row,
    no file in tensor mode, statistics not comparable). ``columns``: a statistics compare made on
    columns (its golden statistics by row name), read instead of ``results``."""
    from precision_shell.model.runs.base import Stats

    def judged_stats(t: FrameworkTensor, high, low, mean, norm) -> Judged | None:
        g = None if high is None and low is None and norm is None else Stats(high, low, mean, norm)
        v = judge_stats(t.stats, g, tolerance)
        if v.fails is None:
            return None
        return Judged(v.fails, None, ",".join(v.failed), v.rel_error)

    if columns is not None:     # statistics on columns: the common rows judged column-wise
        ok, rel = columns.statistic_relative_errors()
        failed = (rel > tolerance).tolist()
        ok, worst = ok.tolist(), rel.max(axis=1).tolist()
        labels = [label for label, _ in JUDGED]

        def from_columns(t: FrameworkTensor) -> Judged | None:
            row = columns.row_of(t.compare_name)
            if row is None:
                return None
            if ok[row] and t.stats is not None:
                names = [label for label, bad in zip(labels, failed[row]) if bad]
                return Judged(bool(names), None, ",".join(names), worst[row])
            found = columns.golden_statistics(t.compare_name)
            return None if found is None else judged_stats(t, *found)
        return from_columns
    by_name = {r.name: r for r in results}

    def judged(t: FrameworkTensor) -> Judged | None:
        r = by_name.get(t.compare_name)
        if r is None or r.pair.golden is None:
            return None
        if mode == "tensor":
            if not t.has_data or r.metrics is None:
                return None
            return Judged(is_failing(r.metrics, threshold), r.metrics.cosine, metrics=r.metrics)
        golden = r.pair.golden.leaf
        return judged_stats(t, golden.max, golden.min, golden.mean, golden.norm)
    return judged


def find_framework_suspects(run: FrameworkRun, results: Iterable[RowResult], threshold: float,
                            backward: bool = False, *, mode: str = "tensor",
                            tolerance: float = DEFAULT_TOLERANCE,
                            unjudged: list[str] | None = None,
                            columns: ColumnPairing | None = None) -> list[FrameworkSuspect]:
    """``unjudged``, when given, receives the outputs judged through the dataflow graph because
    their own compare could not judge them (statistics null on one side, no golden row).
    ``columns``: see :func:`judge_rows` (``results`` is not read then)."""
    own = judge_rows(run, results, mode, threshold, tolerance, columns)
    kinds = ("forward", "backward", "parameters_grad") if backward else ("forward",)
    verdicts: dict[str, Judged | None] = {}

    def verdict(t: FrameworkTensor) -> Judged | None:
        if t.name not in verdicts:
            verdicts[t.name] = own(t)
        return verdicts[t.name]

    def fails(t: FrameworkTensor) -> bool:
        j = verdict(t)
        if j is not None:
            return j.fails
        edge = run.producer(t.name)
        if edge is None:
            return False
        up = verdict(run.tensor(edge.src))
        return up is not None and up.fails

    suspects: list[FrameworkSuspect] = []
    for op in run.ops:
        if op.kind not in kinds:
            continue
        if unjudged is not None:
            unjudged += [t.name for t in op.outputs if verdict(t) is None]
        failed_out = [t for t in op.outputs if fails(t)]
        if not failed_out:
            continue
        failed_in = [t.name for t in op.inputs if fails(t)]
        role = "param_grad" if op.kind == "parameters_grad" else "propagated" if failed_in else "root"
        worst = _worst(failed_out, verdict)
        j = verdict(worst)
        suspects.append(FrameworkSuspect(
            op.index, op.name, op.kind, role,
            [t.name for t in failed_out], failed_in, _worst_cosine(failed_out, verdict) if mode == "tensor" else None,
            run.module_path(op.name), tensor=worst.name, statistic=j.statistic if j else "",
            stat_error=j.rel_error if j else None, type=op.type, metrics=j.metrics if j else None))
    failing_downstream = _failing_downstream(run, {s.op for s in suspects})
    for s in suspects:
        s.downstream = failing_downstream(s.op)
    first = next((s for s in suspects if s.role == "root"), None)
    if first is not None:
        first.first = True
    return suspects


DOWNSTREAM_LISTED = 16     # failing entries listed per suspect (a chain of n failing entries has n^2)


def _failing_downstream(run: FrameworkRun, failing: set[str]) -> Callable[[str], list[str]]:
    """The first :data:`DOWNSTREAM_LISTED` failing entries reachable from an entry along the
    dataflow edges, in dump order. Made once for all entries, latest first: an entry's list is
    its failing consumers merged with their lists (the first k of a union are among the first
    k of each part), so a 100k-entry chain costs 100k short merges, not 100k walks."""
    order = {op.name: i for i, op in enumerate(run.ops)}
    memo: dict[str, list[str]] = {}

    def listed(name: str) -> list[str]:
        found = memo.get(name)
        if found is not None:
            return found
        at = order[name]
        picked: set[str] = set()
        for edge in run.consumers(name):
            dst = edge.dst_op
            if dst in failing:
                picked.add(dst)
            if order.get(dst, -1) > at and dst in memo:
                picked.update(memo[dst])
            elif dst != name:         # an edge that does not run forward: walk it
                picked.update(n for n in run.downstream(dst) if n in failing)
        found = memo[name] = sorted(picked, key=order.__getitem__)[:DOWNSTREAM_LISTED]
        return found

    for op in reversed(run.ops):
        listed(op.name)
    return listed


def _sort_value(j: Judged | None) -> float:
    """Lower is worse: the cosine (texts such as Nan worst of all), or minus the relative error."""
    if j is None:
        return math.inf
    if j.rel_error is not None:
        return -j.rel_error
    cos = j.cosine
    if isinstance(cos, float):
        return -math.inf if cos != cos else cos
    return -math.inf if cos is not None else math.inf


def _worst(tensors: list[FrameworkTensor], verdict) -> FrameworkTensor:
    return min(tensors, key=lambda t: _sort_value(verdict(t)))


def _worst_cosine(tensors: list[FrameworkTensor], verdict) -> float | str:
    values = [j.cosine for j in (verdict(t) for t in tensors) if j is not None and j.cosine is not None]
    numbers = [v for v in values if isinstance(v, float) and v == v]
    texts = [v for v in values if not isinstance(v, float)]
    if texts:
        return texts[0]       # Nan / N/A: worse than any number
    return min(numbers) if numbers else "N/A"
