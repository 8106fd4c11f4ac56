"""The runtime .proto loader must build the same wire format protoc would."""

import pytest
from google.protobuf import text_format

from precision_shell.formats.protoload import ProtoSyntaxError, dump_data_pb, ge_ir_pb, parse_proto


def test_dump_data_round_trip_and_field_numbers():
    pb = dump_data_pb()
    msg = pb.DumpData(op_name="a/b", version="2.0", dump_time=7)
    out = msg.output.add(data_type=pb.OutputDataType.Value("DT_BF16"), format=29, size=32)
    out.shape.dim.extend([1, 2, 16, 16])
    out.original_op.name = "x/y"
    raw = msg.SerializeToString()
    # field 6 (op_name) as a length-delimited string: tag byte 0x32
    assert b"\x32\x03a/b" in raw
    back = pb.DumpData.FromString(raw)
    assert back.output[0].original_op.name == "x/y"
    assert list(back.output[0].shape.dim) == [1, 2, 16, 16]
    assert pb.OutputDataType.Name(27) == "DT_BF16"


def test_ge_ir_maps_oneofs_and_unknown_blocks():
    pb = ge_ir_pb()
    text = '''graph { name: "g" op { name: "x" type: "Add" input: "a:0" input: "c:-1"
      attr { key: "pass_name" value { s: "P" } }
      output_desc { dtype: DT_BF16 attr_groups { future_group { x: 1 } } } } }'''
    model = text_format.Parse(text, pb.ModelDef(), allow_unknown_field=True)
    op = model.graph[0].op[0]
    assert op.attr["pass_name"].WhichOneof("value") == "s"
    assert op.output_desc[0].dtype == pb.DataType.Value("DT_BF16") == 27
    assert list(op.input) == ["a:0", "c:-1"]


def test_loader_rejects_unknown_types():
    with pytest.raises(ProtoSyntaxError):
        parse_proto('syntax = "proto3"; package p; message A { Missing m = 1; }', "x.proto")


def test_dump_data_enums_read_from_the_text_equal_protobufs():
    """formats/proto_enums reads the enums without protobuf: the same names and numbers as the
    enum wrappers protobuf builds from the same file, for every enum of every shipped .proto."""
    from importlib import resources

    from precision_shell.formats import protoload
    from precision_shell.formats.proto_enums import dump_data_enums, read_enums

    assert dump_data_enums()["OutputDataType"]["DT_FLOAT16"] == 2
    for filename in ("dump_data.proto", "ge_ir.proto"):
        text = resources.files(protoload.__package__).joinpath("protos", filename).read_text("utf-8")
        fdp = protoload.parse_proto(text, filename)
        expected, messages = {}, list(fdp.message_type)
        for e in list(fdp.enum_type) + [e for m in _nested(messages) for e in m.enum_type]:
            expected[e.name] = {v.name: v.number for v in e.value}
        assert read_enums(text) == expected, filename
    pb = protoload.dump_data_pb()
    for name in ("OutputDataType", "OutputFormat", "BufferType"):
        assert dump_data_enums()[name] == dict(getattr(pb, name).items())


def _nested(messages):
    for m in messages:
        yield m
        yield from _nested(m.nested_type)
