"""replay on the replay sample: designed verdicts from the generator's truth, the exported
reproducer, and one-line errors."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from precision_shell.samples.writer import SampleOptions, write_workspace
from tests.conftest import json_docs, run_cli


@pytest.fixture(scope="module")
def replay_ws(tmp_path_factory):
    root = tmp_path_factory.mktemp("replay_ws")
    return root, write_workspace(root, SampleOptions(variant="replay"))


def test_every_designed_op_gets_its_verdict_and_profile(replay_ws, capsys):
    root, manifest = replay_ws
    truth = manifest["replay"]
    assert {t["verdict"] for t in truth.values()} == {"upstream", "inherent", "emulated", "kernel"}
    for op, want in truth.items():
        rc, out, err = run_cli(capsys, root, "-c", f"replay {op}", "--format", "json")
        assert rc == 0, err
        doc = json_docs(out)[0]
        assert (doc["op"], doc["verdict"], doc["profile"]) == (op, want["verdict"], want["profile"])
        assert set(doc) >= {"op", "type", "verdict", "profile", "candidates", "advice"}
        assert doc["candidates"][0]["profile"] == "exact"
        if want["profile"]:
            chosen = next(c for c in doc["candidates"] if c["profile"] == want["profile"])
            assert chosen["error_vs_npu"] <= 0.25 * doc["candidates"][0]["error_vs_npu"]


def test_upstream_names_the_failing_input(replay_ws, capsys):
    root, manifest = replay_ws
    op = next(o for o, t in manifest["replay"].items() if t["verdict"] == "upstream")
    entry = next(e for e in manifest["ops"] if e["name"] == op)
    rc, out, _ = run_cli(capsys, root, "-c", f"replay {op}", "--format", "json")
    doc = json_docs(out)[0]
    assert doc["upstream_input"] == f"{op}:input:0"
    assert doc["inputs"][0]["cosine"] == pytest.approx(entry["inputs"][0]["cosine"], abs=1e-5)


def test_text_output_shows_the_evidence_table(replay_ws, capsys):
    root, _ = replay_ws
    rc, out, _ = run_cli(capsys, root, "-c", "replay rsum/ReduceSum")
    assert rc == 0
    assert re.search(r"verdict\s+emulated", out) and re.search(r"profile\s+fp16-acc", out)
    rows = {line.split()[0] for line in out.splitlines() if line.strip()}
    assert {"exact", "fp16-acc", "bf16-acc", "npu"} <= rows


def test_exported_reproducer_prints_the_same_numbers(replay_ws, capsys, tmp_path):
    root, _ = replay_ws
    for op in ("ln/LayerNorm", "chain/MatMul"):
        target = tmp_path / op.replace("/", "_")
        rc, out, err = run_cli(capsys, root, "-c", f"replay {op} --export {target}", "--format", "json")
        assert rc == 0, err
        doc = json_docs(out)[0]
        ran = subprocess.run([sys.executable, "-I", str(target / "replay.py")], capture_output=True, text=True,
                             timeout=120)
        assert ran.returncode == 0, ran.stderr
        table = {line.split()[0]: line.split()[1:] for line in ran.stdout.splitlines()[2:]}
        for cand in doc["candidates"]:
            ulps, err_g, cos = table[cand["profile"]]
            assert float(ulps) == pytest.approx(cand["error_vs_npu"], rel=1e-5)
            assert float(err_g) == pytest.approx(cand["error_vs_golden"], rel=1e-5)
            assert float(cos) == pytest.approx(cand["cosine"], abs=1e-6)


def test_named_profile_from_the_config_file(replay_ws, capsys, tmp_path, monkeypatch):
    from precision_shell import config

    root, _ = replay_ws
    ini = tmp_path / "pshell.ini"
    ini.write_text("[profiles]\nmlu370 = trunc-mantissa-20,ftz\n")
    monkeypatch.setattr(config, "_current", config.load_config(ini))
    rc, out, err = run_cli(capsys, root, "-c", "replay chain/Mul --profile mlu370 --profile fp16-acc",
                           "--format", "json")
    assert rc == 0, err
    doc = json_docs(out)[0]
    assert [c["profile"] for c in doc["candidates"]] == ["exact", "mlu370", "fp16-acc"]
    assert (doc["verdict"], doc["profile"]) == ("emulated", "mlu370")


@pytest.mark.parametrize("command, message", [
    ("replay Node_Output", r"^error: no reference kernel for NetOutput$"),
    ("replay mm/MatMul --profile fp12-acc", r"unknown profile 'fp12-acc'"),
])
def test_bad_requests_are_one_line(replay_ws, capsys, command, message):
    root, _ = replay_ws
    rc, out, err = run_cli(capsys, root, "-c", command)
    assert rc in (1, 2)
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and re.search(message, lines[0]), err
    assert "Traceback" not in err + out


def _broken_copy(tmp_path, replay_ws, edit) -> str:
    import shutil

    root, manifest = replay_ws
    copy = tmp_path / "ws"
    shutil.copytree(root, copy)
    edit(copy, manifest)
    return str(copy)


def test_missing_dump_and_disagreeing_shapes_are_one_line(replay_ws, capsys, tmp_path):
    def drop_dump(copy, manifest):
        entry = next(e for e in manifest["ops"] if e["name"] == "mm/MatMul")
        (copy / entry["dump_file"]).unlink()

    ws = _broken_copy(tmp_path / "a", replay_ws, drop_dump)
    rc, out, err = run_cli(capsys, ws, "-c", "replay mm/MatMul")
    assert rc == 1 and "Traceback" not in err
    assert [line for line in err.splitlines() if line.strip()] == [
        next(line for line in err.splitlines() if "mm/MatMul has no dump file" in line)]

    def reshape_in_graph(copy, manifest):
        graph = copy / manifest["paths"]["graph_file"]
        text = graph.read_text()
        # the graph now says rsum/ReduceSum's input is (8, 1024, 2): the dump (8, 2048) disagrees
        at = text.index('name: "rsum/ReduceSum"')
        old = "i: 8\n            i: 2048\n"
        assert old in text[at:]
        graph.write_text(text[:at] + text[at:].replace(old, "i: 8\n            i: 1024\n            i: 2\n", 1))

    ws = _broken_copy(tmp_path / "b", replay_ws, reshape_in_graph)
    rc, out, err = run_cli(capsys, ws, "-c", "replay rsum/ReduceSum")
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 1 and len(lines) == 1, err
    assert "rsum/ReduceSum:in0 has shape (8, 2048) in its dump, the graph says (8, 1024, 2)" in lines[0]
    assert "Traceback" not in err + out


def test_dump_missing_an_input_is_one_line(replay_ws, capsys, tmp_path):
    from precision_shell.formats.dump_file import DumpTensor, read_device_array, read_dump_header, write_dump

    def drop_second_input(copy, manifest):
        entry = next(e for e in manifest["ops"] if e["name"] == "mm/MatMul")
        path = copy / entry["dump_file"]
        header = read_dump_header(path)

        def tensor(e):
            return DumpTensor(read_device_array(header, e), e.dtype, e.format, e.original_shape,
                              e.original_name, e.original_output_index)
        write_dump(path, "mm/MatMul", [tensor(header.inputs[0])], [tensor(o) for o in header.outputs])

    ws = _broken_copy(tmp_path, replay_ws, drop_second_input)
    rc, out, err = run_cli(capsys, ws, "-c", "replay mm/MatMul")
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 1 and len(lines) == 1, err
    assert "holds 1 inputs of mm/MatMul, the graph gives it 2: missing input dumps" in lines[0]
    assert "Traceback" not in err + out


def test_vcs_replay_adds_the_verdict_of_every_root(replay_ws, capsys):
    root, manifest = replay_ws
    truth = manifest["replay"]
    rc, out, err = run_cli(capsys, root, "-c", "vcs --replay", "--format", "json")
    rows = json_docs(out)[0]
    roots = [r for r in rows if r["role"] == "root"]
    assert roots, "the sample's unstable LayerNorm is a root of vcs"
    for r in rows:
        if r["role"] == "root":
            assert (r["verdict"], r["replay_profile"]) == (truth[r["op"]]["verdict"], truth[r["op"]]["profile"])
        else:
            assert r["verdict"] is None
    rc, out, err = run_cli(capsys, root, "-c", "vcs --replay; next")
    first = roots[0]
    panel = out[out.index(f"] {first['op']} ("):]
    assert re.search(rf"replay\s+{truth[first['op']]['verdict']}: ", panel)
    header = next(line for line in out.splitlines() if line.startswith("#"))
    assert header.split()[-1] == "verdict"


def test_vcs_rank_excess_orders_by_observed_over_ideal_error(replay_ws, capsys):
    import numpy as np

    from precision_shell.formats.dump_file import read_dump_header, read_logical_array

    root, manifest = replay_ws
    # -c 0.99999: the fp16-accumulated ReduceSum (cosine 0.99999x) fails while its input matches
    rc, out, err = run_cli(capsys, root, "-c", "vcs --rank excess -c 0.99999", "--format", "json")
    assert rc == 0, err
    rows = json_docs(out)[0]
    ranked = [r["excess"] for r in rows if r["excess"] is not None]
    assert ranked == sorted(ranked, reverse=True) and len(ranked) >= 3
    # the fp16-accumulated ReduceSum, by hand: NPU error vs golden over that of fp16(exact sum of
    # the golden inputs rounded to fp16)
    row = next(r for r in rows if r["op"] == "rsum/ReduceSum")
    assert (row["role"], row["excess_reference"]) == ("root", "golden")
    load = lambda ref: np.load(root / manifest["golden_files"][ref]).astype(np.float64)  # noqa: E731
    x, golden = load("rsum/x:0"), load("rsum/ReduceSum:0")
    entry = next(e for e in manifest["ops"] if e["name"] == "rsum/ReduceSum")
    header = read_dump_header(root / entry["dump_file"])
    npu = read_logical_array(header, header.outputs[0]).astype(np.float64)
    ideal = x.astype(np.float16).astype(np.float64).sum(axis=1).astype(np.float16).astype(np.float64)
    rel = lambda y: np.sqrt(np.mean((y - golden) ** 2)) / np.sqrt(np.mean(golden ** 2))  # noqa: E731
    assert row["expected_error"] == pytest.approx(rel(ideal), rel=1e-9)
    assert row["excess"] == pytest.approx(rel(npu) / rel(ideal), rel=1e-9)
    assert row["excess"] > 10   # fp16 accumulation: far worse than the fp16 output alone explains


def test_every_op_of_the_other_samples_replays(sample_ws, capsys, tmp_path):
    """The convnet sample: its planted lossy LayerNorm is `kernel`, its consumers `upstream`, the
    MaxPool (no kernel) one line; the bf16 AMP sample (no planted finding): all `inherent`."""
    root, manifest = sample_ws
    ops = [o for o in manifest["ops"] if o["type"] != "MaxPool"]
    rc, out, err = run_cli(capsys, root, "-c", "; ".join(f"replay {o['name']}" for o in ops), "--format", "json")
    verdicts = {d["op"]: d["verdict"] for d in json_docs(out)}
    assert rc == 0 and set(verdicts) == {o["name"] for o in ops}, err
    lossy = manifest["lossy"]["op"]
    assert verdicts[lossy] == "kernel"
    consumers = [o["name"] for o in ops if any(i["source"].startswith(lossy + ":") for i in o["inputs"])]
    assert consumers and all(verdicts[c] == "upstream" for c in consumers)
    rc, out, err = run_cli(capsys, root, "-c", "replay pool1/MaxPool")
    assert rc == 1 and err.strip() == "error: no reference kernel for MaxPool"

    amp = tmp_path / "amp"
    amp_manifest = write_workspace(amp, SampleOptions(variant="bf16-amp"))
    names = [o["name"] for o in amp_manifest["ops"]]
    rc, out, err = run_cli(capsys, amp, "-c", "; ".join(f"replay {n}" for n in names), "--format", "json")
    assert rc == 0, err
    assert {d["op"]: d["verdict"] for d in json_docs(out)} == {n: "inherent" for n in names}


def test_vcs_rank_excess_measures_downstream_ops_on_their_own_inputs(sample_ws, capsys):
    """A propagated op's error vs golden is its producers': its excess is measured against the
    exact kernel on its own dumped inputs, so the planted lossy root ranks first and no correct
    downstream kernel is called infinitely worse than ideal."""
    import numpy as np

    from precision_shell.formats.dump_file import read_dump_header, read_logical_array

    root, manifest = sample_ws
    rc, out, err = run_cli(capsys, root, "-c", "vcs --rank excess -l 0", "--format", "json")
    assert rc == 0, err
    rows = json_docs(out)[0]
    assert rows[0]["op"] == manifest["lossy"]["op"] and rows[0]["excess_reference"] == "golden"
    downstream = [r for r in rows if r["role"] != "root" and r["excess"] is not None]
    assert downstream and all(r["excess_reference"] == "own inputs" for r in downstream)
    assert all(np.isfinite(r["excess"]) and r["excess"] < rows[0]["excess"] for r in downstream)
    # a propagated Cast by hand: exact = its own input, ideal = that rounded to the output dtype
    casts = [r for r in downstream if r["type"] == "Cast"]
    assert casts
    rel = lambda y, ref: np.sqrt(np.mean((y - ref) ** 2)) / np.sqrt(np.mean(ref ** 2))  # noqa: E731
    for row in casts:
        entry = next(e for e in manifest["ops"] if e["name"] == row["op"])
        header = read_dump_header(root / entry["dump_file"])
        x = read_logical_array(header, header.inputs[0]).astype(np.float64)
        y = read_logical_array(header, header.outputs[0])
        ideal = x.astype(y.dtype).astype(np.float64)
        observed, expected = rel(y.astype(np.float64), x), rel(ideal, x)
        want = 1.0 if observed == expected == 0 else observed / expected
        assert row["excess"] == pytest.approx(want, rel=1e-9)
