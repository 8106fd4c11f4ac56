"""The ``bf16-amp`` sample variant: real bf16 arrays in real dumps, conversions the vendor walks
through (GE-inserted TransData, named and unnamed AMP casts), and the truth in the manifest."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from precision_shell.formats.dump_file import read_dump_header, read_logical_array
from precision_shell.samples.__main__ import main
from precision_shell.samples.amp_network import AMP_TO_BF16, AMP_TO_FP32, run_bf16_amp
from precision_shell.samples.kernels import cosine
from precision_shell.samples.writer import SampleOptions, write_workspace


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    root = tmp_path_factory.mktemp("bf16")
    return root, write_workspace(root, SampleOptions(variant="bf16-amp"))


def _hashes(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_generation_is_seeded_and_deterministic(ws, tmp_path):
    write_workspace(tmp_path / "again", SampleOptions(variant="bf16-amp"))
    write_workspace(tmp_path / "seed1", SampleOptions(seed=1, variant="bf16-amp"))
    assert _hashes(tmp_path / "again") == _hashes(ws[0])
    # another seed: other values in every NPU dump (and other times, hence file names)
    dumps = lambda root: {h for name, h in _hashes(root).items() if "/npu/debug_0/dump/" in name}  # noqa: E731
    assert len(dumps(tmp_path / "seed1")) == len(ws[1]["ops"]) == len(dumps(ws[0]))
    assert not dumps(tmp_path / "seed1") & dumps(ws[0])


def test_dumps_hold_the_computed_arrays(ws):
    root, m = ws
    run = run_bf16_amp(0)
    bf16_outputs = 0
    for entry in m["ops"]:
        header = read_dump_header(root / entry["dump_file"])
        op = run.op(entry["name"])
        for kind, tensors in (("inputs", [i.tensor for i in op.inputs]), ("outputs", op.outputs)):
            for t, want in zip(getattr(header, kind), tensors):
                got = read_logical_array(header, t)
                assert got.dtype == want.npu.dtype and got.tobytes() == want.npu.tobytes(), entry["name"]
                bf16_outputs += kind == "outputs" and got.dtype == ml_dtypes.bfloat16
    assert bf16_outputs >= 8
    assert not (root / "precision_data" / "overflow").exists() and m["lossy"] is None is m["overflow"]


def test_conversions_and_their_truth(ws):
    root, m = ws
    ops = {e["name"]: e for e in m["ops"]}
    casts = {n: (e["inputs"][0]["dtype"], e["outputs"][0]["dtype"], e["original_ops"])
             for n, e in ops.items() if e["type"] == "Cast"}
    assert casts == {AMP_TO_BF16: ("float32", "bfloat16", [AMP_TO_BF16]),
                     AMP_TO_FP32: ("bfloat16", "float32", [AMP_TO_FP32]),
                     "trans_Cast_4": ("float32", "bfloat16", []), "trans_Cast_5": ("bfloat16", "float32", [])}
    # a GE-inserted TransData right at the graph input, no original names
    first = ops["trans_TransData_0"]
    assert first["inputs"][0]["source"] == "input/Data:0" and first["original_ops"] == []
    truth = {n: (e["outputs"][0]["origin"], e["outputs"][0]["golden"]) for n, e in ops.items()
             if e["type"] in ("Cast", "TransData")}
    assert truth == {"trans_TransData_0": (None, "input/Data:0"), AMP_TO_BF16: (f"{AMP_TO_BF16}:0", "input/Data:0"),
                     "trans_TransData_1": (None, "conv1/Relu:0"), "trans_TransData_2": (None, "scale/Mul:0"),
                     "trans_TransData_3": (None, "fc1/BiasAdd:0"),
                     AMP_TO_FP32: (f"{AMP_TO_FP32}:0", "fc1/BiasAdd:0"),
                     "trans_Cast_4": (None, "probs/Softmax:0"), "trans_Cast_5": (None, "out/Mul:0")}
    # the named casts have no golden of their own (the fp32 run has no casts)
    assert f"{AMP_TO_BF16}:0" not in m["golden_files"] and "input/Data:0" in m["golden_files"]
    # recorded cosines are the arrays' own, and bf16 rounding is all the error there is
    header = read_dump_header(root / ops[AMP_TO_BF16]["dump_file"])
    npu = read_logical_array(header, header.outputs[0])
    golden = np.load(root / m["golden_files"]["input/Data:0"])
    assert ops[AMP_TO_BF16]["outputs"][0]["cosine"] == round(cosine(npu, golden), 6)
    assert all(o["cosine"] > 0.999 for e in ops.values() for o in e["outputs"])


def test_variant_has_no_large_mode(tmp_path, capsys):
    assert main([str(tmp_path / "x"), "--variant", "bf16-amp", "--scale", "5"]) == 2
    assert "only extend the convnet variant" in capsys.readouterr().err
    assert main([str(tmp_path / "y"), "--variant", "bf16-amp"]) == 0
    assert json.loads((tmp_path / "y" / "pshell_sample_manifest.json").read_text())["options"]["variant"] == "bf16-amp"
