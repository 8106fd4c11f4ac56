"""Complex tensors are compared as real and imaginary parts, the same way in `vc` and `cp`; the
numbers are checked against numpy computed here from the definition."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from conftest import json_docs, run_cli
from precision_shell.analysis.compare.metrics import compute_metrics
from precision_shell.analysis.compare.tensor import compare_pair


def _expected(x: np.ndarray, y: np.ndarray) -> dict:
    """The metrics of real NPU values ``x`` against complex golden ``y``, from the definition:
    2n values, the NPU's imaginary parts 0; element-wise differences in float32 as the vendor's."""
    x32 = x.astype(np.float32).reshape(-1)
    re, im = y.real.astype(np.float32).reshape(-1), y.imag.astype(np.float32).reshape(-1)
    diff = np.concatenate([np.abs(x32 - re), np.abs(im)]).astype(np.float64)
    xf, ref, imf = x32.astype(np.float64), re.astype(np.float64), im.astype(np.float64)
    cosine = (xf @ ref) / (np.sqrt(xf @ xf) * np.sqrt(ref @ ref + imf @ imf))
    real_part_only = (xf @ ref) / (np.sqrt(xf @ xf) * np.sqrt(ref @ ref))
    return {"cosine": cosine, "max_abs_error": diff.max(), "mean_abs_error": diff.mean(),
            "rmse": np.sqrt((diff ** 2).mean()), "count": 2 * x.size}, real_part_only


def test_complex_golden_gives_the_same_numbers_in_vc_and_cp(sample_ws, capsys, tmp_path):
    ws, manifest = sample_ws
    root = tmp_path / "ws"
    shutil.copytree(ws / "precision_data", root / "precision_data")
    golden = root / manifest["golden_files"]["act1/LeakyRelu:0"]
    real = np.load(golden)
    complex_golden = (real + 1j * np.random.default_rng(5).standard_normal(real.shape)).astype(np.complex64)
    np.save(golden, complex_golden)

    npu_file, exported = tmp_path / "npu.npy", tmp_path / "rows.json"
    rc, out, err = run_cli(capsys, root, "-o", tmp_path / "o", "-c",
                           f"pt act1/LeakyRelu:output:0 -w {npu_file}; vc; "
                           f"export compare -o {exported} --format json; "
                           "cp act1/LeakyRelu:output:0 golden:act1/LeakyRelu:0", "--format", "json")
    assert rc == 0, err
    expected, real_part_only = _expected(np.load(npu_file), complex_golden)
    assert abs(expected["cosine"] - real_part_only) > 0.01   # the imaginary part counts
    vc_row = next(r for r in json.loads(exported.read_text()) if r["tensor"] == "act1/LeakyRelu:output:0")
    cp = json_docs(out)[-1]
    assert vc_row["compared"] and vc_row["golden_dtype"] == "complex64"
    for key, value in expected.items():
        assert vc_row[key] == pytest.approx(value, rel=1e-6), key
        assert cp[key] == vc_row[key], key


def test_complex_pairs_follow_the_complex_inner_product():
    rng = np.random.default_rng(11)
    a = (rng.standard_normal((4, 6)) + 1j * rng.standard_normal((4, 6))).astype(np.complex64)
    b = (a + 0.05 * (rng.standard_normal((4, 6)) + 1j * rng.standard_normal((4, 6)))).astype(np.complex64)
    b[2, 3] += 3j   # the worst error, in an imaginary part
    m = compute_metrics(a, b)
    a64, b64 = a.astype(np.complex128), b.astype(np.complex128)
    assert m.cosine == pytest.approx(np.vdot(b64, a64).real / (np.linalg.norm(a64) * np.linalg.norm(b64)),
                                     rel=1e-6)
    assert m.count == 2 * a.size
    res = compare_pair(a, b, top=1)
    assert res.worst[0].index == (2, 3, 1)
    assert res.worst[0].abs_err == pytest.approx(abs(float(a[2, 3].imag) - float(b[2, 3].imag)))
