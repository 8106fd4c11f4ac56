"""Whole-network compare (``vc``): run a :class:`ComparePlan` on a ``concurrent.futures.Executor``.

Why it is shaped like this:

* The vendor engine spends most of its time re-packing golden arrays element by element and
  evaluating each metric as a separate whole-array pass (formats.md A.9). Here each worker
  reads both tensors of a pair into reusable buffers, restores the layout with one copy, and
  computes every metric in two passes (``analysis.compare.metrics``), so memory stays bounded by a few
  tensors per worker.
* Rows are batched into tasks of plain tuples (whole ops, grouped by dump file;
  ``compare_tasks``) so inter-process overhead is paid per task, not per tensor; tasks are sized
  so that every worker gets several of them (load balance), handed out a few at a time (never
  all built at once), and results stream back into arrays (``compare_results``) while the rest
  runs (progress bar).
* A golden is compared twice (as its op's output and as each consumer's input), and a dumped
  input is usually the very bytes of its producer's dumped output. Such inputs are checked with
  a memcmp and take the producer row's metrics (exactly the same numbers), so chains cost one
  metric pass per tensor instead of two.
* Any ``Executor`` works: local threads by default (the reading, the layout copy and the C
  kernel release the GIL; see ``_pool``), ``-j 1`` runs in-process, tests and a Dask client can
  pass their own (a process pool works too: tasks and results are plain tuples). Results are keyed by row, so the outcome does not depend on the
  executor or the number of workers.
* Ctrl-C (KeyboardInterrupt in the parent) cancels what has not started, keeps every finished
  row, and marks the result as partial.
"""

from __future__ import annotations

import os
import re
import time
from contextlib import ExitStack
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ThreadPoolExecutor, wait
from dataclasses import fields
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from precision_shell.analysis.compare.plan import ComparePlan, OpPlan
from precision_shell.analysis.compare.results import (  # noqa: F401  (re-exported)
    CompareResult, ResultStore, RowView, TensorResult,
)
from precision_shell.analysis.compare.tasks import iter_task, result_row, run_task
from precision_shell.analysis.compare import worker as compare_worker
from precision_shell.analysis.compare.worker import PairResult, skipped_pair
from precision_shell.analysis.compare.coverage import NO_DUMP, NO_GOLDEN, SHAPE_DIFFERS, reason_kind
from precision_shell.analysis.compare.metrics import JSON_KEYS, Metrics
from precision_shell.formats.dump_file import release_thread_buffers

_MIN_BATCH_BYTES = 4 << 20
_MAX_BATCH_BYTES = 64 << 20
_MAX_BATCH_JOBS = 512
_BATCHES_PER_WORKER = 8
# Tasks handed to the pool at a time: enough to keep every worker busy, few enough that the
# tasks of a 200k-row plan are never all built (and pickled) at once.
_TASKS_IN_FLIGHT_PER_WORKER = 3
# Below this much data the compare runs in-process (progress per tensor; threads would gain
# less than a millisecond).
INLINE_BELOW_BYTES = 16 << 20


def default_workers() -> int:
    return os.cpu_count() or 1


def _pool(workers: int) -> ThreadPoolExecutor:
    # Threads, not processes: a task's time is pread (GIL released), the layout copy (numpy,
    # GIL released) and the C kernel (GIL released), so threads keep the cores as busy as
    # processes would, without a forkserver's serial start (a fresh interpreter importing numpy,
    # ~0.2 s), a second numpy in memory, or pickling tasks and results. Measured on a 1.3 GB
    # sample (scale_500, 5 alternating whole-process runs of `vc -j 2`, load average ~5):
    # threads 2.00 s wall, 1.24 CPU s, 46 MB summed PSS; forkserver pool 3.07 s, 1.52, 90 MB.
    return ThreadPoolExecutor(max_workers=workers, thread_name_prefix="pshell-vc")


