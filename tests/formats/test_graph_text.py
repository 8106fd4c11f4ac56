"""parse_graph_text (fast) must give exactly the message text_format gives, and fail where it fails."""

from __future__ import annotations

import math
import re

import pytest
from google.protobuf import text_format
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from precision_shell.errors import FormatError
from precision_shell.formats.graph import text as graph_text
from precision_shell.formats.graph.text import parse_graph_text, parse_graph_text_reference
from precision_shell.formats.protoload import ge_ir_pb

pb = ge_ir_pb()
DT = pb.DataType.Value


def _desc(desc, name, dtype, shape, layout, origin_shape=None, origin_name=None, origin_index=None):
    desc.name, desc.dtype, desc.layout = name, DT(dtype), layout
    desc.shape.dim.extend(shape)
    desc.attr["origin_format"].s = b"NCHW"
    if origin_shape is not None:
        desc.attr["origin_shape"].list.i.extend(origin_shape)
        desc.attr["origin_shape"].list.val_type = 2
    if origin_name is not None:
        desc.attr["_datadump_origin_name"].s = origin_name.encode()
        desc.attr["_datadump_origin_output_index"].i = origin_index or 0
    desc.has_out_attr, desc.size, desc.real_dim_cnt = True, 4096, len(shape)


def rich_model():
    """A ModelDef using every field kind and value form GE prints (plus a few it rarely does)."""
    model = pb.ModelDef(name="ge_default_1", version=4294967295, custom_version="c1")
    model.attr["model_attr"].i = -(2 ** 63)
    model.attr_groups.SetInParent()
    graph = model.graph.add(name="ge_default_20240125_1")
    graph.input.append("data_1:0")
    graph.output.append("conv1/fused:0")
    graph.attr["_session_graph_id"].s = b"0_1"
    data = graph.op.add(name="data_1", type="Data", id=0, stream_id=0)
    _desc(data.output_desc.add(), "y", "DT_FLOAT16", [1, 1, 8, 8, 16], "NC1HWC0", [1, 3, 8, 8],
          "input_1", 0)
    fused = graph.op.add(name="conv1/fused", type="Conv2D", id=1, stream_id=-1)
    fused.input.extend(["data_1:0", "", "weights/\xe4\xb8\xad:1", "data_1:-1"])
    fused.attr["_datadump_original_op_names"].list.s.extend(
        [b"conv1/Conv2D", "conv1/BiasAdd\u00e9".encode(), b"q\"\\'\x00\x01\xff\t\n"])
    fused.attr["_datadump_original_op_names"].list.val_type = 1
    fused.attr["pass_name"].list.s.append(b"ConvBiasAddFusionPass")
    fused.attr["conv1/fused_kernelname"].s = b"te_conv2d_1a2b"
    fused.attr["_ge_attr_op_kernel_lib_name"].s = b"AIcoreEngine"
    fused.attr["alpha"].f = 0.1
    fused.attr["neg_inf"].f = float("-inf")
    fused.attr["tiny"].f = 1e-40
    fused.attr["flag"].b = True
    fused.attr["empty_list"].list.val_type = 1
    fused.attr["dtypes"].list.dt.extend([DT("DT_BF16"), DT("DT_FLOAT8_E4M3FN")])
    fused.attr["flags"].list.b.extend([True, False])
    fused.attr["floats"].list.f.extend([0.5, -2.25, float("inf")])
    fused.attr["blob"].bt = bytes(range(256))
    fused.attr["expr"].expression = b"s0 * 2"
    fused.attr["dt"].dt = DT("DT_BF16")
    fused.attr["ranges"].list_list_int.list_list_i.add().list_i.extend([1, -1])
    fused.attr["ranges"].list_list_int.list_list_i.add()
    fused.attr["lf"].list_list_float.list_list_f.add().list_f.extend([1.5])
    fused.attr["func"].func.name = "f"
    fused.attr["func"].func.attr["k"].s = b"v"
    fused.attr["td"].td.dtype = DT("DT_INT64")
    fused.attr["tensor"].t.desc.name = "const"
    fused.attr["tensor"].t.data = b"\x00\x01\x02\xfe"
    sub = fused.attr["subgraph"].g
    sub.name = "sub"
    sub.op.add(name="inner", type="Relu")
    fused.attr["tds"].list.td.add(name="a", dtype=DT("DT_UINT1"))
    fused.attr["nas"].list.na.add(name="na")
    fused.attr["ints"].list.i.extend([0, -1, 2 ** 63 - 1, -(2 ** 63)])
    fused.input_name.extend(["x", "filter"])
    fused.src_name.append("data_1")
    fused.src_index.append(0)
    fused.dst_name.append("relu")
    fused.dst_index.append(-1)
    fused.input_i.extend([0, 1024])
    fused.output_i.append(2048)
    fused.is_input_const.extend([False, True])
    fused.workspace.append(0)
    fused.workspace_bytes.append(512)
    fused.subgraph_name.append("sub")
    fused.attr_groups.SetInParent()
    _desc(fused.input_desc.add(), "x", "DT_FLOAT16", [1, 1, 8, 8, 16], "NC1HWC0", [1, 3, 8, 8])
    fused.input_desc.add()  # the unconnected optional input: an empty descriptor
    _desc(fused.input_desc.add(), "filter", "DT_BF16", [9, 1, 16, 16], "FRACTAL_Z", [16, 3, 3, 3])
    _desc(fused.output_desc.add(), "y", "DT_FLOAT", [1, 1, 8, 8, 16], "NC1HWC0", [1, 16, 8, 8],
          "conv1/BiasAdd", 0)
    fused.output_desc[0].reuse_input, fused.output_desc[0].device_type = True, "NPU"
    fused.output_desc[0].data_offset, fused.output_desc[0].cmps_tab = -7, "tab"
    second = model.graph.add(name="ge_default_20240125_2")
    relu = second.op.add(name="relu", type="Relu", id=0)
    relu.input.append("missing_op:0")
    relu.has_out_attr = True
    return model


