"""parse_graph_json reads atc --mode=5 JSON; find_graph_files / load_graph_file pick and load graphs."""

from __future__ import annotations

import json
import math

import pytest
from google.protobuf import descriptor, text_encoding, text_format

from precision_shell.errors import FormatError
from precision_shell.formats.graph.files import find_graph_files, load_graph_file
from precision_shell.formats.graph.atc_json import parse_graph_json
from precision_shell.formats.protoload import ge_ir_pb

pb = ge_ir_pb()
FD = descriptor.FieldDescriptor


def to_atc_json(message, camel=False):
    """What GE's Pb2Json (atc --mode=5) writes: set fields only, maps as key/value lists, enum
    names, singular float as "%g" text, singular bytes C-escaped, empty messages skipped."""
    out = {}
    for fd, value in message.ListFields():
        key = fd.json_name if camel else fd.name
        if fd.is_repeated:
            items = list(value.items()) if fd.message_type and fd.message_type.GetOptions().map_entry \
                else list(value)
            if isinstance(items[0], tuple):  # map entries
                out[key] = [{"key": k, "value": to_atc_json(v, camel) or None} for k, v in items]
            elif fd.type == FD.TYPE_MESSAGE:
                out[key] = [to_atc_json(v, camel) or None for v in items]
            elif fd.type == FD.TYPE_ENUM:
                out[key] = [fd.enum_type.values_by_number[v].name for v in items]
            elif fd.type == FD.TYPE_BYTES:
                out[key] = [v.decode("utf-8") for v in items]
            elif fd.type == FD.TYPE_FLOAT:
                out[key] = [None if math.isnan(v) or math.isinf(v) else v for v in items]
            else:
                out[key] = items
        elif fd.type == FD.TYPE_MESSAGE:
            inner = to_atc_json(value, camel)
            if inner:
                out[key] = inner
        elif fd.type == FD.TYPE_ENUM:
            out[key] = fd.enum_type.values_by_number[value].name
        elif fd.type == FD.TYPE_FLOAT:
            out[key] = "%g" % value
        elif fd.type == FD.TYPE_BYTES:
            out[key] = text_encoding.CEscape(value, as_utf8=False)
        else:
            out[key] = value
    return out


def sample_model():
    model = pb.ModelDef(name="ge_default", version=2)
    graph = model.graph.add(name="ge_default_20240125_1")
    graph.attr["_session_graph_id"].s = b"0_1"
    data = graph.op.add(name="data_1", type="Data", id=0)
    data.output_desc.add(name="y", dtype=pb.DataType.Value("DT_FLOAT16"), layout="ND").shape.dim.extend([4, 4])
    fused = graph.op.add(name="fc1/MatMul", type="MatMulV2", id=1, stream_id=-1)
    fused.input.extend(["data_1:0", "", "data_1:-1"])
    names = fused.attr["_datadump_original_op_names"].list
    names.s.extend([b"fc1/MatMul", "fc1/BiasAdd\u00e9".encode()])
    names.val_type = 1
    fused.attr["pass_name"].s = b"MatMulBiasAddFusionPass"
    fused.attr["weird"].s = b"\x00\xff\"\\\n\xe4\xb8\xad"  # C-escaped by Pb2Json
    fused.attr["alpha"].f = 0.25
    fused.attr["big"].i = -(2 ** 63)
    fused.attr["flag"].b = True
    fused.attr["floats"].list.f.extend([0.5, float("nan")])
    fused.attr["ranges"].list_list_int.list_list_i.add().list_i.extend([1, -1])
    fused.attr["empty"].list.val_type = 1  # GE's "no original names": list{val_type: 1}, no s
    desc = fused.output_desc.add(name="y", dtype=pb.DataType.Value("DT_BF16"), layout="FRACTAL_NZ")
    desc.shape.dim.extend([1, 1, 16, 16])
    desc.attr["_datadump_origin_name"].s = b"fc1/BiasAdd"
    desc.attr["origin_shape"].list.i.extend([4, 4])
    fused.input_desc.add(name="x", dtype=pb.DataType.Value("DT_FLOAT16"))
    fused.input_desc.add()  # unconnected optional input: an empty descriptor (null in JSON)
    return model


