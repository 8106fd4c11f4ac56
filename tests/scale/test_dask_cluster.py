"""The compare and scan engines on a real Dask cluster on loopback (issue 15): the same rows as
the local pool, the cluster really did the work, a dying worker, an unreachable scheduler."""

from __future__ import annotations

import os
import time

import pytest

distributed = pytest.importorskip("distributed")

from precision_shell.samples.writer import SampleOptions, write_workspace  # noqa: E402
from tests.conftest import json_docs, run_cli  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    """One 2-worker cluster for the module (a start costs ~2 s)."""
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None) as lc, distributed.Client(lc) as client:
        yield lc, client


@pytest.fixture(scope="module")
def multi_ws(tmp_path_factory):
    root = tmp_path_factory.mktemp("dask_ws")
    return root, write_workspace(root, SampleOptions(seed=0), multi=(4, 2))


def _tasks_done(client) -> int:
    return len(client.get_task_stream())


def _json(capsys, *argv):
    rc, out, err = run_cli(capsys, *argv, "--format", "json")
    return rc, json_docs(out)[-1], err


def test_same_rows_with_and_without_the_cluster(capsys, cluster, multi_ws):
    lc, client = cluster
    root, manifest = multi_ws
    truth = manifest["scale_out"]
    for command in ("vcs --ranks all", "ac --ranks all --steps all -l 0"):
        rc_local, local, _ = _json(capsys, root, "-c", command)
        client.get_task_stream(start=time.time())   # nothing before now counts
        before = time.time()
        with distributed.get_task_stream(client=client, plot=False) as stream:
            rc_dask, remote, err = _json(capsys, root, "--scheduler", lc.scheduler_address, "-c", command)
        assert rc_local == rc_dask, err
        # the CSV's name carries the time of the run
        strip = lambda rows: [{k: v for k, v in r.items() if k not in ("dump", "csv")} for r in rows]  # noqa: E731
        assert strip(remote) == strip(local)
        assert len(stream.data) > 0, f"{command}: the cluster ran no task after {before}"
        if command.startswith("vcs"):
            by_rank = {str(r["rank"]): r for r in remote}
            assert {k: v["first_divergence"] for k, v in by_rank.items()} == truth["first_divergence_step0"]
            assert [r["rank"] for r in remote if r["odd"]] == [truth["odd_rank"]["rank"]]
            others = {len(r["roots"]) for r in remote if not r["odd"]}
            assert len(others) == 1 and len(by_rank[str(truth["odd_rank"]["rank"])]["roots"]) == others.pop() + 1
        else:
            first = truth["overflow"]["first"]
            assert (remote[0]["step"], remote[0]["rank"], remote[0]["op"]) == (first["step"], first["rank"], first["op"])


def test_unreachable_scheduler_is_one_line_and_fast(capsys, sample_ws):
    root, _ = sample_ws
    start = time.perf_counter()
    rc, out, err = run_cli(capsys, root, "--scheduler", "tcp://127.0.0.1:9", "-c", "vc")
    assert rc == 1
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "scheduler tcp://127.0.0.1:9: cannot connect" in lines[0]
    assert time.perf_counter() - start < 15


def test_a_file_a_worker_cannot_read_is_a_per_file_error(capsys, cluster, tmp_path):
    lc, _ = cluster
    write_workspace(tmp_path, SampleOptions(seed=0), multi=(3, 1))
    leaf = next(p for p in (tmp_path / "precision_data/npu/debug_0/dump").rglob("*") if p.is_dir()
                and p.parts[-4] == "1" and any(p.iterdir()))
    victim = next(p for p in sorted(leaf.iterdir()) if ".fc1_MatMul." in p.name)
    victim.write_bytes(b"")   # what a worker sees when the shared filesystem lost the file's data
    rc, rows, err = _json(capsys, tmp_path, "--scheduler", lc.scheduler_address, "-c", "vcs --ranks all")
    assert victim.name in err or str(victim) in err
    assert {r["rank"] for r in rows} == {0, 1, 2}


def test_a_missing_step_and_a_missing_rank_name_themselves(capsys, multi_ws):
    root, _ = multi_ws
    rc, out, err = run_cli(capsys, root, "-c", "vcs --ranks 0,9")
    assert rc == 1 and "no rank 9 in the dump tree" in err
    rc, out, err = run_cli(capsys, root, "-c", "ac --steps 0,5")
    assert rc == 1 and "no step 5 in the dump tree" in err


