"""One tensor-name grammar (issue 17): ``OP:N``, ``OP:inN``, the long forms, ``golden:OP:N``;
the one printing function; did-you-mean for op names, kinds and indices; slice errors with a caret."""

from __future__ import annotations

import numpy as np
import pytest

from precision_shell.errors import CommandError
from precision_shell.formats.golden_npy import load_npy
from precision_shell.model.framework_session import FrameworkSession
from precision_shell.model.session import Session
from precision_shell.model.suggest import close_names
from precision_shell.model.tensor_ref import golden_name_of, name_of, op_of, parse_tensor_ref, tensor_name
from precision_shell.model.tensor_resolve import resolve_tensor

from framework_dumps import SAMPLE


@pytest.mark.parametrize("text, kind, io, index, leaf", [
    ("a/b:3", "npu", "output", 3, ""), ("a/b:in2", "npu", "input", 2, ""),
    ("a/b:output:3", "npu", "output", 3, ""), ("a/b:input:2", "npu", "input", 2, ""),
    ("golden:a_b:1", "golden", "output", 1, ""), ("golden:a/b", "golden", "output", 0, ""),
    ("golden:E.0.forward:in1", "golden", "input", 1, ""),
    ("E.0.forward:in1.0", "npu", "input", 1, "1.0"),
    ("E.0.forward:parameters:weight", "npu", "parameters", 0, "weight"),
])
def test_every_form_parses_to_one_reference(text, kind, io, index, leaf):
    ref = parse_tensor_ref(text + "[0, :2]")
    assert (ref.kind, ref.io, ref.index, ref.leaf, ref.slice_text) == (kind, io, index, leaf, "[0, :2]")
    assert ref.name == text.split(":")[1 if kind == "golden" else 0]


@pytest.mark.parametrize("op, io, index, golden, printed", [
    ("fc1/MatMul", "output", 0, False, "fc1/MatMul:0"), ("fc1/MatMul", "input", 2, False, "fc1/MatMul:in2"),
    ("fc1_BiasAdd", "output", 1, True, "golden:fc1_BiasAdd:1"),
    ("E.0.forward", "input", "1.0", True, "golden:E.0.forward:in1.0"),
])
def test_the_printed_name_parses_back_to_the_same_tensor(op, io, index, golden, printed):
    assert tensor_name(op, io, index, golden=golden) == printed
    ref = parse_tensor_ref(printed)
    assert (ref.name, ref.io, ref.leaf or ref.index, ref.kind) == (op, io, index, "golden" if golden else "npu")
    assert ref.text == printed


def test_long_names_kept_by_compare_rows_print_in_the_short_form():
    assert name_of("ln/LayerNorm:output:2") == "ln/LayerNorm:2"
    assert name_of("ln/LayerNorm:input:0") == "ln/LayerNorm:in0"
    assert name_of("not a tensor") == "not a tensor"
    assert golden_name_of("ln/add_1:0") == "golden:ln_add_1:0"        # the .npy file's own name
    assert golden_name_of("fc1/MatMul:output:1") == "fc1/MatMul:1"   # vc --against: another NPU run
    assert golden_name_of(None) == "-"
    assert op_of("fc1/MatMul:in1") == op_of("fc1/MatMul:output:0") == op_of("fc1/MatMul") == "fc1/MatMul"


@pytest.mark.parametrize("text, meant", [("ln/LayerNorm:outptu:0", "'output' (ln/LayerNorm:0)"),
                                         ("ln/LayerNorm:inptu:1", "'input' (ln/LayerNorm:in1)"),
                                         ("ln/LayerNorm:out0", "ln/LayerNorm:0 (output 0)")])
def test_a_mistyped_kind_gets_the_kind_meant(text, meant):
    with pytest.raises(CommandError, match="did you mean") as info:
        parse_tensor_ref(text)
    assert meant in str(info.value)


@pytest.mark.parametrize("text, column, reason", [
    ("X:0[0,:8", 8, "unclosed '['"), ("X:0[0, :a]", 7, "bad slice ':a'"),
    ("X:0[0,,1]", 6, "empty index"), ("X:0[0]]", 6, "']' without its '['"), ("X:0[0]x", 6, "nothing may follow"),
])
def test_a_slice_error_is_one_message_with_a_caret_under_its_column(text, column, reason):
    with pytest.raises(CommandError) as info:
        parse_tensor_ref(text)
    first, shown, caret = str(info.value).split("\n")
    assert reason in first and f"(column {column + 1})" in first
    assert shown == f"  {text}" and caret == "  " + " " * column + "^"


