"""What a framework compare (``vc`` on msprobe dumps) did with each row, as graph mode's
:class:`~.coverage.Coverage` counts it: compared, or skipped with a reason kind (no golden row,
no tensor file on a side, a plain value rather than a tensor, shapes differ), or unreadable.
``vc`` prints the per-reason counts the same way on every kind of dump."""

from __future__ import annotations

from typing import Iterable

from .coverage import NO_DUMP, NO_GOLDEN, SHAPE_DIFFERS, Coverage
from .framework_compare import UNSUPPORTED, RowResult

NOT_A_TENSOR, NO_GOLDEN_FILE, NOT_COMPARABLE = "plain value", "no golden file", "not comparable"
_MESSAGES = {"NPU does not have data file.": NO_DUMP, "Bench does not have data file.": NO_GOLDEN_FILE,
             "Bench api/module unmatched.": NO_GOLDEN}


def _compared(r: RowResult, mode: str) -> bool:
    if mode == "tensor":
        return r.metrics is not None and any(c != UNSUPPORTED for c in r.metrics.cells())
    if mode == "statistics":
        return r.stats is not None
    return r.pair.golden is not None


def framework_coverage(rows: Iterable[RowResult], mode: str) -> Coverage:
    cov = Coverage()
    for r in rows:
        cov.total += 1
        if _compared(r, mode):
            cov.compared += 1
            continue
        where = r.name
        if r.errors:
            cov.unreadable.add("unreadable", where, r.errors[0])
        elif r.pair.golden is None:
            cov.skipped.add(NO_GOLDEN, where, r.pair.reason or "no golden row")
        elif not r.pair.target.leaf.is_tensor:
            cov.skipped.add(NOT_A_TENSOR, where, "a plain value, not a tensor")
        elif r.pair.shape_mismatch:
            cov.skipped.add(SHAPE_DIFFERS, where, r.pair.reason or "shapes differ")
        else:
            message = r.metrics.message if r.metrics is not None else ""
            cov.skipped.add(_MESSAGES.get(message, NOT_COMPARABLE), where, message or "not comparable")
    return cov
