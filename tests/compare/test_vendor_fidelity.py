"""``vc`` equals the vendor engine cell by cell on the bf16 AMP sample (tests/data/vendor_fidelity).

The committed CSV is msaccucmp's own result on ``python -m precision_shell.samples WS --variant
bf16-amp`` (see the README there); the workspace is regenerated here (the generator is seeded and
byte-for-byte deterministic) and compared with ``bench/vendor_fidelity.py``'s cell diff: numbers
to 1e-6 (NaN equals NaN), text exactly, every column but Index and the NPU Address.
"""

from __future__ import annotations

import csv
import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from precision_shell.cli import main
from precision_shell.samples import kernels as K
from precision_shell.samples.network import NetBuilder, NetworkRun
from precision_shell.samples.writer import SampleOptions, write_workspace

ROOT = Path(__file__).resolve().parents[2]
VENDOR_CSV = Path(__file__).parents[1] / "data" / "vendor_fidelity" / "bf16_amp_result.csv"


def _bench_module():
    spec = importlib.util.spec_from_file_location("vendor_fidelity", ROOT / "bench" / "vendor_fidelity.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module   # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    fid = _bench_module()
    ws = tmp_path_factory.mktemp("bf16_amp")
    write_workspace(ws, SampleOptions(seed=0, variant="bf16-amp"))
    out = tmp_path_factory.mktemp("bf16_amp_out")
    assert main([str(ws), "-c", "vc", "--format", "json", "-o", str(out)]) == 0
    (csv_path,) = (out / "compare").glob("result_*.csv")   # the one CSV this vc wrote
    return fid, fid.Table.read(VENDOR_CSV), fid.Table.read(csv_path)


def test_every_cell_equals_the_vendor_csv(tables):
    fid, vendor, pshell = tables
    diff = fid.diff_tables(vendor, pshell)
    assert diff.unexpected() == []
    assert diff.only_pshell == [] and fid.expected_only_vendor(vendor, diff.only_vendor) == []
    # the vendor-only rows are the graph ops without a dump: pshell leaves them out on purpose
    assert {vendor.rows[k]["OpType"] for k in diff.only_vendor} == {"Data", "Const", "NetOutput"}
    assert diff.compared_rows == len(pshell.rows) == 35
    assert pshell.header == vendor.header and diff.compared_cells == 35 * len(vendor.header)
    # Index is numbered differently (see the README) but the op order is the vendor's
    keys = list(pshell.rows)
    assert [int(pshell.rows[k]["Index"]) for k in keys] == sorted(int(pshell.rows[k]["Index"]) for k in keys)
    assert [int(vendor.rows[k]["Index"]) for k in keys] == sorted(int(vendor.rows[k]["Index"]) for k in keys)


def test_cast_and_transdata_rows_are_compared_like_the_vendor(tables):
    fid, vendor, pshell = tables
    outputs = [k for k, row in vendor.rows.items()
               if row["OpType"] in ("Cast", "TransData") and ":output:" in k]
    # GE-inserted TransData (one at the graph input), named and unnamed AMP casts, both ways
    assert len(outputs) == 8
    for key in outputs:
        v, p = vendor.rows[key], pshell.rows[key]
        assert not math.isnan(float(v["CosineSimilarity"])) and v["CompareFailReason"] == "", key
        assert all(fid.cells_equal(v[c], p[c]) for c in vendor.header if c in pshell.header
                   and c.rsplit(".", 1)[-1] not in fid.KNOWN_DIFFERENT), key
        unnamed = key.startswith("trans_")
        assert (p["GroundTruth"] == "*") == unnamed == (v["GroundTruth"] == "*"), key
    # an AMP fp32 -> bf16 cast is compared with its producer's fp32 golden: its rounding shows
    amp = pshell.rows["input/Data-0-CastToBf16-AutoMixedPrecision:output:0"]
    assert amp["GroundTruth"] == "input/Data-0-CastToBf16-AutoMixedPrecision"
    assert 0 < float(amp["MaxAbsoluteError"]) < 0.05 and float(amp["CosineSimilarity"]) > 0.9999


def test_diff_notices_a_changed_cell(tables):
    """The comparison itself can fail: one metric moved by 2e-6, one reason changed."""
    fid, vendor, pshell = tables
    key = "trans_TransData_2:output:0"
    row = dict(pshell.rows[key])
    row["MaxAbsoluteError"] = "%.6f" % (float(row["MaxAbsoluteError"]) + 2e-6)
    row["GroundTruth"] = "scale/Mul"
    changed = fid.Table(pshell.header, {**pshell.rows, key: row})
    assert sorted(c[1] for c in fid.diff_tables(vendor, changed).unexpected()) == ["GroundTruth", "MaxAbsoluteError"]


def test_two_all_zero_tensors_print_the_vendors_literal_cosine(tmp_path):
    """formats.md A.8.4 (checked with msaccucmp on this graph): a Relu of negative numbers gives
    zeros on both sides and the cosine cell is "1.0"; its non-zero input, equal to its golden,
    prints "1.000000"."""
    b = NetBuilder()
    x = -np.abs(np.random.default_rng(5).standard_normal((4, 16))).astype(K.F32)
    b.fw("x", "Placeholder", [], x)
    b.data("x", x, "ND")
    b.fw("relu", "Relu", ["x:0"], K.g_relu(x))
    b.npu("relu", "Relu", ["x:0"], [b.tensor(K.f16(np.maximum(x, 0)), "ND", "ND", "relu:0")],
          original_ops=["relu"])
    b.npu("Node_Output", "NetOutput", ["relu:0"], [], executed=False, engine="DNN_VM_GE_LOCAL_OP_STORE")
    write_workspace(tmp_path / "ws", run=NetworkRun(0, b.framework, b.finish(), ["relu:0"], None, None))
    assert main([str(tmp_path / "ws"), "-c", "vc", "--format", "json", "-o", str(tmp_path / "out")]) == 0
    (path,) = (tmp_path / "out" / "compare").glob("result_*.csv")
    with path.open(newline="") as f:
        cosine = {row["TensorIndex"]: row["CosineSimilarity"] for row in csv.DictReader(f)}
    assert cosine == {"relu:input:0": "1.000000", "relu:output:0": "1.0"}