def make_tasks(plan: ComparePlan, workers: int, ops: Iterable[OpPlan] | None = None,
               total_bytes: int | None = None) -> Iterator[tuple[list[int], tuple]]:
    """(rows, task) for ``compare_tasks.run_task``: consecutive whole ops, roughly equal bytes,
    built as they are handed out. ``ops``: the plan's ops as they are planned (default: all),
    ``total_bytes`` then an estimate of the plan's (sizes the tasks)."""
    t = plan.table
    total = plan.total_bytes if total_bytes is None else total_bytes
    target = min(max(total // max(1, workers * _BATCHES_PER_WORKER), _MIN_BATCH_BYTES), _MAX_BATCH_BYTES)
    npu_mode = plan.device_shape_mode
    groups: list[tuple] = []
    rows_in: list[int] = []
    size = 0
    for op in plan.ops if ops is None else ops:
        rows = [r for r in op.rows if t.runnable(r)]
        if not rows:
            continue
        # keep an op's tensors together: they share one dump file
        if groups and (size >= target or len(rows_in) >= _MAX_BATCH_JOBS):
            yield rows_in, (npu_mode, groups)
            groups, rows_in, size = [], [], 0
        specs = []
        for r in rows:
            a = t.alias[r]
            if a >= 0:
                src = plan.ops[t.op_pos[a]]
                alias = (a, src.dump_path, src.packed, t.index[a])
            else:
                alias = None
            golden = (plan.golden_path(r), None) if npu_mode else plan.golden_path(r)
            specs.append((r, t.io[r], t.index[r], *t.spec[r], golden, alias))
            size += t.nbytes[r]
        groups.append((op.op, op.dump_path, op.packed, specs))
        rows_in += rows
    if groups:
        yield rows_in, (npu_mode, groups)


def run_compare(plan: ComparePlan, *, progress: Callable | None = None, workers: int | None = None,
                executor: Executor | None = None, planning: Iterator[OpPlan] | None = None,
                estimated_bytes: int = 0) -> CompareResult:
    """Execute ``plan``. Without an executor, ``workers=1`` (or a plan too small to be worth a
    pool) runs in this process; otherwise tasks go to ``executor`` (default: a thread pool of
    ``workers``, default the CPU count). ``planning``: the generator still filling ``plan``
    (``mapping.golden_plan_steps``; ``estimated_bytes`` its likely total): tasks start as their
    ops are planned."""
    from precision_shell.model.progress import silent_progress

    progress = progress or silent_progress
    workers = workers or default_workers()
    start = time.perf_counter()
    if planning is not None and (executor is not None or workers > 1) and \
            estimated_bytes >= INLINE_BELOW_BYTES:
        return _run_while_planning(plan, planning, progress, workers, executor, estimated_bytes, start)
    for _ in planning or ():
        pass
    store = ResultStore(plan)
    problems = list(plan.problems)
    cancelled = False
    t = plan.table
    with progress("comparing", len(t)) as bar:
        try:
            no_pair = 0
            for row in range(len(t)):   # rows without a pair need no worker
                if not t.runnable(row):
                    store.add_result(_unrunnable(t, row))
                    no_pair += 1
            bar.advance(no_pair)
            if executor is None and (workers == 1 or plan.total_bytes < INLINE_BELOW_BYTES):
                workers = 1
                _run_inline(plan, store, bar)
            else:
                cancelled = _run_pool(make_tasks(plan, workers), store, bar, executor, workers, problems)
        except KeyboardInterrupt:
            cancelled = True
    store.resolve()
    store.trim()
    done = int(store.done().sum())
    if cancelled:
        problems.append(f"interrupted: {done} of {len(t)} tensors compared; the result is partial")
    return CompareResult(plan.mode, plan.npu_label, plan.golden_label, plan.ops, RowView(store), cancelled,
                         workers if executor is None else getattr(executor, "_max_workers", workers),
                         time.perf_counter() - start, store.bytes_read, problems)


class _LateStore:
    """Results of a compare whose plan is still growing: kept until the plan is complete, then
    in a :class:`ResultStore` of its size."""

    def __init__(self, plan: ComparePlan) -> None:
        self.plan = plan
        self.store: ResultStore | None = None
        self.early: list[tuple] = []

    def add(self, t: tuple) -> None:
        if self.store is None:
            self.early.append(t)
        else:
            self.store.add(t)

    def add_result(self, res: PairResult) -> None:
        self.add(result_row(res))

    def open(self) -> ResultStore:
        if self.store is None:
            self.store = ResultStore(self.plan)
            for t in self.early:
                self.store.add(t)
            self.early.clear()
        return self.store


class _LateBar:
    """Progress counted until the plan's size is known, then shown by ``bar``."""

    def __init__(self) -> None:
        self.count = 0
        self.bar: Any = None

    def advance(self, n: int = 1) -> None:
        if self.bar is None:
            self.count += n
        else:
            self.bar.advance(n)


def _run_while_planning(plan: ComparePlan, planning: Iterator[OpPlan], progress: Callable, workers: int,
                        executor: Executor | None, estimated_bytes: int, start: float) -> CompareResult:
    """run_compare on a pool while ``planning`` fills ``plan``: this thread plans an op, hands
    out a task when its ops are planned, and harvests results meanwhile (planning is Python,
    header reads and the graph's op details: ~10% of a compare of many small ops that the
    workers need not wait for). The progress bar appears once the row count is known."""
    late, bar = _LateStore(plan), _LateBar()
    t = plan.table
    cancelled = False
    with ExitStack() as stack:
        def planned_ops() -> Iterator[OpPlan]:
            for op in planning:
                for row in op.rows:   # rows without a pair need no worker
                    if not t.runnable(row):
                        late.add_result(_unrunnable(t, row))
                        bar.advance(1)
                yield op
            late.open()
            bar.bar = stack.enter_context(progress("comparing", len(t)))
            bar.bar.advance(bar.count)

        problems: list[str] = []
        try:
            cancelled = _run_pool(make_tasks(plan, workers, planned_ops(), estimated_bytes), late, bar,
                                  executor, workers, problems)
        except KeyboardInterrupt:
            cancelled = True
    store = late.open()    # interrupted while planning: the rows planned so far
    store.resolve()
    store.trim()
    problems = list(plan.problems) + problems
    if cancelled:
        done = int(store.done().sum())
        problems.append(f"interrupted: {done} of {len(t)} tensors compared; the result is partial")
    return CompareResult(plan.mode, plan.npu_label, plan.golden_label, plan.ops, RowView(store), cancelled,
                         workers if executor is None else getattr(executor, "_max_workers", workers),
                         time.perf_counter() - start, store.bytes_read, problems)


def _unrunnable(t, row: int) -> PairResult:
    """The result of a planned row that has no pair (no dump, no golden, unreadable dump)."""
    reason = t.reason[row]
    kind, file = t.why.get(row, (NO_DUMP if t.spec[row] is None else NO_GOLDEN, None))
    if file is None:
        return skipped_pair(row, reason, kind)
    return PairResult(row, Metrics.unavailable(reason), reason=reason, coverage_kind=kind, file=file,
                      unreadable=True)


def _run_inline(plan: ComparePlan, store: ResultStore, bar: Any) -> None:
    # progress per tensor, so an interrupt loses nothing already computed
    try:
        for _, task in make_tasks(plan, 1):
            for res in iter_task(task):
                store.add(res)
                bar.advance(1)
    finally:
        release_thread_buffers()


def _run_pool(tasks: Iterable[tuple[list[int], tuple]], store: ResultStore, bar: Any,
              executor: Executor | None, workers: int, problems: list[str]) -> bool:
    """Returns True when interrupted (KeyboardInterrupt)."""
    own = executor is None
    pool = _pool(workers) if own else executor
    window = max(2, workers * _TASKS_IN_FLIGHT_PER_WORKER)
    pending: dict[Future, list[int]] = {}

    def harvest(done: Iterable[Future]) -> None:
        for fut in done:
            rows = pending.pop(fut)
            _harvest(fut, rows, store, problems)
            bar.advance(len(rows))

    try:
        try:
            for rows, task in tasks:
                while len(pending) >= window:
                    harvest(wait(pending, return_when=FIRST_COMPLETED)[0])
                pending[pool.submit(run_task, task)] = rows
            while pending:
                harvest(wait(pending, return_when=FIRST_COMPLETED)[0])
        except KeyboardInterrupt:
            for fut in pending:
                fut.cancel()
            for fut, rows in list(pending.items()):   # tasks that finished while we were interrupted
                if fut.done() and not fut.cancelled():
                    _harvest(fut, rows, store, problems)
            return True
        return False
    finally:
        if own:
            pool.shutdown(wait=True, cancel_futures=True)


def _fail(rows: Iterable[int], store: ResultStore, reason: str) -> None:
    kind = reason_kind(reason)
    for row in rows:
        store.add_result(PairResult(row, Metrics.unavailable(reason), reason=reason, coverage_kind=kind,
                                    unreadable=True))


def _harvest(fut: Future, rows: list[int], store: ResultStore, problems: list[str]) -> None:
    try:
        results = fut.result()
    except Exception as exc:  # a bug in a worker: keep the other tasks' results
        from precision_shell.analysis.compare.executors import worker_lost

        # by name: concurrent.futures.process (and multiprocessing) stay out of a vc's imports
        if type(exc).__name__ == "BrokenProcessPool":
            _fail(rows, store, f"compare worker died: {exc}")
            if not any("worker died" in p for p in problems):
                problems.append(f"a compare worker process died ({exc}); its tensors are NaN rows")
            return
        if worker_lost(exc):   # a cluster worker died (after Dask's retries)
            _fail(rows, store, f"compare worker lost: {type(exc).__name__}")
            if not any("worker lost" in p for p in problems):
                problems.append(f"a compare worker was lost ({type(exc).__name__}: {exc}); "
                                f"its tensors are NaN rows")
            return
        _fail(rows, store, f"internal error: {type(exc).__name__}: {exc}")
        if not any(p.startswith("internal error") for p in problems):
            problems.append(f"internal error in a compare batch ({type(exc).__name__}: {exc}); "
                            f"its tensors are NaN rows")
        return
    for res in results:
        store.add(res)


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
    from precision_shell.formats.compare_csv import write_compare_csv

    count = 0

    def counted() -> Iterator:
        nonlocal count
        for row in csv_rows(result):
            count += 1
            yield row

    # NPU vs NPU: both sides are dumps, so both Address columns exist (msaccucmp's layout)
    write_compare_csv(path, counted(), golden_address=result.mode == "npu")
    return count


def csv_rows(result: CompareResult) -> Iterator:
    """Rows for ``formats.compare_csv.write_compare_csv``, sorted by Index (op), inputs first."""
    store = result.store
    if store is None:
        return (_csv_row(r) for r in result.iter_done())
    return _store_csv_rows(store)


_CELLS_KEPT = 4096


def _store_csv_rows(store: ResultStore) -> Iterator:
    """As ``_csv_row`` for every row with a result, straight from the arrays. Rows sharing a
    result (aliases, repeated constants: most inputs) share its cells, built once while recent."""
    from precision_shell.formats.compare_csv import CompareRow

    t, ops = store.plan.table, store.plan.ops
    kept: dict[int, tuple] = {}
    rid = store.rid.tolist()
    for row, d in enumerate(rid):
        if d < 0:
            continue
        cells = kept.get(d)
        if cells is None:
            if len(kept) >= _CELLS_KEPT:
                kept.clear()
            tensor = store.tensor(row)
            c = _csv_row(tensor)
            cells = kept[d] = (c.shape, c.metrics, c.std, c.fail_reason, c.extra, c.texts)
        op = ops[t.op_pos[row]]
        io, index = ("input", "output")[t.io[row]], t.index[row]
        yield CompareRow(op.order, op.type, op.op, op.golden_ops, f"{op.op}:{io}:{index}", io, index, *cells)


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
