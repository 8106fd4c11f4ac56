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
