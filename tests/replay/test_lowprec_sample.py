"""The lowprec sample (issue 27): the MX matmuls replay as `emulated` under their recipe, the
quantized dumps decode to the generator's truth in ND and FRACTAL_NZ, and qstat with the dumped
scales finds that the recipe explains all of the quantized tensors' error."""

from __future__ import annotations

import numpy as np
import pytest

from precision_shell.analysis.quant.recipes import apply_scales
from precision_shell.samples.lowprec_network import quantized_truth
from precision_shell.samples.writer import SampleOptions, write_workspace
from tests.conftest import json_docs, run_cli


@pytest.fixture(scope="module")
def lowprec_ws(tmp_path_factory):
    root = tmp_path_factory.mktemp("lowprec_ws")
    return root, write_workspace(root, SampleOptions(variant="lowprec"))


def test_mx_matmuls_are_emulated_by_their_recipe(lowprec_ws, capsys):
    root, manifest = lowprec_ws
    for op, want in manifest["replay"].items():
        rc, out, err = run_cli(capsys, root, "-c", f"replay {op} --profile mxfp8-e4m3 --profile mxfp4 "
                                                   "--profile fp16-acc", "--format", "json")
        assert rc == 0, err
        doc = json_docs(out)[0]
        assert (doc["verdict"], doc["profile"]) == (want["verdict"], want["profile"])
        by_profile = {c["profile"]: c for c in doc["candidates"]}
        assert by_profile[want["profile"]]["error_vs_npu"] == 0 < by_profile["exact"]["error_vs_npu"]
        rc, out, err = run_cli(capsys, root, "-c", f"replay {op} --profile fp32-acc", "--format", "json")
        assert json_docs(out)[0]["verdict"] != "emulated"   # no accumulator explains a recipe's rounding
        # promote-N over a recipe: partial sums in float32 change nothing the fp32 output shows here
        rc, out, err = run_cli(capsys, root, "-c", f"replay {op} --profile {want['profile']},promote-32",
                               "--format", "json")
        assert json_docs(out)[0]["verdict"] == "emulated"


def test_quantized_dumps_decode_to_the_generator_truth(lowprec_ws, capsys, tmp_path):
    root, manifest = lowprec_ws
    folder = root / "lowprec"
    truth = quantized_truth(manifest["options"]["seed"])
    assert set(manifest["lowprec"]) == set(truth)
    for op, spec in truth.items():
        for kind, tensors in (("in", spec["inputs"]), ("", spec["outputs"])):
            for i, (_, code, fmt, shape, want) in enumerate(tensors):
                rc, out, err = run_cli(capsys, folder, "-o", tmp_path, "-c", f"pt {op}:{kind}{i} -a",
                                       "--format", "json")
                assert rc == 0, (op, kind, i, err)
                got = np.array(json_docs(out)[0]["values"], dtype=np.float64)
                assert got.shape == tuple(shape), (op, i)
                nan = np.isnan(want)
                assert np.array_equal(np.isnan(got), nan)
                assert np.array_equal(got[~nan].astype(np.float32).view(np.uint32),
                                      want[~nan].astype(np.float32).view(np.uint32)), (op, kind, i, fmt)


def test_qstat_with_the_dumped_scales_is_fully_explained(lowprec_ws, capsys, tmp_path):
    root, manifest = lowprec_ws
    folder = root / "lowprec"
    mx = manifest["lowprec"]["quant/mx_mm"]
    for element, scale, golden, recipe, axis in (("in0", "in2", "x1", "mxfp8-e4m3", -1),
                                                 ("in1", "in3", "x2", "mxfp4", 0)):
        rc, out, err = run_cli(capsys, folder, "-o", tmp_path, "-c",
                               f"qstat quant/mx_mm:{element} --recipe {recipe} --axis {axis} "
                               f"--golden {folder / mx['golden_files'][golden]} --scale quant/mx_mm:{scale}",
                               "--format", "json")
        assert rc == 0, err
        e = json_docs(out)[0]["explained"]
        assert e["equal_fraction"] == 1.0 and e["explained"] == pytest.approx(1.0, rel=1e-12)
    rc, out, err = run_cli(capsys, folder, "-o", tmp_path, "-c",
                           f"qstat quant/mx_mm:in1 --recipe mxfp4 --axis 0 --golden "
                           f"{folder / mx['golden_files']['x2']} --scale quant/mx_mm:in2")
    assert rc != 0 and "QuantBatchMatmulV4.quant_mx_mm" in err and "scale shape [16, 2]" in err
    assert len(err.strip().splitlines()) == 1


