"""``eval``: numpy expressions over backticked tensors, against numpy on the generator's own arrays;
the ways out of the allow-list refused with one line and a caret; nothing evaluated when refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from precision_shell.analysis.inspect.expression import ExpressionError, evaluate, parse_expression
from precision_shell.cli import main
from precision_shell.samples.network import run_network


@pytest.fixture
def ws(sample_ws) -> Path:
    return sample_ws[0]


@pytest.fixture
def manifest(sample_ws) -> dict:
    return sample_ws[1]


@pytest.fixture(scope="module")
def net():
    return run_network(0)


def run(ws: Path, commands: str, capsys, fmt: str = "json", out: Path | None = None):
    rc = main([str(ws), "-c", commands, "--format", fmt] + (["-o", str(out)] if out else []))
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def test_eval_values_equal_numpy_on_the_same_files(ws, manifest, net, capsys):
    npu = net.op("fc1/MatMul").outputs[0].npu
    name = "fc1/BiasAdd:0"
    golden = np.load(ws / manifest["golden_files"][name])
    rc, out, err = run(ws, f'eval "np.abs(`fc1/MatMul:output:0` - `golden:{name}`).max()"', capsys)
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["value"] == pytest.approx(float(np.abs(npu - golden).max()), rel=1e-6)
    # the tensors as pshell prints them (golden: the .npy file's own name), pasteable into pt
    assert doc["tensors"] == ["fc1/MatMul:0", "golden:fc1_BiasAdd:0"]
    # an array result is shown as pt shows a tensor: stats and values
    rc, out, err = run(ws, "eval `fc1/MatMul:output:0`[0, :4] * 2", capsys)
    doc = json.loads(out)
    expected = npu[0, :4] * 2
    assert doc["shape"] == [4] and doc["numpy_dtype"] == "float16"
    assert doc["values"] == expected.astype(float).tolist()
    assert doc["stats"]["max"] == float(expected.max())
    # a slice inside the backticks goes to the resolver with the name; the same numbers
    rc, out, err = run(ws, 'eval "np.linalg.norm(`fc1/MatMul:output:0[1:3]`.astype(np.float64), axis=-1)"',
                       capsys)
    assert np.allclose(json.loads(out)["values"], np.linalg.norm(npu[1:3].astype(np.float64), axis=-1))


def test_eval_text_scalar_is_plain_and_array_has_the_pt_panel(ws, net, capsys):
    npu = net.op("fc1/MatMul").outputs[0].npu
    rc, out, err = run(ws, "eval `fc1/MatMul:output:0`.shape; eval `fc1/MatMul:output:0`.mean(axis=0) --hist",
                       capsys, fmt="table")
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0] == str(npu.shape)
    assert "histogram" in out and "count              24" in out
    assert f"{float(npu.mean(axis=0).max()):.6g}" in out


def test_eval_write_goes_through_the_output_guard(ws, manifest, net, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    rc, text, err = run(ws, "eval `conv1/Conv2D:output:0` * 0.5 -w half.npy -s", capsys, out=out)
    assert rc == 0, err
    saved = np.load(tmp_path / "half.npy")
    assert np.array_equal(saved, net.op("conv1/Conv2D").outputs[0].npu * np.float16(0.5))
    golden_dir = ws / manifest["paths"]["golden_dir"]
    before = sorted(p.name for p in golden_dir.iterdir())
    rc, _, err = run(ws, f"eval `conv1/Conv2D:output:0` -w {golden_dir / 'e.npy'}", capsys)
    assert rc == 1 and "refusing to write" in err
    assert sorted(p.name for p in golden_dir.iterdir()) == before


@pytest.mark.parametrize("text, reason, column", [
    ("np.__class__", "names starting with _", 3),
    ("().__class__", "names starting with _", 3),
    ("__import__('os')", "cannot be called", 0),
    ("(lambda: 1)()", "lambda is not allowed", 1),
    ("[x for x in `a:output:0`]", "comprehension", 0),
    ("np.save('x.npy', 1)", "'save' is not allowed", 3),
    ("`a:output:0`.tofile('x')", "'tofile' is not allowed", 13),
    ("np.lib.format.open_memmap('x')", "np.lib", 3),
    ("np.abs(*`a:output:0`)", "*arguments", 7),
    ("np.abs(**`a:output:0`)", "**arguments", 9),
    ("os.system('ls')", "unknown name 'os'", 0),
    ("'a' * 10**9", "text is allowed only as a function argument", 0),
    ("10**10**10", "computed exponent", 4),
    ("np.array('{0.__class__}').item().format(1)", "'format' is not allowed", 33),
    ("np.abs(`a:output:0`", "syntax error", 6),
    ("tensor_0_ + 1", "reserved", 0),
])
def test_refused_constructs_say_where(text, reason, column):
    with pytest.raises(ExpressionError) as info:
        parse_expression(text)
    message = str(info.value)
    first, shown, caret = message.split("\n")
    assert first.startswith("eval: ") and reason in first
    assert shown == f"  {text}"
    assert caret == "  " + " " * column + "^"


def test_a_refused_expression_runs_nothing(ws, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, out, err = run(ws, "eval \"np.save('x.npy', np.zeros(1))\"; info", capsys, fmt="table")
    assert rc == 1 and "error: eval: 'save' is not allowed" in err
    assert not (tmp_path / "x.npy").exists()
    assert "ops" in out   # the batch went on


def test_evaluation_errors_are_one_line_and_builtins_are_unreachable():
    expr = parse_expression("`a:output:0` @ `b:output:0`")
    with pytest.raises(ExpressionError, match=r"^eval: ValueError: .*matmul"):
        evaluate(expr, {"a:output:0": np.ones((2, 3)), "b:output:0": np.ones((2, 3))})
    same = parse_expression("`a:output:0`.max() + `a:output:0`.mean()")
    assert same.tensors == ("a:output:0",)
    assert evaluate(same, {"a:output:0": np.arange(4.0)}) == 3.0 + 1.5


def test_eval_in_a_framework_session(capsys):
    root = Path(__file__).resolve().parents[2] / "sample_data" / "framework"
    target, golden = root / "target_bf16", root / "golden_fp32"
    if not target.is_dir():
        pytest.skip("framework sample not present")
    name = "Functional.softmax.0.forward"
    rc = main([str(target), "--golden", str(golden), "-c",
               f'eval "np.abs(`{name}:output:0`.astype(np.float32) - `golden:{name}:output:0`).max()"',
               "--format", "json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    rc = main([str(target), "--golden", str(golden), "-c",
               f"cp {name}:output:0 golden:{name}:output:0", "--format", "json"])
    cp, _ = capsys.readouterr()
    assert json.loads(out)["value"] == pytest.approx(json.loads(cp)["max_abs_error"], rel=1e-6)
