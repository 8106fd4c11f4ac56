"""Judging a tensor by its dumped statistics alone (``vcs`` on statistics-mode dumps, product.md
§15): msprobe's default task records Max, Min, Mean and Norm per tensor, no values.

An output *fails* when the relative error ``|t - g| / max(|g|, 1e-12)`` of its Max, Min or Norm
exceeds the tolerance, or when the statistic is non-finite on the target while the golden's is
finite. Mean is not judged: it sits near zero for most activations, so its relative error is
noise. A statistic that is null on either side (or non-finite on the golden) cannot be compared;
a tensor none of whose three statistics can be compared is *not comparable* (``fails`` None):
listed, never a failure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

JUDGED = (("Max", "max"), ("Min", "min"), ("Norm", "norm"))
DEFAULT_TOLERANCE = 0.1
_TINY = 1e-12


@dataclass(frozen=True)
class StatVerdict:
    fails: bool | None              # None: no statistic comparable
    failed: tuple[str, ...]         # the failing statistics: "Max", "Min", "Norm"
    rel_error: float | None         # the largest relative error judged (inf: non-finite target)
    reason: str = ""                # why not comparable


def judge_stats(target, golden, tolerance: float = DEFAULT_TOLERANCE) -> StatVerdict:
    """``target`` and ``golden``: :class:`~precision_shell.model.runs.Stats` (or None)."""
    if target is None or golden is None:
        return StatVerdict(None, (), None, "no statistics on " + ("the target" if target is None else "the golden"))
    failed, worst, compared = [], None, 0
    for label, attr in JUDGED:
        t, g = getattr(target, attr), getattr(golden, attr)
        if t is None or g is None or not math.isfinite(g):
            continue
        compared += 1
        rel = abs(t - g) / max(abs(g), _TINY) if math.isfinite(t) else math.inf
        worst = rel if worst is None or rel > worst else worst
        if rel > tolerance:
            failed.append(label)
    if not compared:
        return StatVerdict(None, (), None, "Max, Min and Norm null or non-finite on a side")
    return StatVerdict(bool(failed), tuple(failed), worst)
