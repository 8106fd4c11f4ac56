"""The vendor-layout CSV of a compare (formats.md §6, A.8.1): writing ``vc``'s result, reading
msaccucmp's ``result_*.csv`` back as a :class:`CompareResult` (``vcs`` on vendor CSVs).

Split from ``engine`` (which runs the compare) without a change; ``engine`` re-exports
``write_vendor_csv``, ``csv_rows`` and ``result_from_csv``.
"""

from __future__ import annotations

import os
import re
from dataclasses import fields
from pathlib import Path
from typing import Any, Iterator

from precision_shell.analysis.compare.plan import OpPlan
from precision_shell.analysis.compare.results import CompareResult, ResultStore, TensorResult
from precision_shell.analysis.compare import worker as compare_worker
from precision_shell.analysis.compare.coverage import NO_DUMP, NO_GOLDEN, SHAPE_DIFFERS, reason_kind
from precision_shell.analysis.compare.metrics import JSON_KEYS, Metrics
from precision_shell.gc_pause import gc_paused

def _csv_row(row: TensorResult):
    from precision_shell.formats.compare_csv import DEFAULT_METRICS, STD_COLUMN, CompareRow

    m = row.metrics
    cells = m.vendor_cells()
    metrics: dict[str, float | None] = {}
    for column, cell in zip(DEFAULT_METRICS, cells):
        key = JSON_KEYS[column]
        if column == STD_COLUMN:
            continue
        metrics[column] = None if key in m.not_computed else float(getattr(m, key))
    std = None if JSON_KEYS[STD_COLUMN] in m.not_computed else cells[DEFAULT_METRICS.index(STD_COLUMN)]
    # the cells as written, formatted once here (the writer would format each number again,
    # row by row; rows sharing a result share these); two all-zero tensors: the vendor's cosine
    # cell is the literal "1.0", not "1.000000"
    texts = {column: cell for column, cell in zip(DEFAULT_METRICS, cells) if column != STD_COLUMN}
    return CompareRow(row.order, row.op_type, row.op, list(row.golden_ops), row.tensor, row.io, row.index,
                      row.shape, metrics, std, row.reason,
                      extra={"NPUDataType": row.npu_dtype, "GroundTruthDataType": row.golden_dtype},
                      texts=texts)


def write_vendor_csv(path: Path, result: CompareResult) -> int:
    """The vendor-layout CSV (formats.md §6, A.8.1), written atomically; returns the row count.
    Rows are built as they are written (200k of them at once would cost ~400 MB)."""
    from precision_shell.formats.compare_csv import write_compare_cells, write_compare_csv

    golden_address = result.mode == "npu"
    store = result.store
    if store is not None:
        cells = StoreCsvCells(store, golden_address)
        with gc_paused():
            write_compare_cells(path, cells, golden_address=golden_address)
        return cells.count
    count = 0

    def counted() -> Iterator:
        nonlocal count
        for row in csv_rows(result):
            count += 1
            yield row

    # NPU vs NPU: both sides are dumps, so both Address columns exist (msaccucmp's layout)
    with gc_paused():   # a few objects a row, none kept, no cycles
        write_compare_csv(path, counted(), golden_address=golden_address)
    return count


def csv_rows(result: CompareResult) -> Iterator:
    """Rows for ``formats.compare_csv.write_compare_csv``, sorted by Index (op), inputs first: one
    ``CompareRow`` a row (``write_vendor_csv`` writes a store's rows as cells instead,
    :class:`StoreCsvCells`; tests hold the two to the same bytes)."""
    return (_csv_row(r) for r in result.iter_done())


_CELLS_KEPT = 4096


class StoreCsvCells:
    """The cells of ``write_vendor_csv``'s rows straight from a store's arrays, as
    ``formats.compare_csv.write_compare_csv`` makes them from ``csv_rows`` (the same text,
    ``safe_text.csv_row`` included), without a ``CompareRow`` a row: an op's cells and a
    distinct result's cells (most inputs share their producer's) are formatted once. Iterate
    once; ``count`` is then the rows given out."""

    def __init__(self, store: ResultStore, golden_address: bool) -> None:
        self.store, self.golden_address, self.count = store, golden_address, 0

    def __iter__(self) -> Iterator[list[str]]:
        from precision_shell.safe_text import csv_cell, may_hold_formula

        store = self.store
        t, ops = store.plan.table, store.plan.ops
        address = ["NaN"] if self.golden_address else []
        kept: dict[int, tuple] = {}
        op_pos, head, head_formula = -1, [], False
        rid = store.rid.tolist()
        for row, d in enumerate(rid):
            if d < 0:
                continue
            part = kept.get(d)
            if part is None:
                if len(kept) >= _CELLS_KEPT:
                    kept.clear()
                r = store.tensor(row)
                shape = "NaN" if r.shape is None else "[" + ",".join(map(str, r.shape)) + "]"
                dtypes = [r.npu_dtype, "NaN", r.golden_dtype]
                tail = [shape, *r.metrics.vendor_cells(), r.reason]
                part = kept[d] = (dtypes, tail, may_hold_formula(dtypes) or may_hold_formula(tail))
            if t.op_pos[row] != op_pos:
                op_pos = t.op_pos[row]
                op = ops[op_pos]
                head = [str(op.order), op.type, op.op]
                golden = ",".join(op.golden_ops) or "*"
                head_formula = may_hold_formula(head) or may_hold_formula([golden])
            tensor = f"{op.op}:{_IO[t.io[row]]}:{t.index[row]}"
            cells = [*head, part[0][0], part[0][1], golden, part[0][2], *address, tensor, *part[1]]
            # the tensor cell starts as the op's name ("op:..."): csv_row's test says of it
            # what it says of the name (a lone "-" and "-:" alike), so head_formula covers it
            if head_formula or part[2]:
                cells = [csv_cell(c) for c in cells]
            self.count += 1
            yield cells


