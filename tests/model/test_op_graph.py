"""OpGraph built from realistic GE graph texts (parsed by the fast parser, as pshell does)."""

from __future__ import annotations

import random

import pytest
from google.protobuf import text_format

from precision_shell.formats.graph.text import parse_graph_text
from precision_shell.formats.protoload import ge_ir_pb
from precision_shell.model.graph_cache import GRAPH
from precision_shell.model.op_attrs import LazyAttrs
from precision_shell.model.op_graph import OpGraph
from tests.conftest import cache_round_trip

pb = ge_ir_pb()


def add_op(graph, name, op_type, inputs=(), *, original=None, passes=None, outputs=(), in_descs=(),
           kernel=True, stream=0, extra=None):
    op = graph.op.add(name=name, type=op_type, id=len(graph.op), stream_id=stream)
    op.input.extend(inputs)
    if original is not None:
        names = op.attr["_datadump_original_op_names"].list
        names.s.extend(n.encode() for n in original)
        names.val_type = 1
    if isinstance(passes, str):
        op.attr["pass_name"].s = passes.encode()
    elif passes:
        op.attr["pass_name"].list.s.extend(p.encode() for p in passes)
    if kernel:
        op.attr[f"{name}_kernelname"].s = f"te_{op_type.lower()}_{len(graph.op)}".encode()
        op.attr["_ge_attr_op_kernel_lib_name"].s = b"AIcoreEngine"
    for key, value in (extra or {}).items():
        if isinstance(value, bool):
            op.attr[key].b = value
        elif isinstance(value, int):
            op.attr[key].i = value
        elif isinstance(value, float):
            op.attr[key].f = value
        else:
            op.attr[key].list.i.extend(value)
    for desc_list, specs in ((op.input_desc, in_descs), (op.output_desc, outputs)):
        for spec in specs:
            desc = desc_list.add(name=spec.get("name", ""), dtype=pb.DataType.Value(spec.get("dtype", "DT_FLOAT16")),
                                 layout=spec.get("layout", "ND"))
            desc.shape.dim.extend(spec.get("shape", []))
            for key in ("_datadump_origin_format", "origin_format", "_datadump_origin_name"):
                if key in spec:
                    desc.attr[key].s = spec[key].encode()
            if "origin_shape" in spec:
                desc.attr["origin_shape"].list.i.extend(spec["origin_shape"])
            if "index" in spec:
                desc.attr["_datadump_origin_output_index"].i = spec["index"]
    return op


def sample_models():
    """Two compiled graphs; the second re-uses an op name of the first."""
    main = pb.ModelDef(name="m1")
    g = main.graph.add(name="ge_default_1")
    add_op(g, "x", "Data", kernel=False, outputs=[{"shape": [2, 16], "_datadump_origin_name": "x"}])
    add_op(g, "w", "Const", kernel=False, outputs=[{"shape": [16, 16]}])
    add_op(g, "fc1/MatMul", "MatMulV2", ["x:0", "w:0", "", "x:-1"],
           original=["fc1/MatMul", "fc1/BiasAdd"], passes=["MatMulBiasAddFusionPass", "AReduceFusion"],
           in_descs=[{"name": "x1", "shape": [1, 1, 16, 16], "layout": "FRACTAL_NZ",
                      "origin_format": "ND", "origin_shape": [2, 16]},
                     {"name": "x2", "shape": [16, 16]}, {"name": "bias"}],
           outputs=[{"name": "y", "dtype": "DT_FLOAT", "layout": "FRACTAL_NZ", "shape": [1, 1, 16, 16],
                     "_datadump_origin_format": "NHWC", "origin_format": "ND", "origin_shape": [2, 16],
                     "_datadump_origin_name": "fc1/BiasAdd", "index": 0}],
           extra={"tvm_blockdim": 32, "alpha": 0.5, "transpose": False, "axes": [0, -1]})
    add_op(g, "fc1/Relu", "Relu", ["fc1/MatMul:0"], original=["fc1/Relu"],
           outputs=[{"origin_format": "RESERVED"}], stream=1)
    add_op(g, "trans", "TransData", ["fc1/MatMul:0", "ghost:0", "fc1/Relu:-1"], original=[],
           passes="TransDataFusion")
    add_op(g, "cast", "Cast", ["trans:0", "trans:x"], kernel=False)
    second = pb.ModelDef(name="m2")
    g2 = second.graph.add(name="ge_default_2")
    add_op(g2, "x", "Data", kernel=False)
    op = add_op(g2, "loss", "ReduceMean", ["x:0", "fc1/Relu:0"], kernel=False)
    op.attr["_kernelname"].s = b"te_reducemean_x"
    return [("a/ge_proto_00000001_Build.txt", main), ("a/ge_proto_00000002_Build.txt", second)]


