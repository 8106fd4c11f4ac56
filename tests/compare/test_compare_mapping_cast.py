"""Golden mapping of Cast/TransData ops (formats.md A.8.5) on small hand-made graphs.

Each graph is built with the sample generator's ``NetBuilder`` (real arrays, real dump files,
real GE graph text) and written by its writer; the expected golden of every tensor follows from
the rule: output i of a Cast/TransData stands for its input i, walked up through further
Cast/TransData ops to the real producer, whatever the op's own origin name; GroundTruth is the
op's original names, ``*`` when it has none.
"""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from precision_shell.analysis.compare.engine import run_compare
from precision_shell.analysis.compare.mapping import plan_golden_compare
from precision_shell.analysis.compare.metrics import compute_metrics
from precision_shell.cli import main
from precision_shell.model.session import Session
from precision_shell.samples import kernels as K
from precision_shell.samples.network import NetBuilder, NetworkRun
from precision_shell.samples.records import NpuTensor
from precision_shell.samples.writer import SampleOptions, write_workspace

AMP = "mul-0-CastToFp16-AutoMixedPrecision"


def _start(b: NetBuilder, shape=(4, 16), fmt="ND") -> np.ndarray:
    """Data ``x`` and an fp16 ``mul`` (x * 3) whose fp32 golden is ``mul:0``."""
    x = np.random.default_rng(7).standard_normal(shape).astype(K.F32)
    b.fw("x", "Placeholder", [], x)
    b.data("x", x, fmt)
    b.fw("mul", "Mul", ["x:0"], K.g_mul(x, 3.0))
    b.npu("mul", "Mul", ["x:0"], [b.tensor(K.f16(x.astype(np.float64) * 3), fmt, fmt, "mul:0")],
          original_ops=["mul"])
    return x


def _relu(b: NetBuilder, source: str, fmt: str = "ND", origin: str = "ND") -> str:
    value = b.input(source).tensor.npu
    golden = b.golden(b.input(source).golden_ref)
    b.fw("relu", "Relu", [], K.g_relu(golden if golden is not None else value))
    b.npu("relu", "Relu", [source], [b.tensor(np.maximum(value, 0), fmt, origin, "relu:0")],
          original_ops=["relu"])
    return "relu:0"


def _write(tmp_path, b: NetBuilder, outputs: list[str]):
    b.npu("Node_Output", "NetOutput", outputs, [], executed=False, engine="DNN_VM_GE_LOCAL_OP_STORE")
    run = NetworkRun(0, b.framework, b.finish(), outputs, None, None)
    manifest = write_workspace(tmp_path, SampleOptions(), run=run)
    session = Session.open(tmp_path)
    plan = plan_golden_compare(session.graph, session.dumps, session.golden)
    return manifest, plan, {job.tensor: job for job in plan.jobs}, run


def _golden_ops(plan, op: str) -> list[str]:
    return next(p for p in plan.ops if p.op == op).golden_ops


def _rows(plan) -> dict:
    return {r.tensor: r for r in run_compare(plan, workers=1).rows}


def test_transdata_chain_outputs_meet_the_producer_golden(tmp_path):
    b = NetBuilder()
    _start(b)
    nd = b.trans("TransData", b.trans("TransData", "mul:0", fmt="FRACTAL_NZ"), fmt="ND")
    manifest, plan, jobs, run = _write(tmp_path, b, [_relu(b, nd)])
    for tensor in ("trans_TransData_0:input:0", "trans_TransData_0:output:0", "trans_TransData_1:input:0",
                   "trans_TransData_1:output:0", "relu:input:0", "mul:output:0"):
        assert jobs[tensor].golden_ref == "mul:0" and jobs[tensor].golden is not None, tensor
    rows = _rows(plan)
    # a layout change is lossless: every row of the chain has mul's own numbers
    want = rows["mul:output:0"].metrics.vendor_cells()
    for tensor in ("trans_TransData_0:output:0", "trans_TransData_1:output:0", "relu:input:0"):
        assert rows[tensor].compared and rows[tensor].metrics.vendor_cells() == want, tensor
    assert rows["trans_TransData_0:output:0"].shape == (4, 16)      # restored from FRACTAL_NZ
    assert _golden_ops(plan, "trans_TransData_0") == [] == _golden_ops(plan, "trans_TransData_1")
    # the generator's truth agrees
    entry = next(op for op in manifest["ops"] if op["name"] == "trans_TransData_1")
    assert entry["outputs"][0]["golden"] == "mul:0" and entry["outputs"][0]["origin"] is None


