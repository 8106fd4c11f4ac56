"""``impact`` on the graph-mode sample (two designed roots) and the msprobe sample: the shares
equal a recomputation written out here in numpy, op by op, from the dumps and the goldens."""

from __future__ import annotations

import glob
import math

import ml_dtypes
import numpy as np
import pytest

from conftest import json_docs, run_cli
from framework_dumps import sample

from precision_shell.model.framework_session import FrameworkSession
from precision_shell.model.session import Session

BF16 = ml_dtypes.bfloat16


def _golden(root, stem: str) -> np.ndarray:
    found = glob.glob(str(root / "precision_data" / "tf" / "dump" / f"{stem}.0.*.npy"))
    assert len(found) == 1, found
    return np.load(found[0]).astype(np.float64)


def _rel_l2(x, g) -> float:
    x, g = np.asarray(x, np.float64).ravel(), np.asarray(g, np.float64).ravel()
    if not np.isfinite(x).all():
        return math.inf
    return float(np.linalg.norm(x - g) / np.linalg.norm(g))


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _graph_chain(run, ln_out=None, act_out=None):
    """probs/Softmax recomputed from LayerNorm (or LeakyRelu) output on, as the graph says:
    Cast fp16->bf16, LeakyRelu (alpha from the graph), Cast bf16->fp16, TransData, MatMul+bias
    (fc2 weights from fc2/MatMul's own input dumps), TransData, Cast fp16->fp32, Softmax(-1)."""
    alpha = float(run.op("act1/LeakyRelu").node.attrs["negative_slope"])
    if act_out is None:
        x = np.asarray(ln_out, np.float64).astype(BF16).astype(np.float64)          # Cast to bf16
        act_out = np.where(x > 0, x, alpha * x).astype(BF16).astype(np.float64)
    h = np.asarray(act_out).astype(np.float16).astype(np.float64)                      # Cast to fp16
    w, b = (run.load(f"fc2/MatMul:input:{j}").astype(np.float64) for j in (1, 2))
    logits = (h @ w + b).astype(np.float16).astype(np.float32).astype(np.float64)
    return _softmax(logits).astype(np.float32)


def _impact(capsys, root, *args):
    rc, out, err = run_cli(capsys, root, "-c", "impact " + " ".join(args), "--format", "json")
    assert rc == 0, err
    return json_docs(out)[0], err


def test_graph_roots_per_root_and_joint_shares_match_numpy(sample_ws, capsys):
    root, _ = sample_ws
    run = Session.open(root).run
    golden_probs = _golden(root, "probs_Softmax")
    before = _rel_l2(run.load("probs/Softmax:output:0"), golden_probs)
    ln_golden = _golden(root, "ln1_add_1").astype(np.float16)          # cast to the NPU's dtype
    after_ln = _rel_l2(_graph_chain(run, ln_out=ln_golden), golden_probs)
    act_golden = _golden(root, "act1_LeakyRelu").astype(BF16).astype(np.float64)
    after_act = _rel_l2(_graph_chain(run, act_out=act_golden), golden_probs)
    after_both = after_act        # LeakyRelu is downstream of LayerNorm: its golden wins

    rows, _ = _impact(capsys, root, "ln1/add_1/LayerNorm act1/LeakyRelu")
    by = {r["op"]: r for r in rows}
    assert set(by) == {"ln1/add_1/LayerNorm", "act1/LeakyRelu", "together"}
    for op, after in (("ln1/add_1/LayerNorm", after_ln), ("act1/LeakyRelu", after_act), ("together", after_both)):
        assert by[op]["measured"] == ["probs/Softmax:0"]
        assert by[op]["error_before"] == pytest.approx(before, rel=1e-9)
        assert by[op]["error_after"] == pytest.approx(after, rel=1e-3, abs=1e-7)
        assert by[op]["share_removed"] == pytest.approx(1 - after / before, rel=1e-3)
        assert by[op]["unrecomputable"] == []
    assert by["ln1/add_1/LayerNorm"]["share_removed"] > 0.9      # the designed root explains the error
    assert by["ln1/add_1/LayerNorm"]["self_check"] <= 1e-2 and by["ln1/add_1/LayerNorm"]["self_check_reliable"]
    assert [r["op"] for r in rows][-1] == "together"
    shares = [r["share_removed"] for r in rows[:-1]]
    assert shares == sorted(shares, reverse=True)


