"""``pt``: values, stats, ranges, histogram and ``-w`` against the generator's own arrays, plus the
bad-input paths (one clear line, the batch goes on)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from precision_shell.analysis.compare import worker as compare_worker
from precision_shell.analysis.inspect.histogram import histogram, histogram_lines
from precision_shell.cli import main
from precision_shell.commands.tensor_print import TensorPrint, parse_ranges
from precision_shell.errors import CommandError
from precision_shell.formats import dump_file
from precision_shell.render.style import Style
from precision_shell.samples.__main__ import main as generate
from precision_shell.samples.network import run_network


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("pt_ws")
    assert generate([str(root), "--force"]) == 0
    return root


@pytest.fixture(scope="module")
def manifest(ws) -> dict:
    return json.loads((ws / "pshell_sample_manifest.json").read_text())


@pytest.fixture(scope="module")
def net():
    return run_network(0)


@pytest.fixture(autouse=True)
def _fixed_width(monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")


def run(ws: Path, commands: str, capsys, fmt: str = "json", out: Path | None = None):
    argv = [str(ws), "-c", commands, "--format", fmt] + (["-o", str(out)] if out else [])
    rc = main(argv)
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def run_json(ws, command, capsys, out=None):
    rc, text, err = run(ws, command, capsys, out=out)
    assert rc == 0, err
    return json.loads(text)


def as_float(arr: np.ndarray) -> np.ndarray:
    return arr.astype(np.float32) if arr.dtype == ml_dtypes.bfloat16 else arr


def head_slice(ndim: int) -> tuple[str, tuple]:
    """``[0, :4]`` (the issue's example) for 2-D tensors, ``[0, :4, 1, 1]`` for 4-D, ``[:4]`` for 1-D."""
    if ndim < 2:
        return "[:4]", (slice(None, 4),)
    return "[0, :4" + ", 1" * (ndim - 2) + "]", (0, slice(None, 4)) + (1,) * (ndim - 2)


def test_pt_slice_values_equal_the_generators_for_every_op(ws, manifest, net, capsys):
    for entry in manifest["ops"]:
        op = net.op(entry["name"])
        for io, tensors in (("output", op.outputs), ("input", [i.tensor for i in op.inputs])):
            for k, tensor in enumerate(tensors):
                text, key = head_slice(tensor.npu.ndim)
                data = run_json(ws, f'pt "{op.name}:{io}:{k}{text}"', capsys)
                expected = as_float(tensor.npu)[key]
                got = np.array(data["values"], dtype=np.float64)
                finite = np.isfinite(expected)
                assert got.shape == expected.shape
                assert np.array_equal(got[finite], expected[finite].astype(np.float64)), (op.name, io, k)
                assert data["logical_shape"] == list(tensor.npu.shape)
                assert data["device_format"] == tensor.format
                assert data["device_shape"] == list(tensor.device_shape)


def test_pt_text_prints_numpy_values(ws, net, capsys):
    expected = net.op("fc1/MatMul").outputs[0].npu[0, :4]
    rc, text, err = run(ws, "pt fc1/MatMul:output:0[0, :4]", capsys, fmt="table")
    assert rc == 0, err
    assert np.array2string(expected) in text
    for piece in ("FRACTAL_NZ (2, 1, 16, 16)", "logical shape  (16, 24)", "slice shape    (4)",
                  "DT_FLOAT16 (float16)"):
        assert piece in text
    # a bare op name means its output 0
    assert run_json(ws, "pt fc1/MatMul[0, :4]", capsys)["values"] == expected.astype(float).tolist()


def test_pt_stats_count_nan_inf_zero(ws, manifest, net, capsys):
    ovf = manifest["overflow"]
    data = run_json(ws, f"pt {ovf['op']}:output:0 -s", capsys)
    s = data["stats"]
    assert (s["pos_inf"], s["neg_inf"], s["nan"]) == (ovf["pos_inf"], ovf["neg_inf"], ovf["nan"])
    assert data["values"] is None
    arr = net.op("conv1/Conv2D").outputs[0].npu.astype(np.float64)
    s = run_json(ws, "pt conv1/Conv2D:output:0", capsys)["stats"]
    assert s["zero"] == int((arr == 0).sum()) and s["count"] == arr.size
    assert (s["min"], s["max"]) == (arr.min(), arr.max())
    assert s["mean"] == pytest.approx(arr.mean(), rel=1e-9) and s["std"] == pytest.approx(arr.std(), rel=1e-9)


def test_big_tensors_are_summarised_unless_all(ws, net, capsys):
    arr = net.op("conv1/Conv2D").outputs[0].npu
    assert arr.size > 1000
    data = run_json(ws, "pt conv1/Conv2D:output:0", capsys)
    assert data["values"] is None
    rc, text, _ = run(ws, "pt conv1/Conv2D:output:0", capsys, fmt="table")
    assert "..." in text and "-a prints all" in text
    rc, text, _ = run(ws, "pt conv1/Conv2D:output:0 -a", capsys, fmt="table")
    assert "..." not in text.split("values", 1)[1]
    full = run_json(ws, "pt conv1/Conv2D:output:0 -a", capsys)["values"]
    assert np.array_equal(np.array(full), arr.astype(np.float64))
    rc, text, _ = run(ws, "pt conv1/Conv2D:output:0 -a -l 3", capsys, fmt="table")
    assert "more lines (-l 0 shows all)" in text


def test_ranges_count_and_marks(ws, net, capsys):
    arr = net.op("fc1/MatMul").outputs[0].npu[:2].astype(np.float64)
    data = run_json(ws, 'pt fc1/MatMul:output:0[:2] -r "[[-inf,23],[25,inf]]"', capsys)
    expected = int(((arr <= 23) | (arr >= 25)).sum())
    assert 0 < expected < arr.size
    assert data["in_range"] == expected
    assert data["ranges"] == [["-inf", 23.0], [25.0, "inf"]]   # JSON spells infinities as strings
    rc, text, _ = run(ws, 'pt fc1/MatMul:output:0[:2] -r "[[-inf,23],[25,inf]]"', capsys, fmt="table")
    values = text.split("values", 1)[1].split("notes")[0]
    assert values.count("*") == expected
    assert f"{expected:,} of {arr.size:,}" in text
    # every marked number is in range, every unmarked one is not
    for number, star in re.findall(r"(-?\d+\.\d*)\s*(\*?)", values):
        assert (float(number) <= 23 or float(number) >= 25) == (star == "*")


def test_range_marks_become_colour_on_a_terminal(ws, capsys):
    from precision_shell.commands import REGISTRY
    from precision_shell.model.session import Session

    session = Session.open(ws)
    cmd = REGISTRY.lookup("pt")
    result = cmd.handler(session, cmd.parse(["fc1/MatMul:output:0[0, :6]", "-r", "[23,24]"]))
    assert isinstance(result, TensorPrint)
    plain = dict(result.blocks)["values"]
    coloured = dict(result.styled(Style(True)).blocks)["values"]
    assert sum(line.count("*") for line in plain) == result.data["in_range"] > 0
    assert sum(line.count("\x1b[1;31m") for line in coloured) == result.data["in_range"]
    assert not any("*" in line for line in coloured)


def test_histogram_counts(ws, net, capsys):
    arr = net.op("act1/LeakyRelu").outputs[0].npu.astype(np.float64)
    data = run_json(ws, "pt act1/LeakyRelu:output:0 --hist -s", capsys)
    hist = data["histogram"]
    counts, edges = np.histogram(arr, bins=20, range=(arr.min(), arr.max()))
    assert hist["counts"] == counts.tolist()
    assert np.allclose(hist["edges"], edges)
    rc, text, _ = run(ws, "pt act1/LeakyRelu:output:0 --hist -s", capsys, fmt="table")
    assert text.count("#") > 0 and "histogram" in text


def test_histogram_keeps_non_finite_apart_and_chunks_agree():
    rng = np.random.default_rng(3)
    arr = rng.standard_normal(10_001).astype(np.float16)
    arr[[5, 70, 900]] = [np.inf, -np.inf, np.nan]
    whole, chunked = histogram(arr, bins=7), histogram(arr, bins=7, chunk=97)
    assert whole == chunked
    assert (whole.nan, whole.pos_inf, whole.neg_inf, whole.total) == (1, 1, 1, arr.size)
    assert sum(whole.counts) == arr.size - 3
    lines = histogram_lines(whole)
    assert len(lines) == 8 and lines[-1] == "not binned: 1 nan, 1 +inf, 1 -inf"
    assert histogram(np.full(5, 2.0)).counts == [5]
    assert histogram(np.arange(5, dtype=np.int32)).counts == [1] * 5   # one integer per bin
    assert histogram(np.array([True, False, True])).counts == [1, 2]
    assert histogram_lines(histogram(np.array([np.nan]))) == ["(no finite values)", "not binned: 1 nan"]


def test_parse_ranges():
    assert parse_ranges("[[-inf,-1],[1,inf]]") == [(-math.inf, -1.0), (1.0, math.inf)]
    assert parse_ranges("[0, 1e-8]") == [(0.0, 1e-8)]
    assert parse_ranges("0,1e-8") == [(0.0, 1e-8)]
    assert parse_ranges("[-Infinity, 0]") == [(-math.inf, 0.0)]
    for bad in ("[1]", "[2, 1]", "[[0, 1], 5]", "__import__('os')", "[nan, 1]", "", "[[0,1],[a,2]]"):
        with pytest.raises(CommandError):
            parse_ranges(bad)


def test_write_golden_round_trips(ws, manifest, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    name = "fc1/BiasAdd:0"
    golden = np.load(ws / manifest["golden_files"][name])
    data = run_json(ws, f"pt golden:{name} -w x.npy -s", capsys, out=tmp_path / "out")
    assert Path(data["saved"]) == Path("x.npy")
    saved = np.load(tmp_path / "x.npy")
    assert saved.dtype == golden.dtype and np.array_equal(saved, golden)
    # sliced, and with no file name: into the output folder
    data = run_json(ws, f"pt golden:{name}[1:3, ::5] -w", capsys, out=tmp_path / "out")
    saved_path = Path(data["saved"])
    assert saved_path.parent == tmp_path / "out" and saved_path.suffix == ".npy"
    assert np.array_equal(np.load(saved_path), golden[1:3, ::5])
    assert not list(tmp_path.glob(".*.npy*")) and not list((tmp_path / "out").glob(".*"))


def test_write_npu_bf16_as_float32_and_never_into_dump_folders(ws, manifest, net, capsys, tmp_path):
    data = run_json(ws, f"pt act1/LeakyRelu:output:0 -w {tmp_path / 'bf.npy'} -s", capsys)
    saved = np.load(data["saved"])
    assert saved.dtype == np.float32
    assert np.array_equal(saved, net.op("act1/LeakyRelu").outputs[0].npu.astype(np.float32))
    golden_dir = ws / manifest["paths"]["golden_dir"]
    before = sorted(p.name for p in golden_dir.iterdir())
    rc, _, err = run(ws, f"pt golden:fc1/BiasAdd:0 -w {golden_dir / 'z.npy'}", capsys)
    assert rc == 1 and "refusing to write inside the input folder" in err
    assert sorted(p.name for p in golden_dir.iterdir()) == before


def test_plain_layout_dumps_are_sliced_without_reading_the_whole_tensor(ws, net, capsys, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the whole tensor was read")

    monkeypatch.setattr(compare_worker, "read_device_array", refuse)
    monkeypatch.setattr(dump_file, "read_device_array", refuse)
    data = run_json(ws, "pt act1/LeakyRelu:output:0[3, 2:6]", capsys)
    expected = net.op("act1/LeakyRelu").outputs[0].npu[3, 2:6].astype(np.float32)
    assert data["values"] == expected.tolist()


def test_bad_input_is_one_line_each_and_the_batch_goes_on(ws, capsys):
    commands = ["pt nope/Op:output:0", "pt fc1/MatMul:output:0[0, :a]", "pt fc1/MatMul:output:0[0, 99]",
                "pt golden:no/such/op:0", "pt fc1/MatMul:output:7", 'pt fc1/MatMul:output:0 -r "[1]"',
                "pt fc1/MatMul:output:0 -l -1", "pt /no/such/file.npy"]
    rc, out, err = run(ws, "; ".join(commands + ["ls -t Conv2D"]), capsys)
    assert rc == 1
    # one error each; the slice error adds the reference and a caret under the bad item
    lines = [line for line in err.strip().splitlines() if not line.startswith("  ")]
    assert len(lines) == len(commands), err
    assert all(line.startswith("error: ") for line in lines)
    assert "no op matches 'nope/Op'" in lines[0]
    assert "bad slice ':a'" in lines[1]
    assert "  fc1/MatMul:output:0[0, :a]\n" + " " * 25 + "^" in err
    assert "index 99 is out of bounds" in lines[2]
    assert "no golden tensor 'golden:no/such/op:0'" in lines[3]
    assert "fc1/MatMul has 1 output" in lines[4] and "(valid: fc1/MatMul:0)" in lines[4]
    assert "bad range" in lines[5]
    assert "/no/such/file.npy" in lines[7]
    assert json.loads(out)[0]["op"] == "conv1/Conv2D"