@pytest.fixture
def graph(tmp_path):
    loaded = []
    for source, model in sample_models():  # through the text form, as on disk
        path = tmp_path / source.split("/")[-1]
        path.write_text(text_format.MessageToString(model, as_utf8=False))
        loaded.append((str(path), parse_graph_text(path)))
    return OpGraph.from_models(loaded)


def test_ops_keys_and_summaries(graph, tmp_path):
    assert list(graph.ops) == ["x", "w", "fc1/MatMul", "fc1/Relu", "trans", "cast",
                               "ge_default_2/x", "loss"]
    second_x = graph.ops["ge_default_2/x"]
    assert (second_x.name, second_x.graph, second_x.key, second_x.order) == ("x", "ge_default_2",
                                                                             "ge_default_2/x", 0)
    assert [n.key for n in graph.in_exec_order()] == list(graph.ops)
    assert graph.sorted_names() == sorted(graph.ops)
    main, other = graph.graphs
    assert (main.name, main.ops, main.fused_ops) == ("ge_default_1", 6, 2)
    assert main.passes == ["AReduceFusion", "MatMulBiasAddFusionPass", "TransDataFusion"]
    assert main.source == str(tmp_path / "ge_proto_00000001_Build.txt")
    assert (other.ops, other.fused_ops, other.passes) == (2, 0, [])


def test_fused_op_fields(graph):
    op = graph.ops["fc1/MatMul"]
    assert (op.type, op.id, op.stream_id, op.order) == ("MatMulV2", 2, 0, 2)
    assert op.original_ops == ["fc1/MatMul", "fc1/BiasAdd"] and op.has_original_attr
    assert op.golden_names() == ["fc1/MatMul", "fc1/BiasAdd"]
    assert op.passes == ["MatMulBiasAddFusionPass", "AReduceFusion"] and op.is_fused
    assert op.kernel == "te_matmulv2_3" and op.engine == "AIcoreEngine"
    assert op.attrs["tvm_blockdim"] == 32 and op.attrs["alpha"] == 0.5
    assert op.attrs["transpose"] is False and op.attrs["axes"] == [0, -1]
    assert op.attrs["_datadump_original_op_names"] == ["fc1/MatMul", "fc1/BiasAdd"]
    assert "pass_name" in op.attrs and "nope" not in op.attrs and len(op.attrs) == 8
    (out,) = op.outputs
    assert (out.index, out.name, out.dtype, out.layout, out.shape) == (0, "y", "DT_FLOAT", "FRACTAL_NZ",
                                                                      (1, 1, 16, 16))
    assert out.origin_format == "NHWC"  # _datadump_origin_format wins over origin_format
    assert (out.origin_shape, out.origin_name, out.origin_output_index) == ((2, 16), "fc1/BiasAdd", 0)


def test_inputs_are_aligned_by_anchor(graph):
    op = graph.ops["fc1/MatMul"]
    assert [(r.index, r.producer, r.producer_output, r.raw) for r in op.inputs] == [
        (0, "x", 0, "x:0"), (1, "w", 0, "w:0"), (2, None, None, "")]
    assert [r.desc.name for r in op.inputs] == ["x1", "x2", "bias"]
    assert op.inputs[0].desc.origin_shape == (2, 16) and op.inputs[0].desc.origin_format == "ND"
    assert op.control_inputs == ["x"]
    assert graph.producers("fc1/MatMul") == [(graph.ops["x"], 0, 0), (graph.ops["w"], 0, 1)]
    trans = graph.ops["trans"]
    assert [(r.producer, r.desc) for r in trans.inputs] == [("fc1/MatMul", None), (None, None)]
    assert trans.control_inputs == ["fc1/Relu"]