def write(tmp_path, text, name="ge_proto_00000001_Build.txt"):
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path


def outcome(path):
    """('ok', message) or ('error', FormatError text) for both parsers."""
    results = []
    for parse in (parse_graph_text, parse_graph_text_reference):
        try:
            results.append(("ok", parse(path)))
        except FormatError as exc:
            results.append(("error", str(exc)))
    return results


def assert_same(path):
    (fast_kind, fast), (ref_kind, ref) = outcome(path)
    assert fast_kind == ref_kind, (fast, ref)
    if fast_kind == "ok":
        assert fast == ref
    return fast


# ---- equality on generated graphs ----------------------------------------------------------------
@pytest.mark.parametrize("options", [
    {"as_utf8": False},  # GE's printer: one field per line, 2-space indent, octal escapes
    {"as_utf8": True},
    {"as_one_line": True},
    {"use_short_repeated_primitives": True, "pointy_brackets": True},
    {"indent": 3, "force_colon": True},
])
def test_fast_parser_equals_reference_and_source(tmp_path, options):
    model = rich_model()
    path = write(tmp_path, text_format.MessageToString(model, **options))
    fast = assert_same(path)
    assert fast == model
    # spot-check decoded values, not just equality
    op = fast.graph[0].op[1]
    assert op.attr["_datadump_original_op_names"].list.s[2] == b"q\"\\'\x00\x01\xff\t\n"
    assert op.input[2] == "weights/\xe4\xb8\xad:1"
    assert op.attr["blob"].bt == bytes(range(256))
    assert op.attr["ints"].list.i[3] == -(2 ** 63)
    assert op.stream_id == -1 and fast.version == 4294967295
    assert op.input_desc[2].dtype == DT("DT_BF16")
    assert math.isinf(op.attr["neg_inf"].f) and op.attr["neg_inf"].f < 0
    assert fast.HasField("attr_groups") and op.HasField("attr_groups")
    assert len(op.attr["empty_list"].list.s) == 0 and op.attr["empty_list"].WhichOneof("value") == "list"


