"""Whole-network compare (``vc``): run a :class:`ComparePlan` on a ``concurrent.futures.Executor``.

Why it is shaped like this:

* The vendor engine spends most of its time re-packing golden arrays element by element and
  evaluating each metric as a separate whole-array pass (formats.md A.9). Here each worker
  memory-maps both files of a pair, restores the layout, and computes every metric in two chunked
  passes (``analysis.metrics``), so memory stays bounded by one tensor pair per worker.
* Jobs are batched (one op or a group of small ops per task) so inter-process overhead is paid
  per batch, not per tensor; batches are sized so that every worker gets several of them (load
  balance) and results stream back while the rest runs (progress bar).
* A golden is compared twice (as its op's output and as each consumer's input), and a dumped
  input is usually the very bytes of its producer's dumped output. Such inputs are checked with
  a memcmp and take the producer row's metrics (exactly the same numbers), so chains cost one
  metric pass per tensor instead of two.
* Any ``Executor`` works: a local process pool by default, ``-j 1`` runs in-process, tests and a
  Dask client can pass their own. Results are keyed by row, so the outcome does not depend on the
  executor or the number of workers.
* Ctrl-C (KeyboardInterrupt in the parent) cancels what has not started, keeps every finished
  row, and marks the result as partial.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import threading
import time
from concurrent.futures import Executor, Future, ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Iterable

from precision_shell.analysis.compare_mapping import ComparePlan, OpPlan
from precision_shell.analysis.compare_worker import (
    PairJob, PairResult, compare_job, ignore_sigint, iter_batch, run_batch,
)
from precision_shell.analysis.metrics import JSON_KEYS, Metrics

_MIN_BATCH_BYTES = 4 << 20
_MAX_BATCH_BYTES = 64 << 20
_MAX_BATCH_JOBS = 256
_BATCHES_PER_WORKER = 8
# Below this much data a process pool costs more to start (~0.1 s) than the whole compare.
INLINE_BELOW_BYTES = 16 << 20


@dataclass
class TensorResult:
    """One compared tensor (a CSV row)."""

    order: int                      # the op's execution position (CSV Index)
    op: str
    op_type: str
    io: str                         # "input" | "output"
    index: int
    golden_ops: list[str]
    golden_ref: str | None
    metrics: Metrics
    npu_dtype: str = "NaN"
    golden_dtype: str = "NaN"
    shape: tuple[int, ...] | None = None
    reason: str = ""
    compared: bool = False
    identical: bool = False         # NPU vs NPU: the two tensors are bit-identical

    @property
    def tensor(self) -> str:
        return f"{self.op}:{self.io}:{self.index}"

    def to_json(self) -> dict:
        return {"index": self.order, "op": self.op, "type": self.op_type, "tensor": self.tensor,
                "golden": self.golden_ops, "golden_tensor": self.golden_ref, "npu_dtype": self.npu_dtype,
                "golden_dtype": self.golden_dtype, "shape": list(self.shape) if self.shape else None,
                "compared": self.compared, **self.metrics.as_json(), "reason": self.reason or None}


@dataclass
class CompareResult:
    mode: str                       # "golden" | "npu" | "csv"
    npu_label: str
    golden_label: str
    ops: list[OpPlan]
    rows: list[TensorResult | None]  # by row; None = not computed (interrupted)
    cancelled: bool = False
    workers: int = 1
    elapsed: float = 0.0
    bytes_read: int = 0
    problems: list[str] = field(default_factory=list)
    csv_path: Path | None = None

    @property
    def done_rows(self) -> list[TensorResult]:
        return [r for r in self.rows if r is not None]

    def rows_of(self, plan: OpPlan) -> list[TensorResult]:
        return [self.rows[i] for i in plan.rows if self.rows[i] is not None]

    @property
    def mb_per_s(self) -> float:
        return self.bytes_read / 1e6 / self.elapsed if self.elapsed > 0 else 0.0

    def csv_rows(self) -> list:
        return csv_rows(self)


def default_workers() -> int:
    return os.cpu_count() or 1


def make_batches(jobs: list[PairJob], workers: int) -> list[list[PairJob]]:
    """Consecutive jobs grouped so each batch holds whole ops and roughly equal bytes."""
    total = sum(j.nbytes for j in jobs)
    target = min(max(total // max(1, workers * _BATCHES_PER_WORKER), _MIN_BATCH_BYTES), _MAX_BATCH_BYTES)
    batches: list[list[PairJob]] = []
    current: list[PairJob] = []
    size = 0
    for job in jobs:
        # keep an op's tensors together: they share one dump header
        if current and job.op != current[-1].op and (size >= target or len(current) >= _MAX_BATCH_JOBS):
            batches.append(current)
            current, size = [], 0
        current.append(job)
        size += job.nbytes
    if current:
        batches.append(current)
    return batches


def _pool(workers: int) -> ProcessPoolExecutor:
    # forkserver when threads run (the REPL: prompt_toolkit): forking a threaded process can
    # deadlock on a lock another thread held; its server process is started once per session.
    # A single-threaded parent (batch mode) forks: cheapest, and scripts need no main guard.
    methods = multiprocessing.get_all_start_methods()
    method = "fork" if threading.active_count() == 1 and "fork" in methods else \
        ("forkserver" if "forkserver" in methods else None)
    ctx = multiprocessing.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload(["precision_shell.analysis.compare_worker"])
    return ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=ignore_sigint)


class _Collector:
    def __init__(self, plan: ComparePlan):
        self.plan = plan
        self.op_of_row: dict[int, OpPlan] = {r: op for op in plan.ops for r in op.rows}
        self.rows: list[TensorResult | None] = [None] * len(plan.jobs)
        self.bytes_read = 0
        self.aliases: dict[int, tuple[PairJob, int]] = {}

    def resolve_aliases(self) -> None:
        """Rows that repeat another row's bytes take its metrics (still None if that row was not
        reached before an interrupt)."""
        for row, (job, source) in self.aliases.items():
            src = self.rows[source]
            if src is not None:
                op = self.op_of_row[row]
                self.rows[row] = TensorResult(op.order, op.op, op.type, job.io, job.index, op.golden_ops,
                                              job.golden_ref, src.metrics, src.npu_dtype, src.golden_dtype,
                                              src.shape, src.reason, src.compared, src.identical)

    def store(self, job: PairJob, res: PairResult) -> None:
        if res.same_as is not None:      # filled in from that row once everything is back
            self.aliases[job.row] = (job, res.same_as)
            self.bytes_read += res.nbytes
            return
        op = self.op_of_row[job.row]
        self.rows[job.row] = TensorResult(op.order, op.op, op.type, job.io, job.index, op.golden_ops,
                                          job.golden_ref, res.metrics, res.npu_dtype, res.golden_dtype,
                                          res.shape, res.reason, res.compared,
                                          bool(res.extra.get("identical")))
        self.bytes_read += res.nbytes

    def fail(self, batch: Iterable[PairJob], reason: str) -> None:
        for job in batch:
            self.store(job, PairResult(job.row, Metrics.unavailable(reason), reason=reason))


def run_compare(plan: ComparePlan, *, progress: Callable | None = None, workers: int | None = None,
                executor: Executor | None = None) -> CompareResult:
    """Execute ``plan``. Without an executor, ``workers=1`` (or a plan too small to be worth a
    pool) runs in this process; otherwise batches go to ``executor`` (default: a process pool of
    ``workers``, default the CPU count)."""
    from precision_shell.model.progress import silent_progress

    progress = progress or silent_progress
    workers = workers or default_workers()
    col = _Collector(plan)
    start = time.perf_counter()
    problems = list(plan.problems)
    cancelled = False
    runnable = [j for j in plan.jobs if j.npu is not None and j.golden is not None]
    with progress("comparing", len(plan.jobs)) as bar:
        try:
            for job in plan.jobs:   # rows without a pair need no worker
                if job.npu is None or job.golden is None:
                    col.store(job, compare_job(job))
            bar.advance(len(plan.jobs) - len(runnable))
            if executor is None and (workers == 1 or plan.total_bytes < INLINE_BELOW_BYTES):
                workers = 1
                _run_inline(runnable, col, bar)
            else:
                cancelled = _run_pool(runnable, col, bar, executor, workers, problems)
        except KeyboardInterrupt:
            cancelled = True
    col.resolve_aliases()
    done = sum(r is not None for r in col.rows)
    if cancelled:
        problems.append(f"interrupted: {done} of {len(plan.jobs)} tensors compared; the result is partial")
    return CompareResult(plan.mode, plan.npu_label, plan.golden_label, plan.ops, col.rows, cancelled,
                         workers if executor is None else getattr(executor, "_max_workers", workers),
                         time.perf_counter() - start, col.bytes_read, problems)


def _run_inline(jobs: list[PairJob], col: _Collector, bar: Any) -> None:
    # progress per tensor, so an interrupt loses nothing already computed
    for group in make_batches(jobs, 1):
        for job, res in zip(group, iter_batch(group)):
            col.store(job, res)
            bar.advance(1)


def _run_pool(jobs: list[PairJob], col: _Collector, bar: Any, executor: Executor | None,
              workers: int, problems: list[str]) -> bool:
    """Returns True when interrupted (KeyboardInterrupt)."""
    own = executor is None
    pool = _pool(workers) if own else executor
    futures: dict[Future, list[PairJob]] = {}
    try:
        for batch in make_batches(jobs, workers):
            futures[pool.submit(run_batch, batch)] = batch
        pending = set(futures)
        try:
            for fut in as_completed(futures):
                pending.discard(fut)
                _harvest(fut, futures[fut], col, problems)
                bar.advance(len(futures[fut]))
        except KeyboardInterrupt:
            for fut in pending:
                fut.cancel()
            for fut in pending:     # batches that finished while we were interrupted
                if fut.done() and not fut.cancelled():
                    _harvest(fut, futures[fut], col, problems)
            return True
        return False
    finally:
        if own:
            pool.shutdown(wait=True, cancel_futures=True)


def _harvest(fut: Future, batch: list[PairJob], col: _Collector, problems: list[str]) -> None:
    try:
        results = fut.result()
    except BrokenProcessPool as exc:
        col.fail(batch, f"compare worker died: {exc}")
        if not any("worker died" in p for p in problems):
            problems.append(f"a compare worker process died ({exc}); its tensors are NaN rows")
        return
    except Exception as exc:  # a bug in a worker: keep the other batches' results
        col.fail(batch, f"internal error: {type(exc).__name__}: {exc}")
        if not any(p.startswith("internal error") for p in problems):
            problems.append(f"internal error in a compare batch ({type(exc).__name__}: {exc}); "
                            f"its tensors are NaN rows")
        return
    for job, res in zip(batch, results):
        col.store(job, res)


# ------------------------------------------------------------------------------------------------
# the vendor CSV: writing our result, reading msaccucmp's

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
    return CompareRow(row.order, row.op_type, row.op, list(row.golden_ops), row.tensor, row.io, row.index,
                      row.shape, metrics, std, row.reason,
                      extra={"NPUDataType": row.npu_dtype, "GroundTruthDataType": row.golden_dtype})


def write_vendor_csv(path: Path, result: CompareResult) -> int:
    """The vendor-layout CSV (formats.md §6, A.8.1), written atomically; returns the row count."""
    from precision_shell.formats.compare_csv import write_compare_csv

    rows = csv_rows(result)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        # NPU vs NPU: both sides are dumps, so both Address columns exist (msaccucmp's layout)
        write_compare_csv(tmp, rows, golden_address=result.mode == "npu")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return len(rows)


def csv_rows(result: CompareResult) -> list:
    """Rows for ``formats.compare_csv.write_compare_csv``, sorted by Index (op), inputs first."""
    return [_csv_row(r) for r in result.done_rows]


_STD = re.compile(r"^\(\s*([^;]+);([^)]+)\),\(\s*([^;]+);([^)]+)\)$")


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
            t = TensorResult(0, op, row.op_type, row.kind, row.tensor_index, row.golden_ops,
                             ",".join(row.golden_ops) or None, metrics,
                             row.extra.get("NPUDataType", "NaN"), row.extra.get("GroundTruthDataType", "NaN"),
                             row.shape, row.fail_reason, compared)
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
