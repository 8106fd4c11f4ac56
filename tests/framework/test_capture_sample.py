"""``pshell TARGET --golden GOLDEN`` on the committed capture sample (sample_data/capture, made by
pshell's own capture from the framework sample's transformer block): batch CLI against the
sample's truth.json and the dataflow edges of its pshell_meta.json sidecars. No torch needed, but
for the last test (regenerating the sample byte for byte), skipped without torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import json_docs, run_cli

SAMPLE = Path(__file__).parents[2] / "sample_data" / "capture"
TRUTH = json.loads((SAMPLE / "truth.json").read_text())
LOSS, OVERFLOW = TRUTH["precision_loss"], TRUTH["overflow"]


def run(capsys, tmp_path, target: str, golden: str | None, *commands: str):
    argv = [SAMPLE / target] + (["--golden", SAMPLE / golden] if golden else [])
    argv += ["-o", tmp_path / "out", "--format", "json"]
    for c in commands:
        argv += ["-c", c]
    return run_cli(capsys, *argv)


def rank_file(run_name: str, name: str) -> dict:
    return json.loads((SAMPLE / run_name / "step0" / "rank0" / name).read_text())


def forward(names: list[str]) -> list[str]:
    return [n for n in names if LOSS["entries"][n]["kind"] == "forward"]


def test_vcs_names_truths_first_root_and_its_downstream_propagated(capsys, tmp_path):
    rc, out, err = run(capsys, tmp_path, "target_bf16", "golden_fp32",
                       f"vcs -c {LOSS['cosine_threshold']} -l 0")
    assert rc == 0, err
    (rows,) = json_docs(out)
    firsts = [r for r in rows if r["first"]]
    assert [r["op"] for r in firsts] == [LOSS["first_root"]] and firsts[0]["role"] == "root"
    assert abs(firsts[0]["cosine"] - LOSS["entries"][LOSS["first_root"]]["min_output_cosine"]) < 1e-6
    assert [r["op"] for r in rows if r["role"] == "root"] == forward(LOSS["roots"])
    propagated = [r["op"] for r in rows if r["role"] == "propagated"]
    assert propagated == forward(LOSS["propagated"]) != []
    # the first root's downstream along the capture's edges is what it propagated to
    assert set(propagated) <= set(firsts[0]["downstream"])


def test_ni_shows_the_sidecars_edges_as_exact(capsys, tmp_path):
    root = LOSS["first_root"]
    rc, out, err = run(capsys, tmp_path, "target_bf16", "golden_fp32", f"ni {root}", "info")
    assert rc == 0, err
    node, info = json_docs(out)
    edges = rank_file("target_bf16", "pshell_meta.json")["edges"]

    def leaf(name: str) -> str:      # the sidecar's "OP.input.0" is pshell's "OP:input:0"
        op, side, index = name.rsplit(".", 2)
        return f"{op}:{side}:{index}"
    producers = {(leaf(dst), leaf(src)) for dst, src in edges.items() if dst.startswith(root + ".input.")}
    consumers = {(leaf(src), leaf(dst)) for dst, src in edges.items() if src.startswith(root + ".output.")}
    assert producers and consumers
    assert {(p["tensor"], p["other_tensor"]) for p in node["producers"]} == producers
    assert {(c["tensor"], c["other_tensor"]) for c in node["consumers"]} == consumers
    assert {p["edge"] for p in node["producers"] + node["consumers"]} == {"exact"}
    assert info["edges"] == info["exact_edges"] == len(edges)


def test_ac_names_truths_overflow_producer_first(capsys, tmp_path):
    rc, out, err = run(capsys, tmp_path, "overflow_fp16", None, "ac -l 0")
    assert rc == 0, err
    (rows,) = json_docs(out)
    assert rows[0]["op"] == OVERFLOW["producer"] and rows[0]["first"] and rows[0]["role"] == "producer"
    assert [r["op"] for r in rows if r["role"] == "producer"] == OVERFLOW["producers"]
    data = [r for r in rows if r["kind"] != "parameters_grad"]
    assert [r["op"] for r in data if r["role"] == "propagated"] == OVERFLOW["propagated"]


def test_info_reports_a_pytorch_tensor_capture(capsys, tmp_path):
    rc, out, err = run(capsys, tmp_path, "target_bf16", "golden_fp32", "info")
    assert rc == 0, err
    (doc,) = json_docs(out)
    entries = rank_file("target_bf16", "dump.json")["data"]
    assert (doc["framework"], doc["task"], doc["level"]) == ("pytorch", "tensor", "mix")
    assert doc["ops"] == len(entries) == rank_file("target_bf16", "pshell_meta.json")["entries"]
    assert doc["golden_ops"] == len(rank_file("golden_fp32", "dump.json")["data"])
    assert doc["errors"] == []


def test_generate_reproduces_the_committed_sample_byte_for_byte(tmp_path):
    torch = pytest.importorskip("torch", reason="regenerating the sample needs torch")
    if torch.__version__ != TRUTH["torch"]:
        pytest.skip(f"the sample was made with torch {TRUTH['torch']}, this is {torch.__version__}")
    done = subprocess.run([sys.executable, str(SAMPLE / "generate.py"), "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    committed = sorted(p.relative_to(SAMPLE) for p in SAMPLE.rglob("*") if p.is_file()
                       and p.suffix != ".md" and p.name != "generate.py" and "__pycache__" not in p.parts)
    made = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert made == committed and len(made) > 700
    assert [p for p in made if (tmp_path / p).read_bytes() != (SAMPLE / p).read_bytes()] == []
