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
* Small float pairs of a task go to the C kernel a few at a time (``pair_batch``), and ``vc``
  hands out the first tasks while the rest of the plan is still being made (``planning``).

The vendor-layout CSV (writing ours, reading msaccucmp's) is in ``vendor_csv``.
"""

from __future__ import annotations

import os
import time
from contextlib import ExitStack
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ThreadPoolExecutor, wait
from typing import Any, Callable, Iterable, Iterator

from precision_shell.analysis.compare.plan import ComparePlan, OpPlan
from precision_shell.analysis.compare.results import (  # noqa: F401  (re-exported)
    CompareResult, ResultStore, RowView, TensorResult,
)
from precision_shell.analysis.compare.tasks import iter_task, result_row, run_task
from precision_shell.analysis.compare.worker import PairResult, skipped_pair
from precision_shell.analysis.compare.coverage import NO_DUMP, NO_GOLDEN, reason_kind
from precision_shell.analysis.compare.metrics import Metrics
from precision_shell.analysis.compare.vendor_csv import (  # noqa: F401  (re-exported)
    csv_rows, result_from_csv, write_vendor_csv,
)
from precision_shell.formats.dump_file import release_thread_buffers
from precision_shell.gc_pause import gc_paused

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


def task_target(total: int, workers: int, left: int, count: int) -> int:
    """Target bytes of task number ``count`` when about ``left`` bytes are still to be handed
    out. Steady: ~``_BATCHES_PER_WORKER`` tasks a worker, within [_MIN_BATCH_BYTES,
    _MAX_BATCH_BYTES]. The first tasks are small and double up to that (the first worker starts
    after a few ops are planned, not a whole task's ~50), and the last ones shrink with what is
    left (the workers end together, not one of them alone on a big task)."""
    steady = min(max(total // max(1, workers * _BATCHES_PER_WORKER), _MIN_BATCH_BYTES), _MAX_BATCH_BYTES)
    tail = max(left // (2 * workers), _MIN_BATCH_BYTES)
    return min(_MIN_BATCH_BYTES << min(count, 30), steady, tail)


def make_tasks(plan: ComparePlan, workers: int, ops: Iterable[OpPlan] | None = None,
               total_bytes: int | None = None) -> Iterator[tuple[list[int], tuple]]:
    """(rows, task) for ``compare_tasks.run_task``: consecutive whole ops of about the bytes
    ``task_target`` gives, built as they are handed out. ``ops``: the plan's ops as they are
    planned (default: all), ``total_bytes`` then an estimate of the plan's (sizes the tasks)."""
    t = plan.table
    total = plan.total_bytes if total_bytes is None else total_bytes
    planned = plan.ops if ops is None else ops
    # what is left: exact for a planned plan; while planning, the mean bytes of the ops so far
    # times the ops still expected (the size estimate counts files, not the rows' bytes)
    expected = plan.expected_ops if ops is not None else 0
    handed = count = seen = 0

    def left() -> int:
        if expected and seen:
            return (handed + size) * max(expected - seen, 0) // seen
        return total - handed

    size = 0
    target = task_target(total, workers, left(), count)
    npu_mode = plan.device_shape_mode
    groups: list[tuple] = []
    rows_in: list[int] = []
    for op in planned:
        rows = [r for r in op.rows if t.runnable(r)]
        if not rows:
            continue
        # keep an op's tensors together: they share one dump file
        if groups and (size >= target or len(rows_in) >= _MAX_BATCH_JOBS):
            yield rows_in, (npu_mode, groups)
            handed, count = handed + size, count + 1
            groups, rows_in, size = [], [], 0
            target = task_target(total, workers, left(), count)
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
        seen += 1
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
    with gc_paused():   # ~10 result tuples a row and no cycles: the collector's passes find nothing
        return _run_compare(plan, progress, workers, executor, planning, estimated_bytes)


def _run_compare(plan: ComparePlan, progress: Callable | None, workers: int | None, executor: Executor | None,
                 planning: Iterator[OpPlan] | None, estimated_bytes: int) -> CompareResult:
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
    planned = late.store is not None
    store = late.open()    # interrupted while planning: the rows planned so far
    store.resolve()
    store.trim()
    problems = list(plan.problems) + problems
    if cancelled:
        done = int(store.done().sum())
        where = "" if planned else f" (planning stopped after {len(plan.ops)} ops)"
        problems.append(f"interrupted: {done} of {len(t)} tensors compared{where}; the result is partial")
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

