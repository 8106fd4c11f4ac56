"""The compare phase alone, in one process: CPU and wall of a `vc`'s tasks, per run and per thread.

    python bench/compare_phase.py WS [--workers 2] [--runs 4] [--digest]

The workspace is opened and planned once (not timed); then the plan's tasks (``make_tasks``, as
``vc -j N`` cuts them) run ``--runs`` times on N threads with the GC paused, as ``vc`` runs them.
``time.process_time`` for the process, ``time.thread_time`` per worker thread. ``--digest``:
a SHA-256 of the last run's result tuples, to check that two builds give the same rows (run it
against another checkout with PYTHONPATH=that checkout, its C kernels built in place).
"""

from __future__ import annotations

import argparse
import hashlib
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from precision_shell.analysis.compare.engine import make_tasks
from precision_shell.analysis.compare.mapping import plan_golden_compare
from precision_shell.analysis.compare.tasks import run_task
from precision_shell.gc_pause import gc_paused
from precision_shell.model.session import Session


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workspace")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--digest", action="store_true")
    args = parser.parse_args()
    session = Session.open(args.workspace)
    plan = plan_golden_compare(session.graph, session.dumps, session.golden)
    tasks = [task for _, task in make_tasks(plan, args.workers)]
    print(f"{len(tasks)} tasks, {plan.total_bytes / 1e9:.2f} GB", flush=True)
    thread_cpu: dict[str, float] = {}
    lock = threading.Lock()

    def run(task):
        start = time.thread_time()
        rows = run_task(task)
        with lock:
            name = threading.current_thread().name
            thread_cpu[name] = thread_cpu.get(name, 0.0) + time.thread_time() - start
        return rows

    results = []
    for number in range(args.runs):
        thread_cpu.clear()
        cpu, wall = time.process_time(), time.perf_counter()
        with gc_paused():
            if args.workers == 1:
                results = [run(task) for task in tasks]
            else:
                with ThreadPoolExecutor(args.workers) as pool:
                    results = list(pool.map(run, tasks))
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        print(f"run {number}: wall {wall:.3f} s, CPU {cpu:.3f} s, threads "
              + " ".join(f"{v:.3f}" for v in thread_cpu.values()), flush=True)
    if args.digest:
        print("digest", hashlib.sha256(repr(results).encode()).hexdigest())


if __name__ == "__main__":
    main()
