"""``pshell TARGET --golden GOLDEN`` on the committed MindSpore graph-mode sample
(sample_data/mindspore_graph, MindSpore's own dump of a tiny training step, made by its
generate.py in a separate venv): batch CLI against the truth in its manifest.json, which the
generator computed from the dumped tensors. Neither MindSpore nor its venv is needed here; the
expected values the manifest does not hold are computed below from the sample's files with numpy.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
import pytest

from conftest import json_docs, run_cli

SAMPLE = Path(__file__).parents[2] / "sample_data" / "mindspore_graph"
MANIFEST = json.loads((SAMPLE / "manifest.json").read_text())
TRUTH = MANIFEST["iterations"]["0"]
SOFTMAX = TRUTH["precision"]["first_root"]


def run(capsys, tmp_path, target: str | Path, golden: str | Path | None, *commands: str, fmt="json"):
    argv = [SAMPLE / target if isinstance(target, str) else target]
    argv += (["--golden", SAMPLE / golden if isinstance(golden, str) else golden] if golden else [])
    argv += ["-o", tmp_path / "out", "--format", fmt]
    for c in commands:
        argv += ["-c", c]
    return run_cli(capsys, *argv)


def iteration(run_name: str, it: int = 0) -> Path:
    return SAMPLE / run_name / "rank_0" / "Block" / "0" / str(it)


def kernel_file(run_name: str, op_name: str, io: str, slot: int, it: int = 0) -> Path:
    """The file of a kernel tensor, by the op name its files carry (``/`` -> ``_``)."""
    found = [p for p in iteration(run_name, it).iterdir()
             if f".{op_name.replace('/', '_')}." in p.name and f".{io}.{slot}." in p.name]
    assert len(found) == 1, (op_name, io, slot, found)
    return found[0]


def cosine(a, b) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_vcs_names_the_designed_first_divergence_and_its_propagated_kernels(capsys, tmp_path):
    truth = TRUTH["precision"]
    rc, out, err = run(capsys, tmp_path, "target_fp16", "golden_fp32", f"vcs -c {truth['cosine_threshold']} -l 0")
    assert rc == 0, err
    (rows,) = json_docs(out)
    assert [r["op"] for r in rows if r["first"]] == [truth["first_root"]] and "Softmax" in truth["first_root"]
    assert [r["op"] for r in rows if r["role"] == "root"] == truth["roots"]
    assert [r["op"] for r in rows if r["role"] == "propagated"] == truth["propagated"] != []
    # the root's cosine is the one of its output files, computed here
    first = next(r for r in rows if r["first"])
    expected = cosine(np.load(kernel_file("target_fp16", SOFTMAX, "output", 0)),
                      np.load(kernel_file("golden_fp32", SOFTMAX, "output", 0)))
    assert abs(first["cosine"] - expected) < 1e-6
    # what it propagated to is downstream of it along the graph's edges
    assert set(truth["propagated"]) <= set(first["downstream"])


def test_ac_names_the_designed_overflow_producer(capsys, tmp_path):
    truth = TRUTH["overflow"]
    rc, out, err = run(capsys, tmp_path, "overflow_fp16", None, "ac -l 0")
    assert rc == 0, err
    (rows,) = json_docs(out)
    producer = truth["first_producer"]
    assert [r["op"] for r in rows if r["first"]] == [producer] and "Mul" in producer
    # from the files: its output holds inf, its float input does not
    out0 = np.load(kernel_file("overflow_fp16", producer, "output", 0))
    in0 = np.load(kernel_file("overflow_fp16", producer, "input", 0))
    assert not np.isfinite(out0).all() and np.isfinite(in0).all()
    kernels = [r["op"] for r in rows if not r["op"].startswith("Parameter/")]
    assert kernels == [producer] + truth["propagated"]
    # the weights the optimizer wrote NaN into come out of the overflow: propagated, not producers
    params = [r for r in rows if r["op"].startswith("Parameter/")]
    assert params and all(r["role"] == "propagated" for r in params)


def test_ac_on_the_next_iteration_has_no_producer(capsys, tmp_path):
    """Iteration 1 starts from NaN weights: every overflow comes from iteration 0."""
    rc, out, err = run(capsys, tmp_path, "overflow_fp16", None, "use --step 1", "ac -l 0")
    assert rc == 0, err
    rows = json_docs(out)[-1]
    assert MANIFEST["iterations"]["1"]["overflow"]["first_producer"] is None
    assert rows and not any(r["first"] for r in rows)


def test_ni_shows_the_source_line_and_the_scalar_inputs(capsys, tmp_path):
    rc, out, err = run(capsys, tmp_path, "target_fp16", None, "ni Softmax-op0")
    assert rc == 0, err
    (doc,) = json_docs(out)
    assert doc["op"] == SOFTMAX and doc["type"] == "Softmax"
    lines = (SAMPLE / "generate.py").read_text().splitlines()
    number = next(i for i, text in enumerate(lines, 1) if text.strip() == "p = self.softmax(z)")
    assert doc["source"].endswith(f"generate.py:{number}  p = self.softmax(z)")
    # the axis is a graph constant dumped as input 1: a value, not a tensor; its file agrees
    (axis,) = doc["scalar_inputs"]
    assert axis["input"] == "input.1"
    assert list(axis["value"]) == np.load(kernel_file("target_fp16", SOFTMAX, "input", 1)).tolist() == [-1]
    rc, out, err = run(capsys, tmp_path, "target_fp16", None, "ni Softmax-op0", fmt="table")
    assert f"generate.py:{number}  p = self.softmax(z)" in out and "source" in out


def test_info_describes_the_tree_and_the_pairing(capsys, tmp_path):
    rc, out, err = run(capsys, tmp_path, "target_fp16", "golden_fp32", "info")
    assert rc == 0, err
    (doc,) = json_docs(out)
    tree = doc["target"]
    assert (tree["ranks"], tree["nets"], tree["graphs"]) == (["rank_0"], ["Block"], [0])
    assert tree["iterations"] == sorted(int(p.name) for p in (SAMPLE / "target_fp16/rank_0/Block/0").iterdir())
    assert (tree["device_target"], tree["ms_version"]) == ("CPU", MANIFEST["mindspore"]["ms_version"])
    order_csv = SAMPLE / "target_fp16/rank_0/execution_order/ms_execution_order_graph_0.csv"
    order = [row[0] for row in csv.reader(order_csv.open())][1:]
    assert tree["kernels"] == len(order) == len(TRUTH["kernels"]["target_fp16"])
    assert tree["order"] == "execution_order" and tree["graph"].endswith("ms_output_trace_code_graph_0.pb")
    # renumbered: kernels whose files' op name is no execution-order name
    files = {p.name.split(".")[1] for p in iteration("target_fp16").iterdir() if not p.name.startswith("Parameter.")}
    assert tree["renumbered"] == len(files - {n.replace("/", "_") for n in order}) == 4
    pairing = doc["golden"]["pairing"]
    assert pairing["target_only"] == TRUTH["precision"]["target_only"]
    assert pairing["golden_only"] == TRUTH["precision"]["golden_only"] == []
    assert pairing["paired"] == len(TRUTH["kernels"]["golden_fp32"])


def test_edges_come_from_the_graph_and_carry_the_producers_values(capsys, tmp_path):
    """Every kernel-to-kernel edge joins an output file to an input file holding the same values."""
    from precision_shell.model.mindspore_graph_session import MindsporeGraphSession

    session = MindsporeGraphSession.open(SAMPLE / "target_fp16", output=tmp_path / "out")
    run_ = session.run
    kernel_edges = [e for e in run_.edges if not e.src_op.startswith("Parameter/")]
    assert len(kernel_edges) > 20 and all(e.exact for e in run_.edges)
    for e in kernel_edges:
        assert np.array_equal(run_.load(e.src), run_.load(e.dst), equal_nan=True), e
    # fc2's MatMul reads the cast-back softmax and the fc2 weight
    rc, out, err = run(capsys, tmp_path, "target_fp16", None, "li fc2-Dense/MatMul-op0")
    (rows,) = json_docs(out)
    assert [r["op"] for r in rows] == ["Default/network-WithLossCell/_backbone-Block/Cast-op3",
                                       "Parameter/fc2.weight"]


def test_renumbered_files_pair_with_the_graph_names_by_type_and_order(tmp_path):
    from precision_shell.model.mindspore_graph_session import MindsporeGraphSession

    session = MindsporeGraphSession.open(SAMPLE / "target_fp16", output=tmp_path / "out")
    renumbered = session.run.extras["renumbered"]
    assert renumbered["Default/network-WithLossCell/_backbone-Block/Cast-op2"].endswith("Block_Cast-op0")
    assert renumbered["Default/network-WithLossCell/_backbone-Block/Cast-op3"].endswith("Block_Cast-op1")
    # by dtype: the first cast makes the softmax's float16 input, the second takes its output back
    cast_in = session.run.tensor("Default/network-WithLossCell/_backbone-Block/Cast-op2:output:0").leaf
    cast_out = session.run.tensor("Default/network-WithLossCell/_backbone-Block/Cast-op3:output:0").leaf
    assert (cast_in.dtype, cast_out.dtype) == ("float16", "float32")


def test_vc_writes_msprobe_columns_with_full_names(capsys, tmp_path):
    rc, out, err = run(capsys, tmp_path, "target_fp16", "golden_fp32", "vc")
    assert rc == 0, err
    (path,) = (tmp_path / "out").glob("compare_result_*.csv")
    rows = list(csv.DictReader(path.open()))
    assert {"NPU Name", "Bench Name", "Cosine", "MaxAbsErr", "Result"} <= set(rows[0])
    row = next(r for r in rows if r["NPU Name"] == f"{SOFTMAX}.output.0")
    assert row["Bench Name"] == row["NPU Name"] and row["NPU Dtype"] == "Float16" and row["Bench Dtype"] == "Float32"
    assert abs(float(row["Cosine"]) - TRUTH["precision"]["cosines"][f"{SOFTMAX}:output.0"]) < 1e-6


def test_pt_reads_a_kernel_tensor_by_its_short_name(capsys, tmp_path):
    rc, out, err = run(capsys, tmp_path, "overflow_fp16", None, "pt _Muls/Mul-op0:0")
    assert rc == 0, err
    (doc,) = json_docs(out)
    values = np.load(kernel_file("overflow_fp16", "Expand/_Muls/Mul-op0", "output", 0))
    assert doc["stats"]["pos_inf"] == int(np.isposinf(values).sum()) > 0


def test_npu_and_golden_options_on_iteration_folders_open_the_same_pair(capsys, tmp_path):
    rc, out, err = run_cli(capsys, "--npu", iteration("target_fp16"), "--golden", iteration("golden_fp32"),
                           "-o", tmp_path / "out", "--format", "json", "-c", "vcs -l 0")
    assert rc == 0, err
    (rows,) = json_docs(out)
    assert [r["op"] for r in rows if r["first"]] == [SOFTMAX]


def test_a_mindspore_pb_given_as_a_ge_graph_is_one_line_never_a_graph_of_0_ops(capsys, tmp_path):
    from precision_shell.formats.graph.files import load_graph_file
    from precision_shell.errors import FormatError

    graphs = SAMPLE / "target_fp16/rank_0/graphs"
    for name, what in (("ms_output_trace_code_graph_0.pb", "MindSpore ANF IR graph"),
                       ("ms_output_trace_code_graph_0.ir", "MindSpore IR text")):
        with pytest.raises(FormatError, match=what):
            load_graph_file(graphs / name)
    ws = SAMPLE.parent / "convnet"
    rc, out, err = run_cli(capsys, ws, "--graph", graphs / "ms_output_trace_code_graph_0.pb",
                           "-o", tmp_path / "out", "-c", "info")
    lines = [line for line in err.splitlines() if "ms_output_trace_code_graph_0.pb" in line]
    assert len(lines) == 1 and "not a GE ModelDef" in lines[0]
    assert not re.search(r"\b0 ops of 0 types", out)


def test_export_keep_fp32_names_the_root_kernels_types(capsys, tmp_path):
    rc, out, err = run(capsys, tmp_path, "target_fp16", "golden_fp32", "vcs", "export suspects --format keep-fp32")
    assert rc == 0, err
    _, doc = json_docs(out)
    types = {name.rsplit("/", 1)[-1].split("-op")[0] for name in TRUTH["precision"]["roots"]}
    assert Path(doc["file"]).read_text().split() == [f"ops.{t}" for t in sorted(types)] == ["ops.Softmax"]


def test_vcs_over_every_iteration_matches_each_iterations_truth(capsys, tmp_path):
    rc, out, err = run(capsys, tmp_path, "target_fp16", "golden_fp32", "vcs --steps all")
    assert rc == 0, err
    (rows,) = json_docs(out)
    by_step = {r["step"]: r for r in rows}
    assert sorted(by_step) == sorted(int(i) for i in MANIFEST["iterations"])
    for step, row in by_step.items():
        truth = MANIFEST["iterations"][str(step)]["precision"]
        assert row["first_divergence"] == truth["first_root"]
        roots = row["roots"] if isinstance(row["roots"], int) else len(row["roots"])
        assert (roots, row["failing_ops"]) == (len(truth["roots"]), len(truth["roots"]) + len(truth["propagated"]))


def test_report_on_a_mindspore_pair_names_the_root(capsys, tmp_path):
    rc, out, err = run(capsys, tmp_path, "target_fp16", "golden_fp32", "vcs", "report", fmt="table")
    assert rc == 0, err
    html = (tmp_path / "out" / "report.html").read_text()
    assert SOFTMAX in html and "target_fp16" in html
