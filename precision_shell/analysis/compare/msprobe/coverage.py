"""What a framework compare (``vc`` on msprobe dumps) did with each row, as graph mode's
:class:`~.coverage.Coverage` counts it: compared, or skipped with a reason kind (no golden row,
no tensor file on a side, a plain value rather than a tensor, shapes differ), or unreadable.
``vc`` prints the per-reason counts the same way on every kind of dump."""

from __future__ import annotations

from precision_shell.analysis.compare.coverage import NO_DUMP, NO_GOLDEN, SHAPE_DIFFERS, Coverage
from precision_shell.analysis.compare.msprobe.engine import RowResult
from precision_shell.analysis.compare.msprobe.tensor_metrics import UNSUPPORTED

NOT_A_TENSOR, NO_GOLDEN_FILE, NOT_COMPARABLE = "plain value", "no golden file", "not comparable"
_MESSAGES = {"NPU does not have data file.": NO_DUMP, "Bench does not have data file.": NO_GOLDEN_FILE,
             "Bench api/module unmatched.": NO_GOLDEN}


def _tensor_compared(r: RowResult) -> bool:
    return r.metrics is not None and any(c != UNSUPPORTED for c in r.metrics.cells())


def uncompared(rows: list[RowResult], mode: str) -> list[RowResult]:
    """The rows ``mode`` did not compare (one pass; 300k rows of a 100k-entry pair)."""
    if mode == "statistics":
        where = getattr(rows, "where", None)     # StatisticsRows: build only the rows skipped
        if where is not None:
            return where(lambda pair: pair.golden is None)
        return [r for r in rows if r.stats is None]
    if mode == "md5":
        return [r for r in rows if r.pair.golden is None]
    return [r for r in rows if not _tensor_compared(r)]


def framework_coverage(rows: list[RowResult], mode: str) -> Coverage:
    skipped = uncompared(rows, mode)
    cov = Coverage(total=len(rows), compared=len(rows) - len(skipped))
    for r in skipped:
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