def test_default_roots_of_vcs_and_the_overflow_root(sample_ws, capsys):
    root, _ = sample_ws
    rc, out, err = run_cli(capsys, root, "-c", "vcs", "-c", "impact", "--format", "json")
    assert rc == 0, err
    rows = json_docs(out)[-1]
    by = {r["op"]: r for r in rows}
    assert set(by) == {"ln1/add_1/LayerNorm", "loss_scale/Mul", "together"}
    # loss_scale/Mul: its golden overflows float16 (the designed overflow), so substituting it
    # cast to the NPU's dtype leaves aux/Sub non-finite: before and after inf, nothing removed
    run = Session.open(root).run
    mul_golden = _golden(root, "loss_scale_Mul")
    with np.errstate(over="ignore"):
        assert not np.isfinite(mul_golden.astype(np.float16)).all()
    scale = run.load("loss_scale/RealDiv:input:1").astype(np.float64)
    with np.errstate(all="ignore"):
        div = (mul_golden.astype(np.float16) / scale).astype(np.float16)
        sub = (div - div.astype(np.float64).mean().astype(np.float16)).astype(np.float16)
    assert not np.isfinite(sub).all()
    assert by["loss_scale/Mul"]["error_before"] == by["loss_scale/Mul"]["error_after"] == "inf"   # JSON has no inf
    assert by["loss_scale/Mul"]["share_removed"] == 0.0
    assert "does not fit in float16" in by["loss_scale/Mul"]["note"]
    assert by["together"]["measured"] == ["probs/Softmax:0", "aux/Sub:0"]
    assert by["together"]["share_removed"] == 0.0 and "still non-finite" in by["together"]["note"]


def test_op_without_a_kernel_on_the_path_is_named_and_cuts_it(sample_ws, capsys):
    root, _ = sample_ws
    rows, _ = _impact(capsys, root, "conv1/Conv2D --to fc1/MatMul")
    row = rows[0]
    assert row["unrecomputable"] == ["pool1/MaxPool"]     # no MaxPool kernel: consumers read the dumps
    assert row["error_after"] == pytest.approx(row["error_before"], rel=1e-12)
    assert "path cut" in row["note"]


def test_bad_requests_are_one_line_each(sample_ws, capsys):
    root, _ = sample_ws
    rc, out, err = run_cli(capsys, root, "-c",
                           "impact ln1/add_1/LayerNorm loss_scale/Mul no_such_op --to probs/Softmax")
    assert rc == 0 and "ln1/add_1/LayerNorm" in out
    lines = [line for line in (out + err).splitlines() if line.strip()]
    assert any("loss_scale/Mul is not upstream of probs/Softmax" in line for line in lines)
    assert any(line.startswith("warning: no_such_op:") for line in lines)
    rc, out, err = run_cli(capsys, root, "-c", "impact ln1/add_1/LayerNorm --max-ops 3")
    assert "8 ops downstream of ln1/add_1/LayerNorm: more than --max-ops 3" in out + err
    rc, out, err = run_cli(capsys, root, "-c", "impact", "--format", "json")      # vcs runs first
    assert rc == 0, err
    assert {r["op"] for r in json_docs(out)[-1]} == {"ln1/add_1/LayerNorm", "loss_scale/Mul", "together"}


def _linear(x, w, b):
    return (x @ w.T + b).astype(BF16).astype(np.float64)


def _layer_norm(x, g, b, eps=1e-5):
    mean = x.mean(-1, keepdims=True)
    d = x - mean
    return (d / np.sqrt((d * d).mean(-1, keepdims=True) + eps) * g + b).astype(BF16).astype(np.float64)