def test_nan_scale_codes_leave_their_block_out():
    elements = np.arange(8, dtype=np.float64).reshape(2, 4)
    scales = np.array([[2.0, np.nan], [0.5, 1.0]])
    values, nan = apply_scales(elements, scales, 2, -1)
    assert nan == 1
    assert np.array_equal(values[0, :2], [0.0, 2.0]) and np.isnan(values[0, 2:]).all()
    assert np.array_equal(values[1], [2.0, 2.5, 6.0, 7.0])
    with pytest.raises(ValueError, match="scale shape"):
        apply_scales(elements, scales[:, :1], 2, -1)


def _q8_dump(manifest) -> str:
    return next(e["dump_file"] for e in manifest["ops"] if e["name"] == "q8/Cast")


def test_float8_nz_output_in_pt_ni_vc_vcs(lowprec_ws, capsys, tmp_path):
    """issue 22: a DT_FLOAT8_E5M2 output in FRACTAL_NZ was an internal TypeError in all four."""
    import ml_dtypes

    root, _ = lowprec_ws
    rc, out, err = run_cli(capsys, root, "-o", tmp_path, "-c", "pt q8/Cast:0 -a", "--format", "json")
    assert rc == 0, err
    values = np.array(json_docs(out)[0]["values"], np.float32)
    rc, out, err = run_cli(capsys, root, "-o", tmp_path, "-c", "pt golden:q8/Cast:0 -a", "--format", "json")
    x = np.array(json_docs(out)[0]["values"], np.float32)
    assert np.array_equal(values, x.astype(ml_dtypes.float8_e5m2).astype(np.float32))
    outputs = {}
    for command in ("ni q8/Cast", "vc", "vcs"):
        rc, outputs[command], err = run_cli(capsys, root, "-o", tmp_path, "-c", command)
        assert rc == 0 and "Traceback" not in err and "error" not in err, (command, err)
    assert "DT_FLOAT8_E5M2  FRACTAL_NZ  (2, 2, 16, 32)" in outputs["ni q8/Cast"]   # C0 32 for 8-bit
    assert "compared 8 of 8 tensors" in outputs["vc"]   # mx8, mx4: 3 tensors each; q8: 2


def _hif8_encode(x: np.ndarray) -> np.ndarray:
    """Nearest HiFloat8 code by brute force over the paper's table (ties away from zero)."""
    from tests.formats.test_lowbit_formats import _paper_hifloat8

    table = _paper_hifloat8()
    codes = np.array([c for c, v in table.items() if np.isfinite(v)])
    vals = np.array([table[c] for c in codes])
    dist = np.abs(x.reshape(-1)[:, None] - vals[None, :])
    best = dist == dist.min(axis=1, keepdims=True)
    out = [codes[b][np.argmax(np.abs(vals[b]))] for b in best]
    return np.array(out, np.uint8).reshape(x.shape)


