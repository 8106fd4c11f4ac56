"""Pairing golden and target msprobe rows as msprobe compare does: exact (backward renumbered),
fuzzy queues, a data_mapping yaml; dtype notes; shape and count problems per entry."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from framework_dumps import sample, write_dump
from precision_shell.analysis.compare.msprobe.pairing import fuzzy_name, pair_dumps, read_data_mapping
from precision_shell.errors import FormatError
from precision_shell.formats.msprobe.dump import read_msprobe_dump


def _rank(path):
    return read_msprobe_dump(path).ranks[0]


@pytest.fixture(scope="module")
def sample_pairing():
    return pair_dumps(_rank(sample() / "target_bf16"), _rank(sample() / "golden_fp32"))


def test_every_forward_entry_pairs_with_its_golden(sample_pairing):
    forward = [e for e in sample_pairing.entries if ".forward" in e.entry]
    assert len(forward) == 42
    for rep in forward:
        assert rep.golden_entries == [rep.entry] and rep.paired == rep.rows == rep.golden_rows, rep
        assert rep.problems == []
    assert sample_pairing.golden_only == []


def test_rows_and_partners_are_msprobes(sample_pairing):
    with open(sample() / "compare/tensor/compare_result_rank0.csv", newline="") as f:
        table = [(r["NPU Name"], r["Bench Name"]) for r in csv.DictReader(f)]
    ours = [(p.target.name, p.golden.name if p.golden else "N/A") for p in sample_pairing.pairs]
    assert ours == table


def test_bf16_against_fp32_is_a_note_not_a_problem(sample_pairing):
    pair = next(p for p in sample_pairing.pairs if p.target.name == "Functional.softmax.0.forward.output.0")
    assert pair.golden is not None and pair.reason == ""
    assert pair.dtype_note == "torch.bfloat16 vs torch.float32"


A = np.linspace(-1, 1, 6, dtype=np.float32)


def test_backward_is_renumbered_forward_is_not(tmp_path):
    t = write_dump(tmp_path / "t/rank0", {
        "Functional.linear.1.forward": {"input_args": [A], "output": [A]},
        "Functional.linear.5.backward": {"input": [A], "output": [A]},
        "Module.fc.Dense.backward.3": {"input": [A], "output": [A]}})
    g = write_dump(tmp_path / "g/rank0", {
        "Functional.linear.0.forward": {"input_args": [A], "output": [A]},
        "Functional.linear.2.backward": {"input": [A], "output": [A]},
        "Module.fc.Dense.backward.0": {"input": [A], "output": [A]}})
    pairing = pair_dumps(_rank(t), _rank(g))
    got = {p.target.name: p.golden.name if p.golden else None for p in pairing.pairs}
    assert got["Functional.linear.5.backward.input.0"] == "Functional.linear.2.backward.input.0"
    assert got["Module.fc.Dense.backward.3.output.0"] == "Module.fc.Dense.backward.0.output.0"
    assert got["Functional.linear.1.forward.input.0"] is None
    assert pairing.entry("Functional.linear.1.forward").problems == ["no golden entry"]
    assert [r.name for r in pairing.golden_only] == ["Functional.linear.0.forward.input.0",
                                                     "Functional.linear.0.forward.output.0"]
    fuzzy = pair_dumps(_rank(t), _rank(g), fuzzy=True)
    got = {p.target.name: p.golden.name if p.golden else None for p in fuzzy.pairs}
    assert got["Functional.linear.1.forward.input.0"] == "Functional.linear.0.forward.input.0"
    assert got["Functional.linear.5.backward.output.0"] == "Functional.linear.2.backward.output.0"
    # msprobe's rename_api strips a module's class, not its counter: backward.3 != backward.0
    assert got["Module.fc.Dense.backward.3.input.0"] is None


def test_fuzzy_skips_an_extra_golden_entry(tmp_path):
    t = write_dump(tmp_path / "t/rank0", {
        "Functional.relu.0.forward": {"input_args": [A], "output": [A]},
        "Functional.gelu.0.forward": {"input_args": [A], "output": [A]}})
    g = write_dump(tmp_path / "g/rank0", {
        "Functional.relu.3.forward": {"input_args": [A], "output": [A]},
        "Tensor.float.0.forward": {"input_args": [A], "output": [A]},
        "Functional.gelu.7.forward": {"input_args": [A], "output": [A]}})
    pairing = pair_dumps(_rank(t), _rank(g), fuzzy=True)
    assert [p.golden.entry.name for p in pairing.pairs] == ["Functional.relu.3.forward"] * 2 + \
        ["Functional.gelu.7.forward"] * 2
    assert [r.entry.name for r in pairing.golden_only] == ["Tensor.float.0.forward"] * 2
    assert fuzzy_name("Functional.linear.3.forward.input.0") == "Functional.linearforward.input.0"
    assert fuzzy_name("Module.fc1.Linear.forward.0.input.0") == "Module.fc1forward.0.input.0"


def test_dtype_shape_and_count_problems(tmp_path):
    t = write_dump(tmp_path / "t/rank0", {
        "Functional.op.0.forward": {"input_args": [np.arange(4, dtype=np.int64), A],
                                    "output": [A.reshape(2, 3), A]}})
    g = write_dump(tmp_path / "g/rank0", {
        "Functional.op.0.forward": {"input_args": [np.arange(4, dtype=np.float32), A.astype(np.float16)],
                                    "output": [A.reshape(3, 2)]}})
    pairing = pair_dumps(_rank(t), _rank(g))
    by_name = {p.target.name: p for p in pairing.pairs}
    assert by_name["Functional.op.0.forward.input.0"].golden is None
    assert "Int64 vs golden Float32" in by_name["Functional.op.0.forward.input.0"].reason
    assert by_name["Functional.op.0.forward.input.1"].dtype_note == "Float32 vs Float16"
    assert by_name["Functional.op.0.forward.output.0"].shape_mismatch
    problems = pairing.entry("Functional.op.0.forward").problems
    assert "Functional.op.0.forward.output.0: shape [2, 3] vs golden [3, 2]" in problems
    assert "4 rows vs 3 in golden Functional.op.0.forward" in problems


def test_data_mapping_yaml(tmp_path):
    path = tmp_path / "map.yaml"
    path.write_text("---\n# target: golden\n"
                    "Functional.gelu.0.forward.input.0: Functional.relu.3.forward.input.0\n"
                    "'Functional.gelu.0.forward.output.0': \"Functional.relu.3.forward.output.0\"  # out\n")
    mapping = read_data_mapping(path)
    assert mapping == {"Functional.gelu.0.forward.input.0": "Functional.relu.3.forward.input.0",
                       "Functional.gelu.0.forward.output.0": "Functional.relu.3.forward.output.0"}
    t = write_dump(tmp_path / "t/rank0", {"Functional.gelu.0.forward": {"input_args": [A], "output": [A]}})
    g = write_dump(tmp_path / "g/rank0", {
        "Functional.relu.3.forward": {"input_args": [A.astype(np.float16)], "output": [A]}})
    pairing = pair_dumps(_rank(t), _rank(g), mapping=mapping)
    assert pairing.mode == "mapping"
    assert [p.golden.name for p in pairing.pairs] == list(mapping.values())


@pytest.mark.parametrize("text, reason", [
    ("a:\n  b: c\n", "line 1: no golden name"),
    ("a: b\n  c: d\n", "line 2: nested value"),
    ("a: [b, c]\n", "line 1: '[' (flow"),
    ("'a: b\n", "line 1: unclosed quote"),
    ("a: b\na: c\n", "line 2: 'a' mapped twice"),
    ("just text\n", "line 1: expected 'target_name: golden_name'"),
    ('"a\\tb": c\n', "escapes in double quotes"),
])
def test_data_mapping_errors_name_the_line(tmp_path, text, reason):
    path = tmp_path / "map.yaml"
    path.write_text(text)
    with pytest.raises(FormatError, match=reason.replace("[", r"\[").replace("(", r"\(")):
        read_data_mapping(path)


def test_rows_are_named_after_their_tensor_files(tmp_path):
    # msprobe names a row after its data_name: an entry renamed in dump.json keeps its rows' names
    t = write_dump(tmp_path / "t/rank0", {"Functional.gelu.0.forward": {"input_args": [A], "output": [A]}})
    g = write_dump(tmp_path / "g/rank0", {"Functional.gelu.0.forward": {"input_args": [A], "output": [A]}})
    doc = json.loads((g / "dump.json").read_text())
    doc["data"] = {"Functional.gelu.5.forward": doc["data"]["Functional.gelu.0.forward"]}
    (g / "dump.json").write_text(json.dumps(doc))
    pairing = pair_dumps(_rank(t), _rank(g))
    assert [(p.golden.entry.name, p.golden.name) for p in pairing.pairs] == [
        ("Functional.gelu.5.forward", "Functional.gelu.0.forward.input.0"),
        ("Functional.gelu.5.forward", "Functional.gelu.0.forward.output.0")]