def write_json(tmp_path, obj, name="graph.json"):
    path = tmp_path / name
    path.write_text(obj if isinstance(obj, str) else json.dumps(obj), encoding="utf-8")
    return path


def same_model(a, b):
    """Equal, treating the NaN in attr 'floats' as equal (protobuf == compares bits)."""
    return text_format.MessageToString(a) == text_format.MessageToString(b)


def test_atc_json_round_trip(tmp_path):
    model = sample_model()
    tree = to_atc_json(model)
    assert tree["graph"][0]["op"][1]["attr"][0]["key"]  # attrs are a key/value list
    assert tree["graph"][0]["op"][1]["input_desc"][1] is None
    parsed = parse_graph_json(write_json(tmp_path, tree))
    assert same_model(parsed, model)
    op = parsed.graph[0].op[1]
    assert op.attr["weird"].s == b"\x00\xff\"\\\n\xe4\xb8\xad"
    assert op.attr["big"].i == -(2 ** 63) and op.stream_id == -1
    assert math.isnan(op.attr["floats"].list.f[1])
    assert op.output_desc[0].dtype == pb.DataType.Value("DT_BF16")
    assert len(op.input_desc) == 2 and op.input_desc[1] == pb.TensorDescriptor()
    assert op.attr["empty"].WhichOneof("value") == "list" and not op.attr["empty"].list.s


def test_liberal_variants(tmp_path):
    model = sample_model()
    camel = to_atc_json(model, camel=True)
    assert same_model(parse_graph_json(write_json(tmp_path, camel)), model)
    tree = to_atc_json(model)
    op = tree["graph"][0]["op"][1]
    op["id"], op["stream_id"] = "1", "-1"  # int64 as strings (proto3 JSON style)
    op["output_desc"][0]["dtype"] = 27  # enum as number
    op["attr"] = {entry["key"]: entry["value"] for entry in op["attr"]}  # map as an object
    op["unknown_key"] = {"anything": [1, 2]}
    assert same_model(parse_graph_json(write_json(tmp_path, tree)), model)
    bare = parse_graph_json(write_json(tmp_path, tree["graph"][0]))  # a bare GraphDef
    assert bare.graph[0].name == "ge_default_20240125_1" and len(bare.graph[0].op) == 2


def test_a85_shaped_rule_file(tmp_path):
    text = json.dumps({"graph": [{"name": "g", "op": [
        {"name": "add1", "type": "Add", "id": 3, "input": ["x:0", "y:1", "z:-1"],
         "attr": [{"key": "_datadump_original_op_names",
                   "value": {"list": {"s": ["add1", "relu1"], "val_type": "VT_LIST_STRING"}}},
                  {"key": "_datadump_is_multiop", "value": {"b": True}}],
         "output_desc": [{"dtype": "DT_FLOAT", "attr": [
             {"key": "_datadump_origin_name", "value": {"s": "relu1"}},
             {"key": "_datadump_origin_output_index", "value": {"i": 0}},
             {"key": "origin_shape", "value": {"list": {"i": [1, 3, 2, 2]}}}]}]}]}]})
    op = parse_graph_json(write_json(tmp_path, text)).graph[0].op[0]
    assert list(op.input) == ["x:0", "y:1", "z:-1"]
    assert list(op.attr["_datadump_original_op_names"].list.s) == [b"add1", b"relu1"]
    assert op.attr["_datadump_is_multiop"].b is True
    assert op.output_desc[0].attr["_datadump_origin_name"].s == b"relu1"
    assert list(op.output_desc[0].attr["origin_shape"].list.i) == [1, 3, 2, 2]


