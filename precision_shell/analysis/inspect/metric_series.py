"""One compare metric along execution order, per op: what ``plot METRIC`` / ``vcs --plot`` draw and
the HTML report charts. An op's value is its worst compared output (lowest cosine, highest error),
so a failing output is never hidden behind a passing one."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable

from precision_shell.analysis.compare.metrics import JSON_KEYS

# metrics a lower value of which is worse; for every other one higher is worse
LOWER_IS_WORSE = frozenset({"cosine", "one_thousandth_err_ratio", "five_thousandths_err_ratio"})
PLOT_METRICS = tuple(k for k in JSON_KEYS.values() if k != "standard_deviation")


def worst_value(values: Iterable[float], key: str) -> float:
    """The worst of one op's output values of metric ``key``; NaN when there is none. A NaN
    cosine is the worst cosine there is (the compare fails it)."""
    values = list(values)
    known = [v for v in values if v == v]
    if key in LOWER_IS_WORSE:
        return math.nan if len(known) < len(values) or not known else min(known)
    return max(known) if known else math.nan


@dataclass
class SeriesPoint:
    order: int                  # execution position
    op: str
    type: str
    value: float                # NaN: not computed for this op
    role: str | None = None     # "root" | "propagated" when the op is in the suspect list
    first: bool = False         # the first divergence

    def to_json(self) -> dict:
        value = self.value if math.isfinite(self.value) else (None if self.value != self.value else str(self.value))
        return {"order": self.order, "op": self.op, "type": self.type, "value": value,
                "role": self.role, "first": self.first}


def metric_series(result: Any, found: Any, key: str) -> list[SeriesPoint]:
    """Every op of ``result`` (a CompareResult) with a compared output, in execution order;
    ``found`` (the ``vcs`` SuspectList, or None) gives the roles."""
    by_op = {s.op: s for s in found.suspects} if found is not None else {}
    points = []
    for plan in sorted(result.ops, key=lambda p: p.order):
        outputs = [t for t in result.rows_of(plan) if t.io == "output" and t.compared]
        if not outputs:
            continue
        suspect = by_op.get(plan.op)
        points.append(SeriesPoint(plan.order, plan.op, plan.type,
                                  worst_value((getattr(t.metrics, key) for t in outputs), key),
                                  suspect.role if suspect else None, bool(suspect and suspect.first)))
    return points


# msprobe's tensor-mode metrics under the names `plot` takes (its EucDist is not relative: no
# relative_euclidean_distance here)
FRAMEWORK_METRICS = {"cosine": "cosine", "max_abs_error": "max_abs_err", "max_relative_error": "max_relative_err",
                     "one_thousandth_err_ratio": "one_thousandth",
                     "five_thousandths_err_ratio": "five_thousandths"}


def framework_series(run: Any, results: Iterable[Any], suspects: list[Any], key: str,
                     kinds: tuple[str, ...] = ("forward",)) -> list[SeriesPoint]:
    """:func:`metric_series` for a framework (msprobe) run: every entry of ``kinds`` with a
    compared output, in dump order; msprobe's texts (``Nan``, ``N/A``) are NaN."""
    by_name = {r.name: r for r in results}
    field_name = FRAMEWORK_METRICS[key]
    by_op = {s.op: s for s in suspects}
    points = []
    for op in run.ops:
        if op.kind not in kinds:
            continue
        values = []
        for t in op.outputs:
            r = by_name.get(t.compare_name)
            if r is not None and r.metrics is not None and r.pair.golden is not None:
                value = getattr(r.metrics, field_name)
                values.append(value if isinstance(value, float) else math.nan)
        if not values:
            continue
        suspect = by_op.get(op.name)
        points.append(SeriesPoint(op.index, op.name, op.kind, worst_value(values, key),
                                  suspect.role if suspect else None, bool(suspect and suspect.first)))
    return points