def test_attr_edge_cases(graph):
    relu, trans, cast, loss = (graph.ops[k] for k in ("fc1/Relu", "trans", "cast", "loss"))
    assert relu.outputs[0].origin_format is None  # RESERVED = unset
    assert trans.has_original_attr and trans.original_ops == [] and trans.golden_names() == []
    assert trans.passes == ["TransDataFusion"] and trans.is_fused
    assert not cast.has_original_attr and cast.golden_names() == ["cast"] and not cast.is_fused
    assert cast.kernel is None and cast.engine is None and dict(cast.attrs) == {}
    assert loss.kernel == "te_reducemean_x"  # any *_kernelname attr
    assert not relu.is_fused and relu.stream_id == 1


def test_cross_graph_inputs_and_warnings(graph):
    loss = graph.ops["loss"]
    assert [(r.producer, r.producer_output) for r in loss.inputs] == [("ge_default_2/x", 0), ("fc1/Relu", 0)]
    assert any("trans" in w and "ghost" in w for w in graph.warnings)
    assert any("cast" in w and "trans:x" in w for w in graph.warnings)
    assert len(graph.warnings) == 2


def test_networkx_view_and_consumers(graph):
    g = graph.nx
    assert g.nodes["fc1/MatMul"]["op"] is graph.ops["fc1/MatMul"]
    data = sorted((u, v, d["src_output"], d["dst_input"]) for u, v, d in g.edges(data=True)
                  if d["kind"] == "data")
    expected = sorted((r.producer, key, r.producer_output, r.index) for key, op in graph.ops.items()
                      for r in op.inputs if r.producer is not None)
    assert data == expected and len(data) == 7  # 10 data inputs: 1 unconnected, 1 missing, 1 bad
    control = sorted((u, v) for u, v, d in g.edges(data=True) if d["kind"] == "control")
    assert control == [("fc1/Relu", "trans"), ("x", "fc1/MatMul")]
    consumers = graph.consumers("fc1/MatMul")
    assert [(op.key, out, idx) for op, out, idx in consumers] == [("fc1/Relu", 0, 0), ("trans", 0, 0)]
    assert [op.key for op, _, _ in graph.consumers("fc1/Relu")] == ["loss"]
    assert graph.consumers("cast") == []
    with pytest.raises(KeyError):
        graph.consumers("nope")


def test_cache_copy_keeps_the_attrs_serialized_and_lazy(graph):
    """The start-up cache keeps a parsed graph's attrs as serialized bytes, decoded when shown."""
    copy = cache_round_trip(GRAPH, graph)
    assert list(copy.ops) == list(graph.ops)
    details = copy.ops["fc1/MatMul"].lazy[0]
    assert isinstance(details.attrs, LazyAttrs) and isinstance(details.attrs._source, bytes)
    assert dict(copy.ops["fc1/MatMul"].attrs) == dict(graph.ops["fc1/MatMul"].attrs)
    assert copy.ops["fc1/MatMul"].outputs == graph.ops["fc1/MatMul"].outputs
    assert copy.consumers("fc1/MatMul")[1][0].key == "trans" and copy.warnings == graph.warnings


def test_find(graph):
    assert [op.key for op in graph.find("fc1/MatMul")] == ["fc1/MatMul"]
    assert [op.key for op in graph.find("x")] == ["x"]  # an exact key wins
    assert [op.key for op in graph.find("2/x")] == ["ge_default_2/x"]
    assert [op.key for op in graph.find("Relu")] == ["fc1/Relu"]
    assert [op.key for op in graph.find("fc1")] == ["fc1/MatMul", "fc1/Relu"]
    assert [op.key for op in graph.find("MATMUL")] == ["fc1/MatMul"]
    assert graph.find("zzz") == []


