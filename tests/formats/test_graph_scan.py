"""The start-up scan of GE graph texts (formats.graph.scan) must give exactly the graph the
whole-file parse gives: the same ops, inputs, fusion facts, warnings and, read on demand, the
same details; texts it cannot vouch for go to the whole-file parse."""

from __future__ import annotations

import os

import pytest
from google.protobuf import text_format
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from precision_shell.errors import FormatError
from precision_shell.formats.graph.scan import scan_graph_text
from precision_shell.formats.graph.text import parse_graph_text
from precision_shell.model.graph_cache import GRAPH
from precision_shell.model.graph_load import load_op_graph
from precision_shell.model.load_cache import file_key
from precision_shell.model.op_graph import OpGraph
from tests.conftest import cache_round_trip
from tests.formats.test_graph_text import BASE_TEXT, models, mutate, write
from tests.model.test_op_graph import sample_models


def scan(path):
    data = path.read_bytes()
    st_ = os.stat(path)
    return scan_graph_text(path, data, (st_.st_size, st_.st_mtime_ns))


def exact_graph(paths):
    return OpGraph.from_models([(str(p), parse_graph_text(p)) for p in paths])


def scanned_graph(paths):
    scans = []
    for p in paths:
        found = scan(p)
        assert found is not None, f"{p} should be scanned"
        scans.append((str(p), *found))
    return OpGraph.from_scans(scans)


def assert_same_graph(got: OpGraph, want: OpGraph):
    assert list(got.ops) == list(want.ops)
    assert got.graphs == want.graphs and got.warnings == want.warnings
    for key, op in want.ops.items():
        mine = got.ops[key]
        assert mine == op, key  # name, type, graph, order, key, inputs, control, fusion facts
        assert (mine.id, mine.stream_id, mine.outputs) == (op.id, op.stream_id, op.outputs), key
        assert [r.desc for r in mine.inputs] == [r.desc for r in op.inputs], key
        assert dict(mine.attrs) == dict(op.attrs), key


def test_sample_workspace_graph_scans_to_the_same_graph(sample_ws):
    ws, _ = sample_ws
    path = next((ws / "precision_data/npu/debug_0/graph").glob("ge_proto_*_Build.txt"))
    got = scanned_graph([path])
    assert all(op.lazy[0] is None for op in got.ops.values())  # nothing decoded yet
    want = exact_graph([path])
    assert len(want.ops) > 30
    assert_same_graph(got, want)


def test_two_files_with_cross_graph_inputs_and_warnings(tmp_path):
    paths = []
    for source, model in sample_models():
        paths.append(write(tmp_path, text_format.MessageToString(model), source.split("/")[-1]))
    got, want = scanned_graph(paths), exact_graph(paths)
    assert_same_graph(got, want)
    assert len(got.warnings) == 2 and got.ops["loss"].kernel == "te_reducemean_x"


def test_rich_model_with_escapes_and_subgraphs(tmp_path):
    """Escaped names and a nested GraphDef inside an attr: those ops take the exact route."""
    path = write(tmp_path, BASE_TEXT)
    got, want = scanned_graph([path]), exact_graph([path])
    assert_same_graph(got, want)
    fused = got.ops["conv1/fused"]
    assert fused.original_ops == ["conv1/Conv2D", "conv1/BiasAdd\u00e9", "q\"\\'\x00\x01\ufffd\t\n"]
    assert fused.inputs[2].raw == "weights/\xe4\xb8\xad:1"


def test_details_are_read_per_op_and_the_cache_keeps_them_lazy(tmp_path):
    paths = [write(tmp_path, text_format.MessageToString(m), s.split("/")[-1]) for s, m in sample_models()]
    errors: list[str] = []
    graph, loaded = load_op_graph(paths, errors)
    assert loaded == 2 and errors == [] and graph.readers
    op = graph.ops["fc1/MatMul"]
    assert op.outputs[0].origin_name == "fc1/BiasAdd"
    assert [key for key, o in graph.ops.items() if o.lazy[0] is not None] == ["fc1/MatMul"]
    copy = cache_round_trip(GRAPH, graph, tuple(map(file_key, paths)))  # the start-up cache's copy
    assert all(o.lazy[0] is None for o in copy.ops.values())
    assert_same_graph(copy, exact_graph(paths))