def test_a_worker_dying_mid_run_costs_nothing_or_is_reported(capsys, tmp_path):
    """A worker is killed while it runs a compare task: Dask re-runs the task elsewhere (the rows
    equal the local run's) or the loss is reported; nothing is silently dropped."""
    import threading

    root = tmp_path / "ws"
    write_workspace(root, SampleOptions(seed=0, scale_mb=4), multi=(4, 1))
    _, local, _ = _json(capsys, root, "-c", "vcs --ranks all")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None) as lc, distributed.Client(lc) as client:
        pids = client.run(os.getpid)
        killed = []

        def kill_a_busy_worker():
            deadline = time.time() + 60
            while time.time() < deadline and not killed:
                busy = [w for w, tasks in client.processing().items() if tasks]
                if busy:
                    os.kill(pids[busy[0]], 9)
                    killed.append(busy[0])
                time.sleep(0.005)

        thread = threading.Thread(target=kill_a_busy_worker, daemon=True)
        thread.start()
        rc, rows, err = _json(capsys, root, "--scheduler", lc.scheduler_address, "-c", "vcs --ranks all")
        thread.join(5)
    assert killed, "no worker was busy: the kill did not happen mid-run"
    strip = lambda rows: [{k: v for k, v in r.items() if k != "csv"} for r in rows]  # noqa: E731
    assert strip(rows) == strip(local) or ("worker lost" in err), err


def test_a_rank_folder_gone_from_the_workers_view_is_reported_per_file(capsys, cluster, tmp_path, monkeypatch):
    """The client listed rank 1, then the shared filesystem lost its folder before the workers
    read it: that rank's files are unreadable rows named in the warnings; other ranks complete."""
    from precision_shell.analysis.compare import executors

    lc, _ = cluster
    manifest = write_workspace(tmp_path, SampleOptions(seed=0), multi=(3, 1))
    leaf = tmp_path / next(e for e in manifest["scale_out"]["sets"] if e["rank"] == 1)["npu_dump_dir"]
    real = executors.executor_for

    class HidesRankOne:
        def __init__(self, inner):
            self.inner, self._max_workers = inner, inner._max_workers

        def submit(self, fn, *args):
            if leaf.exists() and any(str(leaf) in repr(a) for a in args):
                leaf.rename(leaf.with_name("gone"))
            return self.inner.submit(fn, *args)

    monkeypatch.setattr(executors, "executor_for", lambda address: HidesRankOne(real(address)) if address else None)
    rc, rows, err = _json(capsys, tmp_path, "--scheduler", lc.scheduler_address, "-c", "vc --ranks all")
    assert not leaf.exists()
    by_rank = {r["rank"]: r for r in rows}
    assert by_rank[1]["compared"] == 0 and by_rank[0]["compared"] == by_rank[2]["compared"] > 0
    assert "rank 1 step 0: compared 0 of" in err and str(leaf) in err


class _InterruptAfter:
    """A progress bar whose second advance is Ctrl-C (the REPL's bar sees KeyboardInterrupt)."""

    def __init__(self, label, total):
        self.count = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def advance(self, n=1):
        self.count += 1
        if self.count == 2:
            raise KeyboardInterrupt


def test_ctrl_c_cancels_the_cluster_futures_and_keeps_finished_rows(cluster, tmp_path):
    from precision_shell.commands.compare_run import run_vc
    from precision_shell.model.session import Session

    lc, client = cluster
    write_workspace(tmp_path, SampleOptions(seed=0, scale_mb=8))
    session = Session.open(tmp_path)
    session.settings.scheduler = lc.scheduler_address
    full = run_vc(session)
    session.progress = _InterruptAfter
    partial = run_vc(session)
    compared_full, compared_partial = full.count_done()[1], partial.count_done()[1]
    assert partial.cancelled and 0 < compared_partial < compared_full   # a finished task's rows kept
    assert any("interrupted" in p for p in partial.problems)
    # every finished row is the full run's row
    full_rows = {r.tensor: r.metrics.cosine for r in full.iter_done()}
    assert all(full_rows[r.tensor] == r.metrics.cosine or r.metrics.cosine != r.metrics.cosine
               for r in partial.iter_done())
    # nothing of the cancelled run is left on the cluster
    deadline = time.time() + 10
    while any(client.processing().values()) and time.time() < deadline:
        time.sleep(0.05)
    assert not any(client.processing().values())