def test_framework_softmax_root_share_matches_numpy(capsys, tmp_path):
    """The block of sample_data/framework/model.py from the softmax on, in bf16, fed by the dumps."""
    s = FrameworkSession.open(sample() / "target_bf16", golden=sample() / "golden_fp32")
    run, golden = s.run, s.golden_run()

    def d(name):
        return run.load(name).astype(np.float64)
    probs = golden.load("Functional.softmax.0.forward:output:0").astype(np.float64).astype(BF16).astype(np.float64)
    v = d("Torch.matmul.1.forward:input:1")
    out = (probs @ v).astype(BF16).astype(np.float64)
    out = np.swapaxes(out, 1, 2).reshape(2, 8, 32)
    attn = _linear(out, d("Functional.linear.1.forward:input:1"), d("Functional.linear.1.forward:input:2"))
    h1 = (d("Tensor.__add__.1.forward:input:0") + attn).astype(BF16).astype(np.float64)
    x = _layer_norm(h1, d("Functional.layer_norm.1.forward:input:2"), d("Functional.layer_norm.1.forward:input:3"))
    f = _linear(x, d("Functional.linear.2.forward:input:1"), d("Functional.linear.2.forward:input:2"))
    erf = np.vectorize(math.erf)
    gelu = (0.5 * f * (1 + erf(f / math.sqrt(2)))).astype(BF16).astype(np.float64)
    gelu = (gelu * 65536.0).astype(BF16).astype(np.float64)
    mlp = _linear(gelu, d("Functional.linear.3.forward:input:1"), d("Functional.linear.3.forward:input:2"))
    h2 = (h1 + mlp).astype(BF16).astype(np.float64)
    y = _layer_norm(h2, d("Functional.layer_norm.2.forward:input:2"), d("Functional.layer_norm.2.forward:input:3"))
    logits = _linear(y, d("Functional.linear.4.forward:input:1"), d("Functional.linear.4.forward:input:2"))
    golden_logits = golden.load("Functional.linear.4.forward:output:0").astype(np.float64)
    before = _rel_l2(run.load("Functional.linear.4.forward:output:0"), golden_logits)
    after = _rel_l2(logits, golden_logits)

    rc, out, err = run_cli(capsys, sample() / "target_bf16", "--golden", sample() / "golden_fp32",
                           "-o", tmp_path / "out", "-c", "vcs", "-c", "impact --to Functional.linear.4.forward",
                           "--format", "json")
    assert rc == 0, err
    rows = json_docs(out)[-1]
    assert [r["op"] for r in rows] == ["Functional.softmax.0.forward"]   # the module root is left out
    row = rows[0]
    assert row["measured"] == ["Functional.linear.4.forward:0"]
    assert row["error_before"] == pytest.approx(before, rel=1e-9)
    assert row["error_after"] == pytest.approx(after, rel=2e-2)
    assert row["share_removed"] == pytest.approx(1 - after / before, rel=2e-2)
    assert row["share_removed"] > 0.5 and row["unrecomputable"] == []
    assert row["self_check"] <= 1e-2


def test_framework_default_measures_the_loss(capsys, tmp_path):
    rc, out, err = run_cli(capsys, sample() / "target_bf16", "--golden", sample() / "golden_fp32",
                           "-o", tmp_path / "out", "-c", "impact Functional.softmax.0.forward", "--format", "json")
    assert rc == 0, err
    row = json_docs(out)[0][0]
    assert row["measured"] == ["Functional.cross_entropy.0.forward:0"]
    loss = FrameworkSession.open(sample() / "target_bf16").run.load("Functional.cross_entropy.0.forward:output:0")
    golden = FrameworkSession.open(sample() / "golden_fp32").run.load("Functional.cross_entropy.0.forward:output:0")
    assert row["error_before"] == pytest.approx(abs(float(loss) - float(golden)) / abs(float(golden)), rel=1e-6)


def test_report_draws_a_bar_per_root(sample_ws, capsys, tmp_path):
    pytest.importorskip("jinja2")
    root, _ = sample_ws
    page = tmp_path / "r.html"
    rc, out, err = run_cli(capsys, root, "-o", tmp_path / "out", "-c", "vcs", "-c", "impact --format json",
                           "-c", f"report -o {page}")
    assert rc == 0, err
    rows = json_docs([line for line in out.splitlines() if line.startswith("[")][-1])[0]
    html = page.read_text()
    section = html[html.index('<section id="impact">'):]
    section = section[:section.index("</section>")]
    for r in rows:
        assert f"<td>{r['op']}</td>" in section
    ln = next(r for r in rows if r["op"] == "ln1/add_1/LayerNorm")
    assert f'style="width: {round(100 * ln["share_removed"], 1)}%"' in section