def test_a_changed_file_is_an_error_not_a_wrong_op(tmp_path):
    path = write(tmp_path, text_format.MessageToString(sample_models()[0][1]))
    graph, _ = load_op_graph([path], [])
    path.write_text(path.read_text().replace("fc1/BiasAdd", "fc1/Other"))
    graph.readers[0].release()
    with pytest.raises(FormatError, match="changed since pshell loaded it"):
        graph.ops["fc1/MatMul"].outputs


def test_a_corrupt_op_body_fails_when_read_with_file_and_line(tmp_path):
    text = text_format.MessageToString(sample_models()[0][1])
    bad_at = text.index("dtype: DT_FLOAT\n")
    text = text[:bad_at] + "dtype: DT_FLOAT99\n" + text[bad_at + len("dtype: DT_FLOAT\n"):]
    path = write(tmp_path, text)
    graph, _ = load_op_graph([path], [])
    assert graph is not None and len(graph.ops) == 6  # the op index is intact
    line = text[:bad_at].count("\n") + 1
    with pytest.raises(FormatError) as exc:
        graph.ops["fc1/MatMul"].outputs
    assert str(exc.value) == f"{path}: line {line}: enum ge.proto.DataType has no value named 'DT_FLOAT99'"
    with pytest.raises(FormatError) as whole:
        parse_graph_text(path)
    assert str(whole.value) == str(exc.value)


@pytest.mark.parametrize("layout", [{"as_one_line": True}, {"indent": 3}, {"pointy_brackets": True}])
def test_other_layouts_take_the_whole_file_route(tmp_path, layout):
    model = sample_models()[0][1]
    path = write(tmp_path, text_format.MessageToString(model, **layout))
    assert scan(path) is None
    graph, loaded = load_op_graph([path], [])
    assert loaded == 1 and graph.readers == []
    assert_same_graph(graph, exact_graph([path]))


@pytest.mark.parametrize("cut", ["\n  }\n}\n", "\n}\n"])
def test_truncated_text_takes_the_whole_file_route_and_its_error(tmp_path, cut):
    text = text_format.MessageToString(sample_models()[0][1])
    path = write(tmp_path, text[:text.rindex(cut)])
    assert scan(path) is None
    errors: list[str] = []
    assert load_op_graph([path], errors) == (None, 0)
    assert len(errors) == 1 and errors[0].startswith(f"{path}: line ")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(model=models())
def test_random_models_scan_like_the_whole_file(tmp_path, model):
    path = write(tmp_path, text_format.MessageToString(model, as_utf8=False))
    found = scan(path)
    if found is not None:
        assert_same_graph(OpGraph.from_scans([(str(path), *found)]), exact_graph([path]))


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(st.tuples(st.integers(0, len(BASE_TEXT)), st.sampled_from(["del", "ins", "dup"]),
                                st.sampled_from(' \n{}:"\\-0123456789abexDT_'), st.integers(1, 30)),
                      min_size=1, max_size=3))
# found: relu's input line indented by 3 spaces (the scan lost that input and its warning), and
# relu's closing brace moved onto its last field's line (the scan took the text after it, up to
# the next "  }", for relu's body)
@example(edits=[(7442, "del", " ", 1)])
@example(edits=[(7490, "del", " ", 1)])
def test_mutated_text_scans_exactly_or_defers_to_the_whole_file(tmp_path, edits):
    """Any corruption: the scan declines (None), or gives the whole-file graph, or - when the
    whole-file parse rejects the text - reading the broken op's details raises FormatError."""
    path = write(tmp_path, mutate(BASE_TEXT, edits))
    found = scan(path)
    if found is None:
        return
    got = OpGraph.from_scans([(str(path), *found)])
    try:
        want = exact_graph([path])
    except FormatError as exc:
        with pytest.raises(FormatError) as lazy:
            for op in got.ops.values():
                op.details
        assert str(lazy.value).startswith(f"{path}: line ")
        # the same reason; the line may be nearer (an unclosed block ends with its op, not the file)
        lazy_line, lazy_reason = str(lazy.value).split(": ", 2)[1:]
        whole_line, whole_reason = str(exc).split(": ", 2)[1:]
        if lazy_reason != whole_reason:
            # a stray '}' in an op's body closes the op early for the whole-file parse, which
            # then fails further on; the op's own parse stops at that brace
            assert lazy_reason == "unexpected '}'"
            assert int(lazy_line.split()[1]) <= int(whole_line.split()[1])
        return
    assert_same_graph(got, want)


