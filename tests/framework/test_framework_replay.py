"""``replay`` on framework dumps (the committed msprobe sample): API entries bound to the one
kernel table from the arguments dump.json recorded; verdicts computed independently here from
the dumped tensors."""

from __future__ import annotations

import json
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

from conftest import json_docs, run_cli
from framework_dumps import sample

from precision_shell.analysis.replay.api_calls import API, NoKernel, TensorArg, bind_call
from precision_shell.analysis.replay.kernels import KERNELS
from precision_shell.model.framework_session import FrameworkSession


def _truth() -> dict:
    return json.loads((sample() / "truth.json").read_text())["precision_loss"]


def _session():
    return FrameworkSession.open(sample() / "target_bf16", golden=sample() / "golden_fp32")


def _replay(capsys, tmp_path, entry, *extra):
    rc, out, err = run_cli(capsys, sample() / "target_bf16", "--golden", sample() / "golden_fp32",
                           "-o", tmp_path / "out", "-c", f"replay {entry} {' '.join(map(str, extra))}",
                           "--format", "json")
    return rc, (json_docs(out)[0] if rc == 0 else None), err


def _cos(a, b):
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def _bf16_ulps(y, ref):
    """|y - ref| in units in the last place of bfloat16 at ref (7 stored mantissa bits)."""
    ref = np.asarray(ref, np.float64)
    ulp = np.exp2(np.floor(np.log2(np.maximum(np.abs(ref), 2.0 ** -126))) - 7)
    return float(np.max(np.abs(np.asarray(y, np.float64) - ref) / ulp))


def test_designed_root_softmax_verdict_from_the_dumped_tensors(capsys, tmp_path):
    truth_root = _truth()["root"]
    assert truth_root == "Functional.softmax.0.forward"      # the sample's designed bf16 softmax
    s = _session()
    run, golden = s.run, s.golden_run()
    x = run.load(f"{truth_root}:input:0").astype(np.float64)
    npu = run.load(f"{truth_root}:output:0")
    g_out = golden.load(f"{truth_root}:output:0")
    e = np.exp(x - x.max(-1, keepdims=True))
    exact = (e / e.sum(-1, keepdims=True)).astype(ml_dtypes.bfloat16)    # dim=-1 as dump.json says
    input_cos = _cos(x, golden.load(f"{truth_root}:input:0"))
    ulps = _bf16_ulps(exact, npu)
    want = "upstream" if input_cos <= 0.98 else ("inherent" if ulps <= 4 else None)

    rc, doc, err = _replay(capsys, tmp_path, truth_root)
    assert rc == 0, err
    assert want == "inherent" and doc["verdict"] == want          # the input is fine, bf16 is not enough
    assert doc["candidates"][0]["error_vs_npu"] == pytest.approx(ulps, abs=0.51)
    npu64, g64 = npu.astype(np.float64), g_out.astype(np.float64)
    assert doc["npu"]["error_vs_golden"] == pytest.approx(np.linalg.norm(npu64 - g64) / np.linalg.norm(g64), rel=1e-6)
    assert doc["npu"]["cosine"] == pytest.approx(_cos(npu64, g64), abs=1e-9)
    assert doc["inputs"][0]["cosine"] == pytest.approx(input_cos, abs=1e-9)


def test_propagated_entry_is_upstream_naming_its_input(capsys, tmp_path):
    entry = _truth()["propagated_forward"][0]
    assert entry == "Torch.matmul.1.forward"     # probs @ v: fed the softmax's output
    s = _session()
    cos = [_cos(s.run.load(f"{entry}:input:{j}"), s.golden_run().load(f"{entry}:input:{j}")) for j in (0, 1)]
    bad = [j for j, c in enumerate(cos) if c <= 0.98]
    rc, doc, err = _replay(capsys, tmp_path, entry)
    assert rc == 0, err
    assert bad == [0] and doc["verdict"] == "upstream"
    assert doc["upstream_input"] == f"{entry}:in0"      # as `pt` takes it
    assert [c["cosine"] for c in doc["inputs"]] == pytest.approx(cos, abs=1e-9)


def test_linear_replays_with_the_weight_transposed_and_bias(capsys, tmp_path):
    entry = "Functional.linear.0.forward"
    run = _session().run
    x, w, b = (run.load(f"{entry}:input:{j}").astype(np.float64) for j in range(3))
    npu = run.load(f"{entry}:output:0")
    ulps = _bf16_ulps((x @ w.T + b).astype(ml_dtypes.bfloat16), npu)
    rc, doc, err = _replay(capsys, tmp_path, entry)
    assert rc == 0, err
    assert doc["candidates"][0]["error_vs_npu"] == pytest.approx(ulps, abs=0.51)
    assert ulps <= 4 and doc["verdict"] == "inherent"