def test_layout_without_indentation_and_repeated_blocks(tmp_path):
    """Block memoisation keys on indentation: flat text and repeats must still parse right."""
    model = rich_model()
    for i in range(3):  # identical op blocks (except the name) in two graphs
        model.graph[1].op.add().CopyFrom(model.graph[0].op[1])
        model.graph[1].op[-1].name = f"copy_{i}"
    text = text_format.MessageToString(model, as_utf8=False)
    for variant in (text, "\n".join(line.strip() for line in text.splitlines()),
                    text.replace("\n", "\r\n")):
        assert assert_same(write(tmp_path, variant)) == model


def test_small_chunks_and_fallback_mid_file(tmp_path, monkeypatch):
    """Lines are processed in chunks; a multi-statement line switches to the statement path."""
    model = rich_model()
    text = text_format.MessageToString(model, as_utf8=False)
    monkeypatch.setattr(graph_text, "_CHUNK", 97)
    assert parse_graph_text(write(tmp_path, text)) == model
    lines = text.splitlines()
    middle = len(lines) // 2
    lines[middle] = lines[middle] + "  # comment"
    lines.insert(middle, "  ")
    assert parse_graph_text(write(tmp_path, "\n".join(lines))) == model
    joined = text.replace('key: "flag"\n      value {\n        b: true', 'key: "flag" value { b: true')
    assert joined != text
    assert assert_same(write(tmp_path, joined)) == model


HAND_WRITTEN = r"""
# GE never writes this file; it exercises the TextFormat grammar.
name: 'm' "odel" ;
graph <
  name: "g",
  op {
    name: "a\101\x42\x4\u00e9\n\"q\""   # octal, hex (1 and 2 digits), \u, escapes
    type:
      "Add"
    id: 0x1F stream_id: -017
    input: "x:0" input: ""
    attr { key: "f" value { f: 1.5f } }
    attr { key: "g" value: { f: -inf } }
    attr { key: "h" value { f: 1e39 } }
    attr { key: "i" value { list { i: [1, -2, 0x3] b: [t, False, 1] val_type: 2 } } }
    attr { key: "j" value < list < s: ["x", 'y'] > > }
    attr { key: "k" value { s: "a" 'b'
                            "c" } }
    output_desc { dtype: 27 shape { dim: [] } layout: "ND" }
    output_desc { dtype: DT_BF16, shape { dim: [4, 5] } }
    unknown_scalar: 42
    unknown_string: "\377 x"
    unknown_list: [1, "two", three]
    unknown_block { deeper { deepest: 1 other: [] } name: "ignored" }
    123: 4
  }
  op { name: "b" is_input_const: [true] }
>
"""


def test_hand_written_grammar(tmp_path):
    model = assert_same(write(tmp_path, HAND_WRITTEN))
    assert model.name == "model"
    op = model.graph[0].op[0]
    assert op.name == 'aAB\x04\u00e9\n"q"'
    assert (op.id, op.stream_id) == (31, -15)
    assert op.attr["f"].f == 1.5 and math.isinf(op.attr["h"].f)
    assert list(op.attr["i"].list.i) == [1, -2, 3] and list(op.attr["i"].list.b) == [True, False, True]
    assert list(op.attr["j"].list.s) == [b"x", b"y"] and op.attr["k"].s == b"abc"
    assert [d.dtype for d in op.output_desc] == [DT("DT_BF16")] * 2
    assert list(op.output_desc[1].shape.dim) == [4, 5]
    assert list(model.graph[0].op[1].is_input_const) == [True]