def test_vc_and_cp_compare_a_hifloat8_nz_dump_in_float64(lowprec_ws, capsys, tmp_path):
    """The q8/Cast dump rewritten with a HiFloat8 output (FRACTAL_NZ, C0 32): vc's and cp's cosine
    of it against the golden equal numpy's on the values of the paper's table."""
    import csv
    import shutil

    from precision_shell.formats.dump_file import DumpTensor, read_dump_header, write_dump
    from tests.formats.test_lowbit_formats import _expected_table, _nz

    root, manifest = lowprec_ws
    ws = tmp_path / "ws"
    shutil.copytree(root, ws)
    path = ws / _q8_dump(manifest)
    header = read_dump_header(str(path))
    rc, out, err = run_cli(capsys, ws, "-o", tmp_path / "o", "-c", "pt golden:q8/Cast:0 -a", "--format", "json")
    x = np.array(json_docs(out)[0]["values"], np.float64)
    codes = _hif8_encode(x)
    inp = header.inputs[0]
    x_in = np.fromfile(path, np.float32, count=x.size, offset=inp.offset)
    write_dump(path, header.op_name, [DumpTensor(x_in, 1, 2, original_shape=x.shape)],
               [DumpTensor(_nz(codes, 32), 33, 29, original_shape=x.shape, original_name="q8/Cast",
                           original_output_index=0)])
    rc, out, err = run_cli(capsys, ws, "-o", tmp_path / "o", "-c", "vc", "--format", "json")
    assert rc == 0, err
    rows = list(csv.DictReader(open(json_docs(out)[0]["csv"], encoding="utf-8")))
    row = next(r for r in rows if r["TensorIndex"] == "q8/Cast:output:0")
    y = _expected_table("hifloat8")[codes].astype(np.float64)
    cosine = float(np.dot(x.ravel(), y.ravel()) / np.linalg.norm(x) / np.linalg.norm(y))
    assert float(row["CosineSimilarity"]) == pytest.approx(cosine, abs=1e-6)
    assert float(row["MaxAbsoluteError"]) == pytest.approx(float(np.abs(x - y).max()), abs=1e-6)
    rc, out, err = run_cli(capsys, ws, "-o", tmp_path / "o", "-c", "cp q8/Cast:0 golden:q8/Cast:0", "--format", "json")
    assert rc == 0, err
    doc = json_docs(out)[0]
    assert doc["cosine"] == pytest.approx(cosine, rel=1e-7)   # the metrics kernel sums as msaccucmp does
    assert doc["max_abs_error"] == pytest.approx(float(np.abs(x - y).max()), rel=1e-12)


def test_nan_scale_code_is_one_warning_and_the_rest_is_measured(tmp_path, capsys):
    """An E8M0 scale of 0xFF (NaN): its block is left out with one warning naming the file."""
    from precision_shell.formats.dump_file import DumpTensor, write_dump
    from precision_shell.samples.lowprec_network import mx_encode
    from precision_shell.samples.naming import dump_file_name

    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 64)).astype(np.float32)
    codes, scales, deq = mx_encode(x, "e4m3", 1)
    scales = scales.copy()
    scales[1, 0] = 0xFF
    (tmp_path / "ws").mkdir()
    name = dump_file_name("QuantBatchMatmulV4", "mx", 1, 0, 1700000000000001, 5)
    write_dump(tmp_path / "ws" / name, "mx", [DumpTensor(codes, 35, 2), DumpTensor(scales, 36, 2)], [])
    np.save(tmp_path / "x.npy", x)
    rc, out, err = run_cli(capsys, tmp_path / "ws", "-o", tmp_path / "o", "-c",
                           f"qstat mx:in0 --recipe mxfp8-e4m3 --golden {tmp_path / 'x.npy'} --scale mx:in1",
                           "--format", "json")
    assert rc == 0, err
    doc = json_docs(out)[0]
    assert doc["warnings"] == [f"{tmp_path / 'ws' / name}: 1 NaN scale code: those blocks are left out"]
    e = doc["explained"]
    assert e["equal_fraction"] == pytest.approx((x.size - 32) / x.size)   # the NaN block differs
    keep = np.ones(x.shape, bool)
    keep[1, :32] = False
    rel = np.linalg.norm((deq - x)[keep]) / np.linalg.norm(x[keep].astype(np.float64))
    assert e["observed_rel_l2"] == pytest.approx(rel, rel=1e-12)
