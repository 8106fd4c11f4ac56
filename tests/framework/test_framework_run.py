"""Framework runs as ops: names, lookup, module paths, dataflow edges (inferred and exact)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from framework_dumps import sample, write_dump
from precision_shell.errors import CommandError
from precision_shell.formats.msprobe.dump import read_msprobe_dump
from precision_shell.model.framework_run import FrameworkRun, open_runs


@pytest.fixture(scope="module")
def target() -> FrameworkRun:
    return open_runs(read_msprobe_dump(sample() / "target_bf16"))[0]


def test_summary_matches_the_generator_truth(target):
    truth = json.loads((sample() / "truth.json").read_text())["runs"]["target_bf16"]
    s = target.summary()
    assert (s.framework, s.task, s.level, s.steps, s.ranks) == ("pytorch", "tensor", "mix", [0], ["rank0"])
    assert s.entries == truth["entries"] == len(target.ops)
    assert s.tensor_files == truth["tensor_files"]
    doc = json.loads((sample() / truth["rank_dir"] / "dump.json").read_text())
    assert [o.name for o in target.ops] == list(doc["data"])
    assert s.kinds["forward"] == sum(1 for n in doc["data"] if n.endswith(".forward") or ".forward." in n)


def test_tensor_names_and_lookup(target):
    op = target.op("Functional.linear.3.forward")
    assert [t.name for t in op.inputs] == [f"Functional.linear.3.forward:input:{i}" for i in range(3)]
    out = target.tensor("Functional.linear.3.forward:output:0")
    assert target.tensor("Functional.linear.3.forward.output.0") is out
    values = target.load(out.name)
    assert values.shape == out.leaf.shape
    assert float(values.astype(np.float64).max()) == out.leaf.max
    assert target.op("softmax.0.forward").name == "Functional.softmax.0.forward"
    with pytest.raises(CommandError, match="matches"):
        target.op("linear")
    with pytest.raises(CommandError, match="no entry"):
        target.op("Functional.conv2d.0.forward")
    with pytest.raises(CommandError, match="no tensor"):
        target.tensor("Functional.linear.3.forward:output:7")


def test_module_path_follows_construct_json(target):
    construct = json.loads((sample() / "target_bf16/step0/rank0/construct.json").read_text())
    for op in target.ops:
        chain, node = [], construct.get(op.name)
        while node:
            chain.insert(0, node)
            node = construct.get(node)
        assert target.module_path(op.name) == chain
    assert target.module_path("Functional.softmax.0.forward") == ["Module.attn.SelfAttention.forward.0"]
    assert "Functional.softmax.0.forward" in [o.name for o in target.in_module("attn.SelfAttention")]


@pytest.mark.parametrize("producer, consumer", [
    ("Functional.linear.0.forward:output:0", "Tensor.split.0.forward:input:0"),
    ("Tensor.__add__.0.forward:output:0", "Functional.softmax.0.forward:input:0"),
    ("Functional.softmax.0.forward:output:0", "Torch.matmul.1.forward:input:0"),
    ("Functional.layer_norm.0.forward:output:0", "Module.attn.qkv.Linear.forward.0:input:0"),
])
def test_inferred_edges_link_inputs_to_their_producer(target, producer, consumer):
    edge = target.producer(consumer)
    assert (edge.src, edge.dst, edge.exact) == (producer, consumer, False)
    assert edge in target.consumers(producer.split(":")[0])


def test_every_inferred_edge_joins_equal_tensors(target):
    assert target.edges and not any(e.exact for e in target.edges)
    for e in target.edges:
        assert np.array_equal(target.load(e.src), target.load(e.dst), equal_nan=True), (e.src, e.dst)
    # forward inputs left without a producer are parameters, token ids and targets: files no
    # forward output of the run equals
    outputs = [target.load(t.name) for o in target.ops if o.kind == "forward" and o.entry.scope == "api"
               for t in o.outputs]
    for o in target.ops:
        if o.kind != "forward":
            continue
        for t in o.inputs:
            if target.producer(t.name) is None:
                x = target.load(t.name)
                assert not any(x.shape == y.shape and np.array_equal(x, y) for y in outputs), t.name


def test_graph_and_downstream(target):
    g = target.graph
    assert g.number_of_nodes() == len(target.ops)
    assert g.has_edge("Functional.softmax.0.forward", "Torch.matmul.1.forward")
    down = target.downstream("Functional.softmax.0.forward")
    assert down[:3] == ["Torch.matmul.1.forward", "Tensor.transpose.4.forward", "Tensor.reshape.3.forward"]
    assert "Functional.linear.0.forward" not in down


def _two_equal_outputs(tmp_path):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    return write_dump(tmp_path / "rank0", {
        "Functional.relu.0.forward": {"input_args": [a], "output": [a.copy()]},
        "Functional.relu.1.forward": {"input_args": [a], "output": [a.copy()]},
        "Functional.add.0.forward": {"input_args": [a, a], "output": [a * 2]},
    })


def test_inference_takes_the_latest_equal_output(tmp_path):
    run = FrameworkRun(read_msprobe_dump(_two_equal_outputs(tmp_path)).ranks[0])
    assert [e.src_op for e in run.producers("Functional.add.0.forward")] == ["Functional.relu.1.forward"] * 2


def test_sidecar_edges_are_exact(tmp_path):
    rank = _two_equal_outputs(tmp_path)
    (rank / "pshell_meta.json").write_text(json.dumps({
        "pshell_meta": 1, "capture": {"autocast": "bfloat16"},
        "edges": {"Functional.add.0.forward.input.0": "Functional.relu.0.forward.output.0",
                  "Functional.add.0.forward.input.1": "Functional.relu.1.forward.output.0",
                  "Functional.add.0.forward.input.9": "Functional.relu.0.forward.output.0"}}))
    run = FrameworkRun(read_msprobe_dump(rank).ranks[0])
    edges = run.producers("Functional.add.0.forward")
    assert [(e.src_op, e.exact) for e in edges] == [("Functional.relu.0.forward", True),
                                                   ("Functional.relu.1.forward", True)]
    assert run.meta == {"pshell_meta": 1, "capture": {"autocast": "bfloat16"}}
    assert any("input.9" in w and "unknown tensor" in w for w in run.warnings)


def test_bad_sidecar_falls_back_to_inference(tmp_path):
    rank = _two_equal_outputs(tmp_path)
    inferred = FrameworkRun(read_msprobe_dump(rank).ranks[0]).edges
    (rank / "pshell_meta.json").write_text('{"edges": [1, 2]}')
    run = FrameworkRun(read_msprobe_dump(rank).ranks[0])
    assert run.edges == inferred and len(inferred) == 3 and not any(e.exact for e in run.edges)
    assert any("pshell_meta.json" in w and "inferred instead" in w for w in run.warnings)


def test_l0_dump_links_modules(tmp_path):
    a = np.linspace(-1, 1, 8, dtype=np.float32)
    rank = write_dump(tmp_path / "rank0", {
        "Module.fc1.Dense.forward.0": {"input_args": [a], "output": [a * 3]},
        "Module.fc2.Dense.forward.0": {"input_args": [a * 3], "output": [a - 1]},
    })
    run = FrameworkRun(read_msprobe_dump(rank).ranks[0])
    assert [(e.src, e.dst) for e in run.edges] == [
        ("Module.fc1.Dense.forward.0:output:0", "Module.fc2.Dense.forward.0:input:0")]