def test_cast_of_cast_is_compared_with_the_first_producer_golden(tmp_path):
    b = NetBuilder()
    _start(b)
    bf = b.trans("Cast", b.trans("Cast", "mul:0", dtype=K.F32), dtype=K.BF16)
    manifest, plan, jobs, run = _write(tmp_path, b, [_relu(b, bf)])
    assert [jobs[f"trans_Cast_{i}:output:0"].golden_ref for i in (0, 1)] == ["mul:0", "mul:0"]
    rows = _rows(plan)
    golden = run.golden("mul:0")
    bf16_out = run.op("trans_Cast_1").outputs[0].npu
    # the second cast's own rounding (fp32 -> bf16) is its error against mul's fp32 golden
    want = compute_metrics(bf16_out.astype(np.float32), golden)
    got = rows["trans_Cast_1:output:0"]
    assert got.compared and got.npu_dtype == "float32" and got.golden_dtype == "float32"
    assert got.metrics.vendor_cells() == want.vendor_cells()
    assert got.metrics.max_abs_error > rows["trans_Cast_0:output:0"].metrics.max_abs_error


def test_cast_with_original_names_ignores_its_own_golden(tmp_path):
    b = NetBuilder()
    _start(b)
    # a golden file under the cast's own name exists, with other values: it must not be used
    b.fw(AMP, "Cast", ["mul:0"], np.zeros((4, 16), K.F32))
    cast = b.trans("Cast", "mul:0", dtype=K.F16, amp_name=AMP)
    manifest, plan, jobs, run = _write(tmp_path, b, [_relu(b, cast)])
    assert manifest["golden_files"].get(f"{AMP}:0")
    entry = next(op for op in manifest["ops"] if op["name"] == AMP)
    assert entry["outputs"][0]["origin"] == f"{AMP}:0" and entry["outputs"][0]["golden"] == "mul:0"
    assert jobs[f"{AMP}:output:0"].golden_ref == "mul:0" == jobs["relu:input:0"].golden_ref
    assert _golden_ops(plan, AMP) == [AMP]
    assert _rows(plan)[f"{AMP}:output:0"].metrics.cosine > 0.9999


def test_cast_without_an_input_has_no_golden_and_says_why(tmp_path):
    b = NetBuilder()
    _start(b)
    value = np.ones((4, 16), K.F16)
    b.npu("orphan", "Cast", [], [NpuTensor(value, "ND", "ND")], original_ops=[], attrs={"dst_type": 1})
    manifest, plan, jobs, run = _write(tmp_path, b, [_relu(b, "orphan:0"), "mul:0"])
    out, used = jobs["orphan:output:0"], jobs["relu:input:0"]
    assert out.golden is None and out.reason == "no golden for orphan:output:0 (orphan:input:0 has no producer in the graph)"
    assert used.golden is None and used.reason == "no golden for relu:input:0 (orphan:input:0 has no producer in the graph)"
    assert jobs["relu:output:0"].golden is not None   # the rest is compared


def test_transdata_at_the_graph_input_meets_the_data_golden(tmp_path):
    b = NetBuilder()
    x = np.random.default_rng(3).standard_normal((2, 3, 4, 4)).astype(K.F32)
    b.fw("x", "Placeholder", [], x)
    b.data("x", x, "NCHW")
    x5 = b.trans("TransData", "x:0", fmt="NC1HWC0")
    manifest, plan, jobs, run = _write(tmp_path, b, [_relu(b, x5, "NC1HWC0", "NCHW")])
    assert jobs["trans_TransData_0:input:0"].golden_ref == "x:0" == jobs["trans_TransData_0:output:0"].golden_ref
    rows = _rows(plan)
    row = rows["trans_TransData_0:output:0"]
    assert row.shape == (2, 3, 4, 4) and row.metrics.max_abs_error == 0
    assert row.metrics.cosine == pytest.approx(1, abs=1e-7)
    assert row.metrics.vendor_cells() == rows["trans_TransData_0:input:0"].metrics.vendor_cells()


def test_vc_csv_writes_star_for_ops_without_original_names(tmp_path, capsys):
    b = NetBuilder()
    _start(b)
    cast = b.trans("Cast", b.trans("Cast", "mul:0", dtype=K.F32, amp_name=AMP), dtype=K.F16)
    _write(tmp_path / "ws", b, [_relu(b, cast)])
    rc = main([str(tmp_path / "ws"), "-c", "vc", "--format", "json", "-o", str(tmp_path / "out")])
    out, err = capsys.readouterr()
    assert rc == 0, err
    with open(json.loads(out)["csv"], newline="") as f:
        table = list(csv.DictReader(f))
    truth = {(r["TensorIndex"]): (r["GroundTruth"], r["CosineSimilarity"]) for r in table}
    assert truth["trans_Cast_0:output:0"][0] == "*" and truth[f"{AMP}:output:0"][0] == AMP
    assert truth["relu:output:0"][0] == "relu" and truth["mul:output:0"][0] == "mul"
    for tensor in ("trans_Cast_0:output:0", f"{AMP}:output:0"):
        assert float(truth[tensor][1]) == pytest.approx(1.0, abs=1e-4), tensor
