"""``compare_tensors``/``cp``: metrics, allclose, error ratio and worst elements of one pair, checked
against numpy on independently decoded arrays; shape mismatches are clear errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from precision_shell.analysis.compare.metrics import compute_metrics
from precision_shell.cli import main
from precision_shell.formats.dump_file import read_dump_header, read_logical_array
from precision_shell.samples.writer import SampleOptions, write_workspace


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    root = tmp_path_factory.mktemp("cp_ws")
    return root, write_workspace(root, SampleOptions(seed=0))


def run(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def _arrays(sample):
    root, manifest = sample
    lossy = next(op for op in manifest["ops"] if op["name"] == manifest["lossy"]["op"])
    header = read_dump_header(root / lossy["dump_file"])
    npu = read_logical_array(header, header.outputs[0])
    golden_ref = lossy["outputs"][0]["golden"]
    golden = np.load(root / manifest["golden_files"][golden_ref])
    return lossy["name"], golden_ref, npu, golden


def test_cp_reports_metrics_allclose_ratio_and_worst_elements(sample, capsys, tmp_path):
    op, golden_ref, npu, golden = _arrays(sample)
    rc, out, err = run(capsys, sample[0], "-o", tmp_path, "-c",
                       f"cp {op}:output:0 golden:{golden_ref} -p 4 -al 0.01 -rl 0.02", "--format", "json")
    assert rc == 0, err
    data = json.loads(out)
    expect = compute_metrics(npu, golden)
    assert data["cosine"] == pytest.approx(expect.cosine, abs=1e-12)
    assert data["max_abs_error"] == pytest.approx(expect.max_abs_error, abs=1e-12)
    x, y = npu.astype(np.float64), golden.astype(np.float64)
    bad = np.abs(x - y) > 0.01 + 0.02 * np.abs(y)
    assert data["error_ratio"] == pytest.approx(bad.mean())
    assert data["allclose"] is bool(np.allclose(x, y, atol=0.01, rtol=0.02)) is False
    diff = np.abs(x - y)
    worst = np.argsort(-diff, axis=None, kind="stable")[:4]
    assert [tuple(w["index"]) for w in data["worst"]] == [np.unravel_index(i, x.shape) for i in worst]
    for w in data["worst"]:
        idx = tuple(w["index"])
        assert w["a"] == pytest.approx(x[idx]) and w["b"] == pytest.approx(y[idx])


def test_cp_with_slices_compares_the_slices(sample, capsys, tmp_path):
    op, golden_ref, npu, golden = _arrays(sample)
    rc, out, err = run(capsys, sample[0], "-o", tmp_path, "-c",
                       f"cp {op}:output:0[1, :8] golden:{golden_ref}[1, :8]", "--format", "json")
    assert rc == 0, err
    data = json.loads(out)
    assert data["shape"] == [8]
    assert data["cosine"] == pytest.approx(compute_metrics(npu[1, :8], golden[1, :8]).cosine, abs=1e-12)


def test_cp_shape_mismatch_is_a_clear_error(sample, capsys, tmp_path):
    op, golden_ref, npu, golden = _arrays(sample)
    rc, out, err = run(capsys, sample[0], "-o", tmp_path, "-c",
                       f"cp {op}:output:0 golden:{golden_ref}[:, :5]")
    assert rc == 1 and out == ""
    assert f"shape {tuple(npu.shape)}" in err and f"shape {tuple(golden[:, :5].shape)}" in err
    assert "shapes must agree" in err and "Traceback" not in err


def test_cp_text_output_and_bad_flags(sample, capsys, tmp_path):
    op, golden_ref, _, _ = _arrays(sample)
    rc, out, _ = run(capsys, sample[0], "-o", tmp_path, "-c", f"cp {op}:output:0 golden:{golden_ref}")
    assert rc == 0 and "CosineSimilarity" in out and "allclose" in out and "worst 5 elements" in out
    rc, _, err = run(capsys, sample[0], "-o", tmp_path, "-c", f"cp {op}:output:0 golden:{golden_ref} -p -1")
    assert rc == 2