def test_long_chain_streams_and_matches_numpy():
    """bench/impact.py's synthetic 60-op chain (Add reads the op three back): the recomputation
    holds a few tensors at once, and its result is the chain computed here in float16."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("bench_impact", Path(__file__).parents[2] / "bench" / "impact.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    from precision_shell.analysis.impact import Impact, impact_rows

    run = bench.ChainRun(60, 257)
    impact = Impact(run, bench._Pairing(), lambda t: run.load(t.name).astype(np.float32))
    row = list(impact_rows(impact, ["root"], None, False, []))[0]
    assert row.recomputed == 60 and impact.peak_live <= 4 and row.measured == ["op60:0"]

    out = {"root": run.load("golden:root:output:0").astype(np.float32).astype(np.float16)}
    for op in run.ops[1:]:
        xs = [out[run.producer(t.name).src_op].astype(np.float64) for t in op.inputs]
        y = {"Add": lambda: xs[0] + xs[1], "Tanh": lambda: np.tanh(xs[0]), "Mul": lambda: xs[0] * xs[1]}[op.type]()
        out[op.name] = y.astype(np.float16)
    golden = run.load("golden:op60:output:0").astype(np.float32)
    assert row.error_after == pytest.approx(_rel_l2(out["op60"], golden), rel=1e-12)
    assert row.error_before == pytest.approx(_rel_l2(run.load("op60:output:0"), golden), rel=1e-12)


def test_golden_of_another_shape_is_one_line(sample_ws, capsys, tmp_path):
    import shutil

    root, _ = sample_ws
    copy = tmp_path / "ws"
    shutil.copytree(root, copy)
    path = glob.glob(str(copy / "precision_data" / "tf" / "dump" / "ln1_add_1.0.*.npy"))[0]
    np.save(path, np.zeros((5, 7), np.float32))          # 35 values where the NPU has 16 x 24
    rc, out, err = run_cli(capsys, copy, "-c", "impact ln1/add_1/LayerNorm act1/LeakyRelu", "--format", "json")
    assert rc == 0, err
    rows = json_docs(out)[0]
    assert [r["op"] for r in rows] == ["act1/LeakyRelu"]          # the rest goes on
    lines = [line for line in (out + err).splitlines() if "shapes do not match" in line]
    assert len(lines) == 1 and "ln1/add_1/LayerNorm:0 has shape (16, 24)" in lines[0]


def test_mindspore_graph_root_replay_and_impact_on_the_loss(capsys, tmp_path):
    """The MindSpore graph-mode sample: Kernel.* entries with their attributes as constant inputs
    (MatMul's transpose_b, Softmax's axis) replay and recompute; the loss after substituting the
    designed root's golden is the MSE chain computed here in float32."""
    import json
    from pathlib import Path

    from precision_shell.model.mindspore_graph_session import MindsporeGraphSession

    base = Path(__file__).parents[2] / "sample_data" / "mindspore_graph"
    if not (base / "manifest.json").is_file():
        pytest.skip("sample_data/mindspore_graph is not in this checkout")
    truth = json.loads((base / "manifest.json").read_text())["iterations"]["0"]["precision"]
    root = truth["first_root"]
    s = MindsporeGraphSession.open(base / "target_fp16", golden=base / "golden_fp32")
    run, golden = s.run, s.golden_run()
    scope = "Default/network-WithLossCell/"
    matmul, bias_add = scope + "_backbone-Block/fc2-Dense/MatMul-op0", scope + "_backbone-Block/fc2-Dense/BiasAdd-op0"
    sub, loss = scope + "_loss_fn-MSELoss/Sub-op0", scope + "_loss_fn-MSELoss/ReduceMean-op0"

    def d(name):
        return run.load(name).astype(np.float64)
    f32 = np.float32
    probs = golden.load(f"{root}:output:0").astype(np.float16).astype(f32)        # cast to the NPU dtype
    logits = (probs.astype(np.float64) @ d(f"{matmul}:input:1").T).astype(f32)     # transpose_b
    out = (logits.astype(np.float64) + d(f"{bias_add}:input:1")).astype(f32)
    diff = (out.astype(np.float64) - d(f"{sub}:input:1")).astype(f32)
    after_loss = np.array((diff.astype(np.float64) ** 2).astype(f32).astype(np.float64).mean(), f32)
    golden_loss = golden.load(f"{loss}:output:0").astype(np.float64)
    before = _rel_l2(run.load(f"{loss}:output:0"), golden_loss)

    rc, out_text, err = run_cli(capsys, base / "target_fp16", "--golden", base / "golden_fp32", "-o", tmp_path / "o",
                                "-c", f"replay {root}", "-c", f"impact {root} --to {loss}", "--format", "json")
    assert rc == 0, err
    verdict, rows = json_docs(out_text)
    assert verdict["verdict"] == "inherent"            # +5000 puts fp16 logits on a grid of 4
    row = rows[0]
    assert row["measured"] == [f"{loss}:0"] and row["unrecomputable"] == []
    assert row["error_before"] == pytest.approx(before, rel=1e-9)
    assert row["error_after"] == pytest.approx(_rel_l2(after_loss, golden_loss), rel=1e-3, abs=1e-7)
    assert row["share_removed"] > 0.9 and row["self_check"] <= 1e-6