def test_close_names_match_the_last_scope_component_and_scale():
    names = [f"block{i}/dense{i}/MatMul" for i in range(20000)] + ["ln1/add_1/LayerNorm"]
    assert close_names("LayerNrom", names) == ["ln1/add_1/LayerNorm"]
    assert close_names("ln1/add_1/LayerNrom", names) == ["ln1/add_1/LayerNorm"]
    assert close_names("zzzz", names) == []


@pytest.fixture(scope="module")
def graph_session(sample_ws):
    root, manifest = sample_ws
    return Session.open(root), manifest


def test_graph_names_resolve_to_the_dumped_values(graph_session):
    session, manifest = graph_session
    op = manifest["lossy"]["op"]
    short, long = resolve_tensor(session, f"{op}:0[1]"), resolve_tensor(session, f"{op}:output:0[1]")
    assert short.label == long.label == f"{op}:0" and short.op == op
    np.testing.assert_array_equal(short.read(), long.read())
    inp = resolve_tensor(session, f"{op}:in1")
    assert inp.label == f"{op}:in1" and inp.read().shape == inp.logical_shape


def test_golden_names_are_the_npy_files_own_and_the_framework_name_is_accepted(graph_session):
    session, manifest = graph_session
    npy = sorted(session.golden.folder.rglob("*.npy"))[0]
    escaped, index = npy.name.split(".")[0], int(npy.name.split(".")[1])
    found = resolve_tensor(session, f"golden:{escaped}:{index}")
    assert found.label == f"golden:{escaped}:{index}"
    np.testing.assert_array_equal(found.read(), load_npy(found.path))


def test_wrong_op_index_and_golden_name_say_what_exists(graph_session):
    session, manifest = graph_session
    op = manifest["lossy"]["op"]
    outputs = len(session.graph.ops[op].outputs)
    with pytest.raises(CommandError) as info:
        resolve_tensor(session, f"{op}:{outputs + 4}")
    assert f"has {outputs} output" in str(info.value)
    assert f"valid: {op}:0" + (f" .. {op}:{outputs - 1}" if outputs > 1 else "") in str(info.value)
    typo = op[:-2] + op[-1] + op[-2]          # two letters swapped
    with pytest.raises(CommandError, match=f"did you mean {op}"):
        resolve_tensor(session, f"{typo}:0")
    with pytest.raises(CommandError, match="golden .npy dumps hold outputs only"):
        resolve_tensor(session, "golden:x:in0")


@pytest.fixture(scope="module")
def fw():
    return FrameworkSession.open(SAMPLE / "target_bf16", golden=SAMPLE / "golden_fp32")


def test_framework_names_resolve_on_both_sides(fw):
    entry = "Functional.softmax.0.forward"
    for text, side, leaf in ((f"{entry}:0", fw.run, "output:0"), (f"{entry}:in0", fw.run, "input:0"),
                             (f"golden:{entry}:0", fw.golden_run(), "output:0")):
        found = resolve_tensor(fw, text)
        assert found.label == text
        np.testing.assert_array_equal(found.read(), side.load(f"{entry}:{leaf}"))
    grad = "Module.head.Linear.parameters_grad.0:weight"
    assert resolve_tensor(fw, grad + "[0]").read().shape == fw.run.load(grad)[0].shape


def test_framework_wrong_names_get_suggestions_and_the_valid_tensors(fw):
    with pytest.raises(CommandError, match="did you mean Functional.softmax.0.forward"):
        resolve_tensor(fw, "Functional.sofmax.0.forward:0")
    # a mistyped part of a name (what `ni` takes): the entries with that part
    with pytest.raises(CommandError, match="did you mean Functional.softmax.0.forward or "
                                           "Functional.softmax.0.backward\\?"):
        fw.run.op("softmx")
    with pytest.raises(CommandError, match=r"valid: Functional.softmax.0.forward:0\)"):
        resolve_tensor(fw, "Functional.softmax.0.forward:5")


def test_ni_li_lo_take_the_names_tables_print(graph_session):
    from precision_shell.commands.inspect_cmd import op_argument

    session, manifest = graph_session
    op = manifest["lossy"]["op"]
    golden = next(name for name in session.graph.ops[op].golden_names())
    for text in (op, f"{op}:0", f"{op}:in1", f"{op}:output:0[0, :2]", f"golden:{golden.replace('/', '_')}:0",
                 f"golden:{golden}:0"):
        assert op_argument(session, text).key == op, text
    with pytest.raises(CommandError, match="no NPU op is compared with golden:nothing:0"):
        op_argument(session, "golden:nothing:0")