@pytest.mark.parametrize("entry, message", [
    ("Module.attn.SelfAttention.forward.0", "module entry"),
    ("Functional.softmax.0.backward", "backward entry"),
    ("no.such.entry", "no entry named"),
])
def test_entries_without_a_kernel_are_one_line(capsys, tmp_path, entry, message):
    rc, _, err = _replay(capsys, tmp_path, entry)
    assert rc != 0
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0]


def test_reproducer_of_a_framework_entry(capsys, tmp_path):
    rc, doc, err = _replay(capsys, tmp_path, "Functional.softmax.0.forward", "--export", tmp_path / "repro")
    assert rc == 0, err
    assert (tmp_path / "repro" / "replay.py").is_file() and (tmp_path / "repro" / "input_0.npy").is_file()
    assert doc["exported"]
    ran = subprocess.run([sys.executable, str(tmp_path / "repro" / "replay.py")], capture_output=True, text=True,
                         timeout=120)
    assert ran.returncode == 0, ran.stderr
    exact = next(line for line in ran.stdout.splitlines() if line.startswith("exact"))
    assert float(exact.split()[1]) == pytest.approx(doc["candidates"][0]["error_vs_npu"])


T = TensorArg("x")
W = TensorArg("w")


@pytest.mark.parametrize("key, args, kwargs, op_type, attrs", [
    ("Functional.linear", [T, W], {}, "MatMul", {"transpose_x2": True}),
    ("Torch.matmul", [T, W], {}, "BatchMatMul", {}),
    ("Torch.bmm", [T, W], {}, "BatchMatMul", {}),
    ("Tensor.__matmul__", [T, W], {}, "BatchMatMul", {}),
    ("Functional.softmax", [T], {"dim": 1}, "Softmax", {"axes": 1}),
    ("Functional.log_softmax", [T, 0], {}, "LogSoftmax", {"axes": 0}),
    ("Mint.softmax", [T], {"dim": -1}, "Softmax", {"axes": -1}),
    ("Functional.softmax", [T], {"axis": 2}, "Softmax", {"axes": 2}),       # MindSpore ops.softmax
    ("Functional.layer_norm", [T, [8], W, W, 1e-6], {}, "LayerNorm", {"begin_norm_axis": -1, "epsilon": 1e-6}),
    ("Functional.rms_norm", [T, [4, 8], W], {"eps": 1e-5}, "RmsNorm", {"epsilon": 1e-5}),
    ("NPU.npu_rms_norm", [T, W], {"epsilon": 1e-6}, "RmsNorm", {"epsilon": 1e-6}),
    ("Functional.gelu", [T], {}, "Gelu", {}),
    ("Functional.gelu", [T], {"approximate": "tanh"}, "GeluTanh", {}),
    ("Functional.silu", [T], {}, "SiLU", {}),
    ("Functional.relu", [T], {}, "Relu", {}),
    ("Torch.sigmoid", [T], {}, "Sigmoid", {}),
    ("Torch.tanh", [T], {}, "Tanh", {}),
    ("Torch.exp", [T], {}, "Exp", {}),
    ("Torch.log", [T], {}, "Log", {}),
    ("Torch.rsqrt", [T], {}, "Rsqrt", {}),
    ("Tensor.sqrt", [T], {}, "Sqrt", {}),
    ("Torch.pow", [T, 2], {}, "Pow", {}),
    ("Tensor.mean", [T], {"dim": -1, "keepdim": True}, "ReduceMean", {"axes": [-1], "keep_dims": True}),
    ("Torch.sum", [T, [0, 1]], {}, "ReduceSum", {"axes": [0, 1], "keep_dims": False}),
    ("Torch.var", [T, 1], {"unbiased": False}, "ReduceVar", {"axes": [1], "keep_dims": False, "correction": 0}),
    ("Torch.add", [T, W], {}, "Add", {}),
    ("Tensor.__sub__", [T, 1.5], {}, "Sub", {}),
    ("Tensor.__rsub__", [T, 1.5], {}, "Sub", {}),
    ("Tensor.__mul__", [T, W], {}, "Mul", {}),
    ("Tensor.__truediv__", [T, 2], {}, "RealDiv", {}),
    ("Tensor.to", [T], {}, "Cast", {}),
    ("Tensor.float", [T], {}, "Cast", {}),
    ("Functional.conv2d", [T, W, None, [2, 2], 1], {}, "Conv2D",
     {"data_format": "NCHW", "strides": [2, 2], "dilations": [1, 1], "pads": [1, 1, 1, 1], "groups": 1}),
    ("Functional.scaled_dot_product_attention", [T, T, W], {"is_causal": True}, "ScaledDotProductAttention",
     {"is_causal": True, "scale": None}),
    ("Functional.embedding", [T, W], {}, "Embedding", {}),
    ("Primitive.MatMul", [T, W], {}, "MatMul", {}),
])
def test_api_calls_bind_to_the_one_kernel_table(key, args, kwargs, op_type, attrs):
    binding = bind_call(key, args, kwargs, 1, lambda name: name in KERNELS)
    assert binding.op_type == op_type and binding.op_type in KERNELS
    assert binding.attrs == attrs
    if key == "Tensor.__rsub__":      # 1.5 - x: the constant first
        assert float(binding.inputs[0]) == 1.5 and binding.inputs[1] == T
    assert all(isinstance(x, TensorArg) or isinstance(x, np.ndarray) for x in binding.inputs)
    assert set(API) >= {"linear", "softmax", "layer_norm", "embedding"}


