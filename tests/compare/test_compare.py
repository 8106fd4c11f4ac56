"""Whole-network compare (``vc``): mapping NPU tensors to goldens, the engine on different
executors, interruption, the vendor-layout CSV, NPU-vs-NPU mode. Truth comes from the sample
generator's manifest (what it wrote, and the cosines it measured itself)."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from precision_shell.analysis.compare import engine
from precision_shell.analysis.compare.engine import run_compare
from precision_shell.analysis.compare.mapping import plan_golden_compare
from precision_shell.analysis.compare.worker import PairJob, TensorSource, compare_job
from precision_shell.analysis.compare.metrics import METRIC_COLUMNS, compute_metrics
from precision_shell.cli import main
from precision_shell.formats.compare_csv import read_compare_csv
from precision_shell.formats.dump_file import read_dump_header, read_logical_array
from precision_shell.model.session import Session
from precision_shell.samples.writer import SampleOptions, write_workspace
from tests.conftest import InterruptAfter


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    root = tmp_path_factory.mktemp("cmp_ws")
    manifest = write_workspace(root, SampleOptions(seed=0))
    return root, manifest


@pytest.fixture(scope="module")
def session(sample):
    return Session.open(sample[0])


def executed(manifest):
    return [op for op in manifest["ops"] if op.get("order") is not None]


def _plan(session):
    return plan_golden_compare(session.graph, session.dumps, session.golden)


def _by_tensor(plan):
    return {job.tensor: job for job in plan.jobs}


def _run_cli(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


# ------------------------------------------------------------------------------------------------
# mapping (formats.md A.8.5)

def test_every_output_maps_to_the_generators_golden_tensor(session, sample):
    jobs = _by_tensor(_plan(session))
    checked = 0
    for op in executed(sample[1]):
        for i, out in enumerate(op["outputs"]):
            job = jobs[f"{op['name']}:output:{i}"]
            assert job.golden_ref == out["golden"], job.tensor
            checked += out["golden"] is not None
    # fused ops (conv1 = Conv2D+BiasAdd+Relu, LayerNorm with 3 outputs) are among them
    assert jobs["conv1/Conv2D:output:0"].golden_ref == "conv1/Relu:0"
    assert checked >= 15


def test_inputs_map_through_cast_and_transdata_to_the_real_producer(session, sample):
    jobs = _by_tensor(_plan(session))
    through_conversions = 0
    for op in executed(sample[1]):
        for j, inp in enumerate(op["inputs"]):
            job = jobs[f"{op['name']}:input:{j}"]
            assert job.golden_ref == inp["golden"], job.tensor
            producer = inp["source"].rsplit(":", 1)[0]
            if session.graph.ops[producer].type in ("Cast", "TransData"):
                through_conversions += 1
                assert job.golden is not None   # the golden file of the op behind the chain
    assert through_conversions >= 5


def test_without_a_graph_outputs_map_by_the_dump_headers(session, sample):
    plan = plan_golden_compare(None, session.dumps, session.golden)
    jobs = _by_tensor(plan)
    for op in executed(sample[1]):
        for i, out in enumerate(op["outputs"]):
            if out["origin"] is not None:   # all a dump header knows is its own origin
                assert jobs[f"{op['name']}:output:{i}"].golden_ref == out["origin"]
        for j in range(len(op["inputs"])):
            job = jobs[f"{op['name']}:input:{j}"]
            assert job.golden is None and "no graph" in job.reason


def test_ge_inserted_op_outputs_meet_the_golden_behind_their_input(session, sample):
    """formats.md A.8.5: a Cast/TransData output i stands for its input i (walked up), and the
    op has no original names (GroundTruth "*")."""
    plan = _plan(session)
    jobs = _by_tensor(plan)
    trans = [op for op in executed(sample[1]) if op["type"] in ("Cast", "TransData")]
    assert {op["type"] for op in trans} == {"Cast", "TransData"}
    for op in trans:
        job = jobs[f"{op['name']}:output:0"]
        assert job.golden_ref == op["inputs"][0]["golden"] == jobs[f"{op['name']}:input:0"].golden_ref
        assert job.golden is not None and job.reason == ""
        assert next(p for p in plan.ops if p.op == op["name"]).golden_ops == []


# ------------------------------------------------------------------------------------------------
# values and executors

def _cells(result):
    return [(r.tensor, r.golden_ref, r.compared, r.shape, tuple(r.metrics.vendor_cells()),
             json.dumps(r.metrics.as_json()), r.reason) for r in result.rows]


def test_cosines_agree_with_the_generators_own_measurement(session, sample):
    result = run_compare(_plan(session), workers=1)
    rows = {r.tensor: r for r in result.rows}
    checked = 0
    for op in executed(sample[1]):
        for i, out in enumerate(op["outputs"]):
            if out["cosine"] is None:
                continue
            row = rows[f"{op['name']}:output:{i}"]
            assert row.compared
            assert abs(row.metrics.cosine - out["cosine"]) <= 1.5e-6, row.tensor
            checked += 1
    assert checked >= 10


def test_pair_values_equal_metrics_of_independently_decoded_arrays(session, sample):
    result = run_compare(_plan(session), workers=1)
    row = next(r for r in result.rows if r.tensor == f"{sample[1]['lossy']['op']}:output:0")
    dump = session.op_dump(row.op)
    header = read_dump_header(dump.path)
    npu = read_logical_array(header, header.outputs[0])
    golden = np.load(sample[0] / sample[1]["golden_files"][row.golden_ref])
    expect = compute_metrics(npu, golden)
    assert row.metrics.vendor_cells() == expect.vendor_cells()
    assert row.shape == (golden.size,)   # an ND dump: the vendor's Shape is flat (A.8.1)


def test_one_worker_two_processes_and_threads_give_identical_rows(session):
    plan = _plan(session)
    inline = run_compare(plan, workers=1)
    with ProcessPoolExecutor(2) as pool:
        procs = run_compare(plan, workers=2, executor=pool)
    with ThreadPoolExecutor(3) as pool:
        threads = run_compare(plan, workers=3, executor=pool)
    assert _cells(inline) == _cells(procs) == _cells(threads)
    assert not inline.cancelled and not procs.cancelled


def test_cli_j1_and_j2_print_identical_numbers(sample, capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(engine, "INLINE_BELOW_BYTES", 0)   # force the real pool for -j 2
    outs = []
    for j in (1, 2):
        rc, out, err = _run_cli(capsys, sample[0], "-o", tmp_path / f"j{j}", "-c",
                                f"vc -j {j}; export compare -o {tmp_path}/c{j}.json --format json",
                                "--format", "json")
        assert rc == 0, err
        summary = json.loads(out.splitlines()[0])
        assert summary["workers"] == j
        outs.append(json.loads((tmp_path / f"c{j}.json").read_text()))
    assert outs[0] == outs[1]
    assert len(outs[0]) == len(_plan(Session.open(sample[0])).jobs)


def test_inputs_repeating_their_producers_bytes_reuse_its_metrics_exactly(session):
    plan = _plan(session)
    aliased = [j for j in plan.jobs if j.alias is not None]
    assert len(aliased) >= 3 and all(j.io == "input" for j in aliased)
    plain = dataclasses.replace(plan, table=plan.table.without_aliases())
    assert not any(j.alias for j in plain.jobs)
    assert _cells(run_compare(plan, workers=1)) == _cells(run_compare(plain, workers=1))


def test_an_input_that_differs_from_its_producer_is_computed(sample, tmp_path):
    root = tmp_path / "ws"
    shutil.copytree(sample[0] / "precision_data", root / "precision_data")
    s = Session.open(root)
    job = next(j for j in _plan(s).jobs if j.alias is not None)
    header = read_dump_header(job.npu.path)
    entry = header.inputs[job.index]
    data = bytearray(Path(job.npu.path).read_bytes())
    values = np.frombuffer(bytes(data[entry.offset:entry.offset + entry.size]), np.float16).copy()
    values[::3] *= np.float16(1.5)    # this op read something else than its producer wrote
    data[entry.offset:entry.offset + entry.size] = values.tobytes()
    Path(job.npu.path).write_bytes(bytes(data))
    rows = run_compare(_plan(s), workers=1).rows
    mine, producer = rows[job.row], rows[job.alias[0]]
    assert mine.metrics.vendor_cells() != producer.metrics.vendor_cells()
    golden = np.load(job.golden.path)
    npu = read_logical_array(header, header.inputs[job.index])
    assert mine.metrics.vendor_cells() == compute_metrics(npu, golden).vendor_cells()


def test_a_bad_pair_becomes_a_reason_row_not_a_crash(tmp_path, session):
    npu_file = tmp_path / "a.npy"
    np.save(npu_file, np.ones((2, 3), np.float32))
    wrong = tmp_path / "b.npy"
    np.save(wrong, np.ones((7,), np.float32))
    res = compare_job(PairJob(0, "x", "output", 0, TensorSource(str(npu_file), "npy"),
                              TensorSource(str(wrong), "npy")))
    assert not res.compared and "does not match the ground truth shape" in res.reason
    assert all(c == "NaN" for c in res.metrics.vendor_cells())
    broken = tmp_path / "Add.broken.1.2.1700000000000000"
    broken.write_bytes(b"\x05\x00\x00\x00\x00\x00\x00\x00abc")
    res = compare_job(PairJob(1, "x", "output", 0, TensorSource(str(broken), "dump"),
                              TensorSource(str(npu_file), "npy")))
    assert not res.compared and str(broken) in res.reason


# ------------------------------------------------------------------------------------------------
# Ctrl-C



def test_interrupt_keeps_partial_results_in_process(session):
    plan = _plan(session)
    runnable = sum(j.npu is not None and j.golden is not None for j in plan.jobs)
    no_pair = len(plan.jobs) - runnable
    stop = no_pair + 7
    result = run_compare(plan, workers=1, progress=InterruptAfter(stop))
    assert result.cancelled
    done = [r for r in result.rows if r is not None]
    assert len(done) == stop
    assert sum(r.compared for r in done) == 7
    assert any("interrupted" in p for p in result.problems)
    full = {r.tensor: r for r in run_compare(plan, workers=1).rows}
    for r in done:   # what was kept is exact, not half-computed
        assert r.metrics.vendor_cells() == full[r.tensor].metrics.vendor_cells()


def test_interrupt_with_a_pool_cancels_the_rest(session, monkeypatch):
    monkeypatch.setattr(engine, "_MIN_BATCH_BYTES", 1)   # many small batches
    monkeypatch.setattr(engine, "_MAX_BATCH_JOBS", 2)
    plan = _plan(session)
    no_pair = sum(j.npu is None or j.golden is None for j in plan.jobs)
    with ThreadPoolExecutor(1) as pool:
        result = run_compare(plan, workers=1, executor=pool, progress=InterruptAfter(no_pair + 1))
    assert result.cancelled
    done = sum(r is not None for r in result.rows)
    assert no_pair < done < len(plan.jobs)


# ------------------------------------------------------------------------------------------------
# the CSV (formats.md §6, A.8.1)

VENDOR_HEADER = ["Index", "OpType", "NPUDump", "DataType", "Address", "GroundTruth", "DataType",
                 "TensorIndex", "Shape", *METRIC_COLUMNS, "CompareFailReason"]


def test_vc_writes_the_vendor_layout_csv(sample, capsys, tmp_path):
    rc, out, err = _run_cli(capsys, sample[0], "-o", tmp_path, "-c", "vc", "--format", "json")
    assert rc == 0, err
    summary = json.loads(out)
    path = Path(summary["csv"])
    assert path.parent == tmp_path / "compare" and path.name.startswith("result_")
    assert path.read_text().splitlines()[0].split(",") == VENDOR_HEADER
    rows = read_compare_csv(path)
    s = Session.open(sample[0])
    plan = _plan(s)
    result = {r.tensor: r for r in run_compare(plan, workers=1).rows}
    assert [r.tensor for r in rows] == [j.tensor for j in plan.jobs]
    assert [r.index for r in rows] == sorted(r.index for r in rows)   # sorted by op (Index)
    orders = {op.op: op.order for op in plan.ops}
    for row in rows:
        ours = result[row.tensor]
        assert row.index == orders[row.npu_op]
        assert row.golden_ops == ours.golden_ops
        if ours.compared:
            assert "%.6f" % row.metrics["CosineSimilarity"] == ours.metrics.vendor_cells()[0] or \
                math.isnan(ours.metrics.cosine)
            assert row.shape == ours.shape
        else:
            assert all(v is None or math.isnan(v) for v in row.metrics.values())
            assert row.fail_reason == ours.reason
    # an op's inputs come before its outputs
    for op in plan.ops:
        kinds = [r.kind for r in rows if r.npu_op == op.op]
        assert kinds == sorted(kinds, key=lambda k: k != "input")


# ------------------------------------------------------------------------------------------------
# NPU run vs NPU run

@pytest.fixture
def two_runs(sample, tmp_path):
    root = tmp_path / "ws"
    shutil.copytree(sample[0] / "precision_data", root / "precision_data")
    npu = root / "precision_data" / "npu"
    shutil.copytree(npu / "debug_0" / "dump", npu / "debug_1" / "dump")
    return root


def test_against_identical_run_is_exact_and_finds_nothing(two_runs, capsys, tmp_path):
    rc, out, err = _run_cli(capsys, two_runs, "-o", tmp_path / "o", "-c",
                            "vc --against debug_1; vcs -c 0.999999", "--format", "json",
                            "--fail-on-findings")
    summary, suspects = (json.loads(line) for line in out.splitlines())
    assert rc == 0, err
    assert summary["mode"] == "npu" and summary["compared"] == summary["tensors"] > 0
    # the overflow branch holds inf/nan on both sides: NaN metrics, but bit-identical, no finding
    assert suspects == []
    rows = read_compare_csv(summary["csv"])
    header = Path(summary["csv"]).read_text().splitlines()[0].split(",")
    assert header[:9] == ["Index", "OpType", "NPUDump", "DataType", "Address", "GroundTruth",
                          "DataType", "Address", "TensorIndex"]
    finite = [r for r in rows if r.metrics["MaxAbsoluteError"] == r.metrics["MaxAbsoluteError"]]
    assert finite and all(r.metrics["MaxAbsoluteError"] == 0.0 for r in finite)


def test_against_a_changed_run_names_the_changed_op(two_runs, sample, capsys, tmp_path):
    lossy = sample[1]["lossy"]["op"]
    dump_dir = two_runs / "precision_data" / "npu" / "debug_1" / "dump"
    target = next(p for p in dump_dir.rglob("*") if p.is_file() and ".ln1_add_1_LayerNorm." in p.name)
    header = read_dump_header(target)
    out0 = header.outputs[0]
    data = bytearray(target.read_bytes())
    values = np.frombuffer(bytes(data[out0.offset:out0.offset + out0.size]), np.float16).copy()
    values[::2] = -values[::2]   # a different kernel result on the other run
    data[out0.offset:out0.offset + out0.size] = values.tobytes()
    target.write_bytes(bytes(data))
    rc, out, err = _run_cli(capsys, two_runs, "-o", tmp_path / "o", "-c",
                            "vc --against debug_1; vcs -c 0.99", "--format", "json")
    suspects = json.loads(out.splitlines()[1])
    first = next(s for s in suspects if s["first"])
    assert first["op"] == lossy and first["role"] == "root"
    assert first["tensor"] == f"{lossy}:output:0"


def test_against_unknown_run_is_a_clear_error(sample, capsys, tmp_path):
    rc, out, err = _run_cli(capsys, sample[0], "-o", tmp_path, "-c", "vc --against debug_9")
    assert rc == 1 and "no run 'debug_9'" in err and "debug_0" in err


def test_npu_and_golden_folders_can_be_given(sample, capsys, tmp_path):
    root, manifest = sample
    npu_dir = root / manifest["paths"]["npu_dump_dir"]
    golden_dir = root / manifest["paths"]["golden_dir"]
    rc, out, err = _run_cli(capsys, root, "-o", tmp_path, "-c",
                            f"vc --npu {npu_dir} --golden {golden_dir}; vc", "--format", "json")
    assert rc == 0, err
    given, default = (json.loads(line) for line in out.splitlines())
    assert given["compared"] == default["compared"] > 0
    rc, out, err = _run_cli(capsys, root, "-o", tmp_path, "-c", f"vc --golden {tmp_path}/nope")
    assert rc == 1 and "golden folder does not exist" in err
    rc, out, err = _run_cli(capsys, root, "-o", tmp_path, "-c", "vc -j 0")
    assert rc == 2