def test_details_decoded_by_a_command_are_cached_for_the_next_run(sample_ws, tmp_path, monkeypatch):
    import shutil

    from precision_shell.formats.graph.scan import OpTextReader
    from precision_shell.model import op_node
    from precision_shell.model.session import Session

    ws = tmp_path / "ws"
    shutil.copytree(sample_ws[0] / "precision_data", ws / "precision_data")
    monkeypatch.setattr(Session, "_DETAILS_STORE_MIN", 1)
    first = Session.open(ws)
    assert first.graph.readers  # the scanned route
    want = {key: (op.outputs, [r.desc for r in op.inputs], op.id) for key, op in first.graph.ops.items()}
    first.after_command()
    _wait_for_details_entry(ws)

    decoded = []
    real_op = OpTextReader.op
    monkeypatch.setattr(OpTextReader, "op", lambda self, s, e: decoded.append(s) or real_op(self, s, e))
    one = Session.open(ws)  # one op's details (ni, pt): read from the text, the table stays unread
    some = next(iter(one.graph.ops.values()))
    assert some.outputs == first.graph.ops[some.key].outputs and len(decoded) == 1
    assert sum(op.lazy[0] is not None for op in one.graph.ops.values()) == 1
    decoded.clear()
    monkeypatch.setattr(op_node, "BULK_AFTER", 0)  # the sample has fewer ops than a bulk
    second = Session.open(ws)
    got = {key: (op.outputs, [r.desc for r in op.inputs], op.id) for key, op in second.graph.ops.items()}
    assert got == want and decoded == []  # every op's details came from the cache
    matmul = next(op for op in second.graph.ops.values() if op.attrs)  # attrs: read from the text
    assert len(decoded) == 1
    assert dict(matmul.attrs) == dict(first.graph.ops[matmul.key].attrs)


def test_vc_planning_asks_the_details_cache_before_decoding_any_op(sample_ws, tmp_path, monkeypatch):
    """A cached start's `vc` plans from the details cache: no op text decoded (before, the
    first BULK_AFTER ops were decoded one by one), and the same plan as a first start's."""
    import shutil

    from precision_shell.analysis.compare.mapping import plan_golden_compare
    from precision_shell.formats.graph.scan import OpTextReader
    from precision_shell.model.session import Session

    ws = tmp_path / "ws"
    shutil.copytree(sample_ws[0] / "precision_data", ws / "precision_data")
    monkeypatch.setattr(Session, "_DETAILS_STORE_MIN", 1)
    decoded = []
    real_op = OpTextReader.op
    monkeypatch.setattr(OpTextReader, "op", lambda self, s, e: decoded.append(s) or real_op(self, s, e))
    first = Session.open(ws)
    want = plan_golden_compare(first.graph, first.dumps, first.golden)
    assert decoded            # a first start decodes the ops' text
    first.after_command()
    _wait_for_details_entry(ws)
    decoded.clear()
    again = Session.open(ws)
    got = plan_golden_compare(again.graph, again.dumps, again.golden)
    assert decoded == []
    assert [(o.op, o.type, o.golden_ops, o.packed) for o in got.ops] == [(o.op, o.type, o.golden_ops, o.packed) for o in want.ops]
    columns = ("op_pos", "io", "index", "golden_ref", "reason", "golden", "spec", "nbytes", "alias", "why")
    assert [getattr(got.table, c) for c in columns] == [getattr(want.table, c) for c in columns]
    assert any(spec != (None, None) for spec in got.table.spec)   # the descs were read


def _wait_for_details_entry(ws) -> None:
    """The op details entry the session stored after a command (written by a detached child)."""
    import time

    cache_dir = ws / "precision_data" / "temp" / "pshell" / "cache"
    for _ in range(200):
        if list(cache_dir.glob("graph_details-*.json")):
            break
        time.sleep(0.05)
    time.sleep(0.2)