_IO = ("input", "output")
_STD = re.compile(r"^\(\s*([^;]+);([^)]+)\),\(\s*([^;]+);([^)]+)\)$")
_NO_GOLDEN_PREFIX = compare_worker.NO_GOLDEN.split("{")[0]


def _csv_kind(reason: str, golden_ops: list[str]) -> tuple[str, str | None]:
    """(coverage kind, unreadable file or None) of a CSV row that was not compared, from its
    CompareFailReason: the vendor's wording, or pshell's "FILE: why" for a file it could not read."""
    if not reason:
        return (NO_GOLDEN if not golden_ops else "not compared"), None
    if reason.startswith(_NO_GOLDEN_PREFIX):
        return NO_GOLDEN, None
    if reason.startswith(compare_worker.NO_DUMP):
        return NO_DUMP, None
    if "shape" in reason and "does not match" in reason:
        return SHAPE_DIFFERS, None
    path, sep, why = reason.partition(": ")
    if sep and os.sep in path:
        return reason_kind(why), path
    return reason_kind(reason), None


def _metrics_from_cells(values: dict[str, float | None], std: str | None) -> Metrics:
    nan = float("nan")
    kwargs: dict[str, Any] = {f.name: nan for f in fields(Metrics)
                              if f.name not in ("count", "not_computed", "cosine_both_zero", "reasons")}
    not_computed = set()
    for column, value in values.items():
        key = JSON_KEYS.get(column)
        if key is None or key == "standard_deviation":
            continue
        if value is None:
            not_computed.add(key)
        else:
            kwargs[key] = value
    m = _STD.match(std or "")
    if m:
        kwargs.update(zip(("mean_npu", "std_npu", "mean_golden", "std_golden"), map(float, m.groups())))
    else:
        not_computed.add("standard_deviation")
    return Metrics(**kwargs, count=0, not_computed=frozenset(not_computed))


def result_from_csv(paths: list[Path]) -> CompareResult:
    """A CompareResult from vendor ``result_*.csv`` files (columns located by header, old and
    new layouts). Rows whose TensorIndex is not ``op:input|output:i`` are skipped, as ``vcs`` in
    the reference tool does; ops are ordered by file, then Index."""
    from precision_shell.formats.compare_csv import read_compare_csv

    ops: dict[str, OpPlan] = {}
    keyed: list[tuple[tuple[int, int, int], str, TensorResult]] = []
    problems: list[str] = []
    for file_no, path in enumerate(paths):
        for row_no, row in enumerate(read_compare_csv(path)):
            if not row.kind:
                continue
            op = row.npu_op or row.tensor.rsplit(":", 2)[0]
            metrics = _metrics_from_cells(row.metrics, row.std)
            numeric = [v for v in row.metrics.values() if v is not None and v == v]
            # an all-NaN row is "not compared" when the vendor says why or there is no golden
            # ("*"); otherwise it is a computed NaN (NaN in the NPU data) and counts as failing
            compared = bool(numeric) or (not row.fail_reason and bool(row.golden_ops))
            kind, file = ("", None) if compared else _csv_kind(row.fail_reason, row.golden_ops)
            t = TensorResult(0, op, row.op_type, row.kind, row.tensor_index, row.golden_ops,
                             ",".join(row.golden_ops) or None, metrics,
                             row.extra.get("NPUDataType", "NaN"), row.extra.get("GroundTruthDataType", "NaN"),
                             row.shape, row.fail_reason, compared, coverage_kind=kind, file=file,
                             unreadable=file is not None)
            keyed.append(((file_no, row.index, row_no), op, t))
            if op not in ops:
                ops[op] = OpPlan(op, row.op_type, 0, list(row.golden_ops), [], len(row.golden_ops) > 1)
    keyed.sort(key=lambda item: item[0])
    order: dict[str, int] = {}
    rows: list[TensorResult | None] = []
    for _, op, t in keyed:
        plan = ops[op]
        if op not in order:
            order[op] = plan.order = len(order) + 1
        t.order = plan.order
        plan.rows.append(len(rows))
        rows.append(t)
    if not rows:
        problems.append(f"no op:input|output:i rows in {', '.join(map(str, paths))}")
    label = ", ".join(p.name for p in paths)
    return CompareResult("csv", "npu", label, sorted(ops.values(), key=lambda p: p.order), rows,
                         problems=problems)