def test_same_graph_in_two_files_keeps_the_later():
    first, second = pb.ModelDef(), pb.ModelDef()
    add_op(first.graph.add(name="g"), "old", "Add")
    add_op(second.graph.add(name="g"), "new", "Add")
    graph = OpGraph.from_models([("ge_proto_1", first), ("ge_proto_2", second)])
    assert list(graph.ops) == ["new"] and graph.graphs[0].source == "ge_proto_2"
    assert "appears again" in graph.warnings[0]
    assert OpGraph.from_models([]).ops == {}


def test_large_random_graph_invariants():
    rnd = random.Random(7)
    model = pb.ModelDef()
    g = model.graph.add(name="big")
    for i in range(400):
        inputs = [f"op{rnd.randrange(i)}:{rnd.randrange(3)}" if i and rnd.random() < 0.8 else ""
                  for _ in range(rnd.randrange(4))]
        if i > 2 and rnd.random() < 0.2:
            inputs.append(f"op{rnd.randrange(i)}:-1")
        add_op(g, f"op{i}", "Add", inputs, kernel=False, in_descs=[{"name": f"d{k}"} for k in range(len(inputs))])
    graph = OpGraph.from_models([("big.txt", model)])
    assert graph.warnings == []
    for key, op in graph.ops.items():
        data_inputs = [s for s in g.op[op.order].input if not s.endswith(":-1")]
        assert [r.raw for r in op.inputs] == data_inputs
        assert all(r.desc.name == f"d{r.index}" for r in op.inputs)
        for producer, out, idx in graph.producers(key):
            assert (op, out, idx) in graph.consumers(producer.key)
    edges = graph.nx.number_of_edges()
    assert edges == sum(len(op.control_inputs) + len(graph.producers(k)) for k, op in graph.ops.items())


def test_edge_view_answers_like_networkx(graph):
    """ni/li/lo read edges from the graph's own index: the same edges networkx holds."""
    def norm(edges):
        return sorted((u, v, tuple(sorted(d.items()))) for u, v, d in edges)

    for key in graph.ops:
        assert norm(graph.edges.in_edges(key, data=True)) == norm(graph.nx.in_edges(key, data=True))
        assert norm(graph.edges.out_edges(key, data=True)) == norm(graph.nx.out_edges(key, data=True))
    keys = ["fc1/MatMul", "x", "trans"]
    assert norm(graph.edges.edges(keys, data=True)) == norm(graph.nx.edges(keys, data=True))
    assert graph.edges.out_edges("fc1/Relu") != [] and graph.control_consumers("fc1/Relu") == ["trans"]
    with pytest.raises(KeyError):
        graph.edges.out_edges("nope")


@pytest.mark.parametrize("dict_after", [0, 10_000])
def test_lookups_by_key_agree_before_and_after_the_key_dict(tmp_path, monkeypatch, dict_after):
    """The first lookups search the name blob (no dict of every op), later ones the dict: both
    find exactly the keys, the first graph's op for a name taken twice, and nothing else."""
    from precision_shell.model import op_map

    monkeypatch.setattr(op_map, "DICT_AFTER", dict_after)
    graph = OpGraph.from_models([(f"{tmp_path}/{s}", m) for s, m in sample_models()])
    keys = ["x", "w", "fc1/MatMul", "fc1/Relu", "trans", "cast", "ge_default_2/x", "loss"]
    for position, key in enumerate(keys):
        assert key in graph.ops and graph.ops[key].key == key
        assert graph.ops.row_of(key) == position
    assert graph.ops["x"].graph == "ge_default_1" and graph.ops["ge_default_2/x"].name == "x"
    for missing in ["", "fc1", "MatMul", "x:0", "ge_default_2", "ge_default_2/loss", "wfc1/MatMul", "é", 7]:
        assert missing not in graph.ops and graph.ops.get(missing) is None
        with pytest.raises(KeyError):
            graph.ops[missing]
    assert (graph.ops._index is None) == (dict_after > 0)
    assert [c.key for c, _, _ in graph.consumers("fc1/MatMul")] == ["fc1/Relu", "trans"]
    assert graph.control_consumers("x") == ["fc1/MatMul"] and graph.consumer_edges("nope") == []
