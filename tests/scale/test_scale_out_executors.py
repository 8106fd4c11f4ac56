"""The executor interface of the engines (analysis/compare/executors.py) without a cluster: a lost
worker's task is reported, a failing task does not stop the others, Ctrl-C keeps what finished."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

from precision_shell.analysis.compare.engine import run_compare
from precision_shell.analysis.compare.mapping import plan_golden_compare
from precision_shell.analysis.compare.executors import run_tasks
from precision_shell.model.session import Session
from precision_shell.samples.writer import SampleOptions, write_workspace


class KilledWorker(Exception):
    """Named as Dask's: what a task's future raises once its retries died with their workers."""


class LosesFirstTask:
    """A one-thread executor whose first task's worker 'dies'."""

    _max_workers = 1

    def __init__(self):
        self.inner = ThreadPoolExecutor(1)
        self.submitted = 0

    def submit(self, fn, *args):
        self.submitted += 1
        if self.submitted == 1:
            fut = Future()
            fut.set_exception(KilledWorker("worker tcp://127.0.0.1:1 died 3 times"))
            return fut
        return self.inner.submit(fn, *args)


def test_a_task_lost_with_its_worker_is_reported_and_the_rest_compared(tmp_path):
    write_workspace(tmp_path, SampleOptions(seed=0, scale_mb=12))   # several 4 MB tasks
    session = Session.open(tmp_path)
    plan = plan_golden_compare(session.graph, session.dumps, session.golden)
    full = run_compare(plan, workers=1)
    lost = run_compare(plan, executor=LosesFirstTask())
    reasons = [r.reason for r in lost.iter_done() if "worker lost" in r.reason]
    assert reasons and all(r == "compare worker lost: KilledWorker" for r in reasons)
    assert any("a compare worker was lost (KilledWorker" in p for p in lost.problems), lost.problems
    # every other tensor is compared exactly as by the local engine
    expected = {r.tensor: r.metrics.cosine for r in full.iter_done()}
    others = [r for r in lost.iter_done() if "worker lost" not in r.reason and r.compared]
    assert others and all(expected[r.tensor] == r.metrics.cosine for r in others)
    gone = {r.tensor for r in lost.iter_done() if "worker lost" in r.reason}
    assert lost.count_done()[1] == sum(1 for r in full.iter_done() if r.compared and r.tensor not in gone)


def test_run_tasks_reports_each_failure_and_keeps_going():
    got, failed = {}, {}

    def work(x):
        if x == 3:
            raise ValueError("bad batch")
        return x * x

    with ThreadPoolExecutor(2) as pool:
        stopped = run_tasks(pool, work, ((x, (x,)) for x in range(6)), got.__setitem__,
                            failed.__setitem__, window=2)
    assert not stopped
    assert got == {x: x * x for x in range(6) if x != 3}
    assert list(failed) == [3] and str(failed[3]) == "bad batch"


def test_run_tasks_ctrl_c_cancels_the_rest_and_keeps_finished():
    got = {}
    seen = []

    def on_result(key, value):
        got[key] = value
        seen.append(key)
        if len(seen) == 2:
            raise KeyboardInterrupt

    submitted = []

    def tasks():
        for x in range(50):
            submitted.append(x)
            yield x, (x,)

    with ThreadPoolExecutor(1) as pool:
        stopped = run_tasks(pool, lambda x: x + 1, tasks(), on_result, lambda k, e: None, window=3)
    assert stopped
    assert len(got) >= 2 and all(got[k] == k + 1 for k in got)
    assert len(submitted) < 50   # the rest was never submitted


def test_only_the_executors_module_imports_dask_and_only_when_asked(tmp_path):
    import ast
    import os
    import subprocess
    import sys
    from pathlib import Path

    import precision_shell

    package = Path(precision_shell.__file__).parent
    importers = []
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(n.split(".")[0] in ("dask", "distributed") for n in names):
                importers.append(path.relative_to(package).as_posix())
    assert sorted(set(importers)) == ["analysis/compare/executors.py"]
    # and a session that never asks for a scheduler never loads it
    code = ("import sys; from precision_shell.cli import main; "
            f"main([{str(tmp_path)!r}, '-c', 'help']); "
            "print('LOADED' if 'distributed' in sys.modules or 'dask' in sys.modules else 'NOT')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(package.parent)}).stdout
    assert out.strip().endswith("NOT")


def test_config_set_scheduler_sends_the_next_compare_there(capsys, sample_ws, tmp_path):
    from tests.conftest import run_cli

    root, _ = sample_ws
    rc, out, err = run_cli(capsys, root, "-o", tmp_path / "out", "-c",
                           "config set scheduler tcp://127.0.0.1:9; vc; config set scheduler default; vc")
    assert "scheduler = tcp://127.0.0.1:9" in out
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    import importlib.util

    expected = ("error: scheduler tcp://127.0.0.1:9: cannot connect (" if importlib.util.find_spec("distributed")
                else "error: --scheduler needs Dask: pip install 'precision-shell[dask]' "
                "(from a checkout: pip install -e '.[dask]')")   # the extra missing
    assert len(errors) == 1 and errors[0].startswith(expected)
    assert out.count("NPU vs golden:") == 1   # the second vc ran locally