@pytest.mark.parametrize("key, args, kwargs, reason", [
    ("Functional.dropout", [T], {}, "no reference kernel"),
    ("Functional.scaled_dot_product_attention", [T, T, T, None, 0.1], {}, "random"),
    ("Torch.add", [T, W], {"alpha": 2}, "alpha"),
])
def test_calls_without_a_kernel_say_why(key, args, kwargs, reason):
    with pytest.raises(NoKernel, match=reason):
        bind_call(key, args, kwargs, 1, lambda name: name in KERNELS)


def test_mindspore_mint_and_primitive_entries_replay(capsys, tmp_path):
    """A hand-made MindSpore dump: Mint.softmax (dim recorded), Primitive.norm.RmsNorm (a GE-style
    primitive type) computed right in float16, and a Mint.matmul whose output is wrong."""
    from framework_dumps import write_dump

    rng = np.random.default_rng(3)
    x, gamma, w = rng.standard_normal((4, 8)), rng.uniform(0.5, 1.5, 8), rng.standard_normal((8, 3))
    x16, g16, w16 = x.astype(np.float16), gamma.astype(np.float16), w.astype(np.float16)
    soft = _np_softmax(x16.astype(np.float64))
    ms = (x16.astype(np.float64) ** 2).mean(-1, keepdims=True)
    rms = x16 / np.sqrt(ms + 1e-6) * g16.astype(np.float64)
    wrong = (x16.astype(np.float64) @ w16.astype(np.float64)) * 1.01        # 1 % off: a kernel bug
    dim = {"type": "int", "value": -1}
    rstd = (1 / np.sqrt(ms + 1e-6)).astype(np.float32)
    golden_rms = x / np.sqrt((x ** 2).mean(-1, keepdims=True) + 1e-6) * gamma
    target = write_dump(tmp_path / "t" / "step0" / "rank0", {
        "Mint.softmax.0.forward": {"input_args": [x16, dim], "output": [soft.astype(np.float16)]},
        "Primitive.norm.RmsNorm.0.forward": {"input_args": [x16, g16],
                                             "output": [rms.astype(np.float16), rstd]},
        "Mint.matmul.0.forward": {"input_args": [x16, w16], "output": [wrong.astype(np.float16)]}})
    golden = write_dump(tmp_path / "g" / "step0" / "rank0", {
        "Mint.softmax.0.forward": {"input_args": [x.astype(np.float32), dim],
                                   "output": [_np_softmax(x).astype(np.float32)]},
        "Primitive.norm.RmsNorm.0.forward": {"input_args": [x.astype(np.float32), gamma.astype(np.float32)],
                                             "output": [golden_rms.astype(np.float32), np.ones((4, 1), np.float32)]},
        "Mint.matmul.0.forward": {"input_args": [x.astype(np.float32), w.astype(np.float32)],
                                  "output": [(x @ w).astype(np.float32)]}})
    verdicts = {}
    for entry in ("Mint.softmax.0.forward", "Primitive.norm.RmsNorm.0.forward", "Mint.matmul.0.forward"):
        rc, out, err = run_cli(capsys, target, "--golden", golden, "-o", tmp_path / "out",
                               "-c", f"replay {entry}", "--format", "json")
        assert rc == 0, err
        verdicts[entry] = json_docs(out)[0]["verdict"]
    assert verdicts == {"Mint.softmax.0.forward": "inherent", "Primitive.norm.RmsNorm.0.forward": "inherent",
                        "Mint.matmul.0.forward": "kernel"}