TRICKY = [  # each either parses to the reference's message or fails in both parsers
    'graph { attr { key: "a" value { f: 0 val_type: VT_LIST_STRI.1 } } }',  # tokens split at '.'
    'graph { attr { key: "a" value { list { } list { } } } }',  # singular message twice
    'graph { op { id: 0 id: 5 } }', 'graph { op { id: 5 id: 0 } }',  # proto3 duplicate rule
    'graph { op { id: 017 } }', 'graph { op { id: 08 } }', 'graph { op { id: 1_000 } }',
    'graph { op { attr { key: "f" value { f: 01.5 } } } }', 'graph { 1.5: 4 foo: a+b }',
    'graph { name: "\\377" }', 'graph { attr { key: "a" value { s: "\\377" } } }',
    'graph { name: "\\u00e9\\q" }', 'graph { name: "g" } ,', ', graph { }', 'graph { name: "g";; }',
    'graph { op { output_desc { dtype: 1000 } } }', 'graph { op { output_desc { shape { dim: [1,] } } } }',
    'graph { foo: 1.2.3 }', 'graph { op { id:5stream_id: 6 } }', 'graph { op { id: - 5 } }',
    'graph { attr { key: "a" } attr { value { i: 1 } } }', 'graph\n{ name:\n "g" }',
    'name: "\\303"\n"\\251"\n',  # one UTF-8 character split over two continued literals
    'graph {\n id: 5\n, stream_id: 6 }', 'name: "a"\n# c\n\n  "b" \'c\'\n',
]


def test_continued_literal_completes_a_character(tmp_path):
    """Line mode applies 'name: "\\303"' first; the next line continues it: re-read as statements."""
    assert assert_same(write(tmp_path, TRICKY[-3])).name == "\u00e9"


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("text", TRICKY)
def test_tricky_texts_agree_with_reference(tmp_path, text):
    assert_same(write(tmp_path, text))


# ---- property tests --------------------------------------------------------------------------------
names = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
raw_bytes = st.binary(max_size=12)
int64s = st.integers(-(2 ** 63), 2 ** 63 - 1)
floats32 = st.floats(width=32, allow_nan=False)


@st.composite
def models(draw):
    model = pb.ModelDef(name=draw(names), version=draw(st.integers(0, 2 ** 32 - 1)))
    for g in range(draw(st.integers(1, 2))):
        graph = model.graph.add(name=f"g{g}")
        for _ in range(draw(st.integers(0, 3))):
            op = graph.op.add(name=draw(names), type=draw(names), id=draw(int64s))
            op.input.extend(draw(st.lists(names, max_size=3)))
            for key in draw(st.lists(names, max_size=3, unique=True)):
                which = draw(st.sampled_from(["s", "i", "f", "b", "list_s", "list_i", "list_f"]))
                value = op.attr[key]
                if which == "s":
                    value.s = draw(raw_bytes)
                elif which == "i":
                    value.i = draw(int64s)
                elif which == "f":
                    value.f = draw(floats32)
                elif which == "b":
                    value.b = draw(st.booleans())
                elif which == "list_s":
                    value.list.s.extend(draw(st.lists(raw_bytes, max_size=3)))
                elif which == "list_i":
                    value.list.i.extend(draw(st.lists(int64s, max_size=3)))
                else:
                    value.list.f.extend(draw(st.lists(floats32, max_size=3)))
            for _ in range(draw(st.integers(0, 2))):
                desc = op.output_desc.add(dtype=draw(st.integers(0, 40)), layout=draw(names))
                desc.shape.dim.extend(draw(st.lists(int64s, max_size=4)))
    return model


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(model=models(), one_line=st.booleans(), utf8=st.booleans(), short=st.booleans())
def test_random_models_round_trip(tmp_path, model, one_line, utf8, short):
    text = text_format.MessageToString(model, as_one_line=one_line, as_utf8=utf8,
                                       use_short_repeated_primitives=short)
    assert assert_same(write(tmp_path, text)) == model