@pytest.mark.parametrize("content,words", [
    ("", "empty"),
    ('{"graph": [', "not JSON"),
    ("[1, 2]", "not a GE graph JSON"),
    ('{"graph": 5}', "not a GE graph JSON"),
    ('{"graph": [{"op": [{"id": "seven"}]}]}', "$.graph[0].op[0].id: expected an integer"),
    ('{"graph": [{"op": [{"name": 5}]}]}', "expected a string"),
    ('{"graph": [{"op": [{"output_desc": [{"dtype": "DT_NOPE"}]}]}]}', "DT_NOPE"),
    ('{"graph": [{"op": [{"attr": [{"key": "a", "value": {"b": "maybe"}}]}]}]}', "true or false"),
    ('{"graph": [{"op": {"name": "x"}}]}', "expected a list"),
    ('{"graph": [{"op": [7]}]}', "expected an object"),
    ('{"name": "m", "version": 4294967296, "graph": []}', "out of range"),
])
def test_bad_json_is_a_format_error(tmp_path, content, words):
    path = write_json(tmp_path, content)
    with pytest.raises(FormatError) as err:
        parse_graph_json(path)
    assert str(err.value).startswith(str(path)) and words in str(err.value)


def test_find_graph_files_rule(tmp_path):
    graph_dir = tmp_path / "graph"
    (graph_dir / "pid_1_deviceid_0").mkdir(parents=True)
    for name in ["ge_proto_00000010_Build.txt", "ge_proto_00000002_Build.txt",
                 "pid_1_deviceid_0/ge_proto_00000094_graph_1_Build.txt",
                 "ge_proto_00000003_PreRunAfterBuild.txt", "ge_proto_00000004_PreRunBegin.txt",
                 "ge_proto_00000002_Build.txt.json", "ge_onnx_00000001_graph_0_Build.pbtxt", "notes.txt"]:
        (graph_dir / name).write_text("name: 'x'\n")
    found = [p.relative_to(graph_dir).as_posix() for p in find_graph_files(graph_dir)]
    assert found == ["ge_proto_00000002_Build.txt", "ge_proto_00000010_Build.txt",
                     "pid_1_deviceid_0/ge_proto_00000094_graph_1_Build.txt"]
    for name in found:
        (graph_dir / name).unlink()
    assert [p.name for p in find_graph_files(graph_dir)] == ["ge_proto_00000003_PreRunAfterBuild.txt"]
    (graph_dir / "ge_proto_00000003_PreRunAfterBuild.txt").unlink()
    assert [p.name for p in find_graph_files(graph_dir)] == ["ge_proto_00000002_Build.txt.json"]
    (graph_dir / "ge_proto_00000002_Build.txt.json").unlink()
    write_json(graph_dir, {"graph": []}, "model.json")
    write_json(graph_dir, {"graph_fusion": {}}, "fusion_result.json")
    assert [p.name for p in find_graph_files(graph_dir)] == ["model.json"]
    assert find_graph_files(tmp_path / "absent") == []
    assert find_graph_files(graph_dir / "model.json") == [graph_dir / "model.json"]


def test_load_graph_file_dispatches_on_suffix(tmp_path):
    model = sample_model()
    text_path = tmp_path / "ge_proto_00000001_Build.txt"
    text_path.write_text(text_format.MessageToString(model, as_utf8=False))
    json_path = write_json(tmp_path, to_atc_json(model), "ge_proto_00000001_Build.txt.json")
    binary_path = tmp_path / "graph.pb"
    binary_path.write_bytes(model.SerializeToString())
    for path in (text_path, json_path, binary_path):
        assert same_model(load_graph_file(path), model)
    binary_path.write_bytes(b"\xff\xff\xff")
    with pytest.raises(FormatError, match="not a binary ModelDef"):
        load_graph_file(binary_path)
    with pytest.raises(FormatError, match="cannot read"):
        load_graph_file(tmp_path / "missing.json")