def _np_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_statistics_only_dump_is_one_line(capsys, tmp_path):
    rc, out, err = run_cli(capsys, sample() / "stats_target_bf16", "--golden", sample() / "stats_golden_fp32",
                           "-o", tmp_path / "out", "-c", "replay Functional.softmax.0.forward")
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc != 0 and len(lines) == 1 and "no values dumped" in lines[0] and "task 'tensor'" in lines[0]
    rc, out, err = run_cli(capsys, sample() / "stats_target_bf16", "--golden", sample() / "stats_golden_fp32",
                           "-o", tmp_path / "out", "-c", "impact Functional.softmax.0.forward")
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc != 0 and len(lines) == 1 and "statistics only" in lines[0]


def _vcs(capsys, tmp_path, command, target="target_bf16", golden="golden_fp32"):
    return run_cli(capsys, sample() / target, "--golden", sample() / golden, "-o", tmp_path / "out",
                   "-c", command, "--format", "json")


def test_vcs_rank_excess_on_a_framework_pair(capsys, tmp_path):
    """Graph mode's `vcs --rank excess` on msprobe entries: the root softmax against the golden
    (an ideal bf16 softmax of the golden inputs), propagated entries on their own dumped inputs."""
    rc, out, err = _vcs(capsys, tmp_path, "vcs --rank excess -l 0")
    assert rc == 0, err
    rows = json_docs(out)[0]
    ranked = [r["excess"] for r in rows if r["excess"] is not None]
    assert ranked == sorted(ranked, reverse=True) and len(ranked) >= 4
    assert all(r["excess"] is None for r in rows[len(ranked):])          # no kernel (module entries) last
    by_op = {r["op"]: r for r in rows}
    root = by_op[_truth()["root"]]
    assert (root["role"], root["excess_reference"]) == ("root", "golden")
    s = _session()
    run, golden = s.run, s.golden_run()
    x_g = golden.load(f"{root['op']}:input:0").astype(np.float64)
    g_out = golden.load(f"{root['op']}:output:0").astype(np.float64)
    xb = x_g.astype(ml_dtypes.bfloat16).astype(np.float64)               # golden input in the NPU dtype
    e = np.exp(xb - xb.max(-1, keepdims=True))
    ideal = (e / e.sum(-1, keepdims=True)).astype(ml_dtypes.bfloat16).astype(np.float64)
    npu = run.load(f"{root['op']}:output:0").astype(np.float64)
    rel = lambda y, ref: np.linalg.norm(y - ref) / np.linalg.norm(ref)     # noqa: E731
    assert root["expected_error"] == pytest.approx(rel(ideal, g_out), rel=1e-6)
    assert root["excess"] == pytest.approx(rel(npu, g_out) / rel(ideal, g_out), rel=1e-6)
    # a transpose or reshape only moves values (the dumped output holds the input's values):
    # exact on its own inputs, so 1 (no error, none expected), however far from golden it is
    moved = [r for r in rows if r["op"].split(".")[1] in ("transpose", "reshape") and r["role"] != "root"]
    assert moved
    for r in moved:
        x, y = (np.sort(run.load(f"{r['op']}:{side}:0").astype(np.float64).ravel()) for side in ("input", "output"))
        assert np.array_equal(x, y) and r["excess_reference"] == "own inputs" and r["excess"] == 1.0
        assert r["expected_error"] == 0.0


def test_vcs_replay_on_a_framework_pair(capsys, tmp_path):
    rc, out, err = run_cli(capsys, sample() / "target_bf16", "--golden", sample() / "golden_fp32",
                           "-o", tmp_path / "out", "-c", "vcs --replay -l 0")
    assert rc == 0, err
    header = next(line for line in out.splitlines() if line.startswith("#"))
    assert header.split()[-1] == "verdict"
    assert "replay Module.attn.SelfAttention.forward.0: " in out and "module entry" in out   # a note, not a failure
    rc, out, err = _vcs(capsys, tmp_path, "vcs --replay -l 0")
    rows = json_docs(out)[0]
    roots = [r for r in rows if r["role"] == "root"]
    softmax = next(r for r in roots if r["op"] == _truth()["root"])
    rc, doc, err = _replay(capsys, tmp_path, softmax["op"])
    assert softmax["verdict"] == doc["verdict"] == "inherent" and softmax["replay_profile"] == doc["profile"]
    assert all(r["verdict"] is None for r in rows if r["role"] != "root")


@pytest.mark.parametrize("command", ["vcs --replay", "vcs --rank excess", "vcs --sort -excess"])
def test_vcs_replay_and_excess_need_tensors(capsys, tmp_path, command):
    rc, out, err = _vcs(capsys, tmp_path, command, "stats_target_bf16", "stats_golden_fp32")
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1 and "task 'tensor'" in lines[0], err