BASE_TEXT = text_format.MessageToString(rich_model(), as_utf8=False)
MUTATION_ALPHABET = ' \n\t{}<>[]:;,#"\'\\-+.0123456789abefxnDT_'


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # text_format on "\\q" escapes
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(st.tuples(st.integers(0, len(BASE_TEXT)), st.sampled_from(["del", "ins", "dup"]),
                                st.sampled_from(MUTATION_ALPHABET), st.integers(1, 30)), min_size=1, max_size=3))
def test_mutated_text_fails_or_matches_reference(tmp_path, edits):
    """Differential: any corruption is either rejected by both parsers or read identically."""
    assert_same(write(tmp_path, mutate(BASE_TEXT, edits)))


def mutate(text: str, edits) -> str:
    """``text`` after (position, "del"|"ins"|"dup", char, length) edits."""
    for pos, how, char, length in edits:
        pos = min(pos, len(text))
        if how == "del":
            text = text[:pos] + text[pos + 1:]
        elif how == "ins":
            text = text[:pos] + char + text[pos:]
        else:
            text = text[:pos] + text[pos:pos + length] + text[pos:]
    return text


# ---- errors ----------------------------------------------------------------------------------------
ERRORS = [  # (text, line the error is on, words expected in the reason)
    ('graph {\n  name: "g"\n  op { name "x" }\n}\n', 3, "expected ':'"),
    ('graph {\n  op {\n    id: "seven"\n  }\n}\n', 3, "integer"),
    ('graph {\n  name: 7\n}\n', 2, "string"),
    ('graph {\n  op {\n    output_desc { dtype: DT_FLOAT99 }\n  }\n}\n', 3, "DT_FLOAT99"),
    ('graph {\n  op {\n    name: "a"\n    name: "b"\n  }\n}\n', 4, "more than once"),
    ('graph {\n  attr { key: "k" value {\n    s: "x"\n    i: 1 } }\n}\n', 4, "oneof"),
    ('version: 4294967296\n', 1, "out of range"),
    ('graph {\n  op: "x"\n}\n', 2, "message"),
    ('graph {\n  name: "g"\n}\n}\n', 4, "unexpected '}'"),
    ('graph <\n  name: "g"\n}\n', 3, "'>'"),
    ('graph {\n  op { attr { key: "k" value { b: maybe } } }\n}\n', 2, "true or false"),
    ('graph {\n  name: "unterminated\n}\n', 2, "not closed"),
]


@pytest.mark.parametrize("text,line,words", ERRORS)
def test_errors_name_file_and_line(tmp_path, text, line, words):
    path = write(tmp_path, text)
    with pytest.raises(FormatError) as fast:
        parse_graph_text(path)
    with pytest.raises(FormatError) as ref:
        parse_graph_text_reference(path)
    message = str(fast.value)
    assert message.startswith(f"{path}: line {line}: ") and words in message
    assert str(ref.value).startswith(f"{path}: line {line}:")  # the reference agrees on the line


@pytest.mark.parametrize("data,reason", [
    (b"", "empty"), (b"  \n\n", "empty"), (b'graph {\n  name: "g"\n', "not closed"),
    (b'graph {\n  name: "\xff\xfe"\n}\n', "UTF-8"), (b'graph {\n  op {\n    name: "x"', "not closed"),
])
def test_truncated_empty_and_binary_files(tmp_path, data, reason):
    path = write(tmp_path, data)
    with pytest.raises(FormatError, match=re.escape(str(path)) + ".*" + reason):
        parse_graph_text(path)
    with pytest.raises(FormatError):
        parse_graph_text_reference(path)


def test_missing_file_is_a_format_error(tmp_path):
    with pytest.raises(FormatError, match="cannot read"):
        parse_graph_text(tmp_path / "nope.txt")
