"""The C scan into columns (formats/graph/_graph_scan.c, graph/columns.py, graph_load._linked) must give
exactly the graph the Python scan and the whole-file parse give, and decline (None) whatever the
Python scan would read with the exact parser or not at all. PSHELL_NO_EXT=1 runs the same
loader on the Python scan (the other tests of the graph cover that route)."""

from __future__ import annotations

import pytest
from google.protobuf import text_format
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from precision_shell.errors import FormatError
from precision_shell.formats.graph import columns as graph_columns
from precision_shell.model import graph_load
from precision_shell.model.graph_cache import GRAPH
from precision_shell.model.graph_load import load_op_graph
from precision_shell.model.load_cache import file_key
from precision_shell.model.op_graph import OpGraph
from tests.conftest import cache_round_trip
from tests.formats.test_graph_scan import assert_same_graph, exact_graph, scan
from tests.formats.test_graph_text import BASE_TEXT, models, mutate, write
from tests.model.test_op_graph import add_op, pb, sample_models

pytestmark = pytest.mark.skipif(not graph_columns.kernel_available(),
                                reason="the C scanner is not built or PSHELL_NO_EXT=1")


def python_graph(path) -> OpGraph:
    found = scan(path)
    assert found is not None
    return OpGraph.from_scans([(str(path), *found)])


def linked_graph(path, monkeypatch) -> OpGraph:
    """load_op_graph, asserting it went the kernel's whole way (scan and link in C)."""
    used = []
    real = graph_load._linked
    monkeypatch.setattr(graph_load, "_linked", lambda *a: used.append(real(*a)) or used[-1])
    graph, loaded = load_op_graph([path], [])
    assert loaded == 1 and used and used[0] is graph
    return graph


def test_sample_workspace_graph_goes_the_kernels_way(sample_ws, monkeypatch):
    path = next((sample_ws[0] / "precision_data/npu/debug_0/graph").glob("ge_proto_*_Build.txt"))
    got = linked_graph(path, monkeypatch)
    assert all(op.lazy[0] is None for op in got.ops.values())  # nothing decoded at load
    assert_same_graph(got, python_graph(path))
    assert_same_graph(got, exact_graph([path]))
    assert sum(g.fused_ops for g in got.graphs) > 0 and any(g.passes for g in got.graphs)
    copy = cache_round_trip(GRAPH, got, (file_key(path),))
    assert_same_graph(copy, exact_graph([path]))


def test_inputs_of_every_form_link_like_the_python_builder(tmp_path, monkeypatch):
    """Control edges, an unconnected optional input, a missing producer (data and control), an
    output written with leading zeros: the kernel's links and warnings equal the builder's."""
    model = pb.ModelDef(name="m")
    g = model.graph.add(name="g1")
    add_op(g, "x", "Data", kernel=False)
    add_op(g, "y", "Data", kernel=False)
    add_op(g, "mm", "MatMul", ["x:0", "", "y:007", "ghost:1", "x:-1", "phantom:-1", "y:12"],
           original=["a", "", "b"], passes="OnePass")
    add_op(g, "relu", "Relu", ["mm:0", "mm:-1"], passes=["P1", "", "P2"])
    path = write(tmp_path, text_format.MessageToString(model))
    got = linked_graph(path, monkeypatch)
    want = exact_graph([path])
    assert_same_graph(got, want)
    mm = got.ops["mm"]
    assert [(r.producer, r.producer_output, r.raw) for r in mm.inputs] == [
        ("x", 0, "x:0"), (None, None, ""), ("y", 7, "y:007"), (None, None, "ghost:1"), ("y", 12, "y:12")]
    assert mm.control_inputs == ["x"] and got.ops["relu"].control_inputs == ["mm"]
    assert got.warnings == want.warnings and len(got.warnings) == 2
    assert got.ops["relu"].passes == ["P1", "P2"] and mm.original_ops == ["a", "b"]
    assert [c.key for c, _, _ in got.consumers("x")] == ["mm"]


def test_two_files_go_the_op_by_op_builder_with_the_kernels_columns(tmp_path, monkeypatch):
    paths = [write(tmp_path, text_format.MessageToString(m), s.split("/")[-1]) for s, m in sample_models()]
    scanned = []
    real = graph_columns.scan_columns
    monkeypatch.setattr(graph_load, "scan_columns", lambda p: scanned.append(real(p)) or scanned[-1])
    graph, loaded = load_op_graph(paths, [])
    assert loaded == 2 and all(s is not None for s in scanned)
    assert_same_graph(graph, exact_graph(paths))
    assert len(graph.warnings) == 2 and graph.ops["loss"].kernel == "te_reducemean_x"


def test_escapes_make_the_kernel_decline_and_the_python_scan_take_the_file(tmp_path):
    path = write(tmp_path, BASE_TEXT)
    assert graph_columns.scan_columns(path) is None and scan(path) is not None
    graph, _ = load_op_graph([path], [])
    assert_same_graph(graph, exact_graph([path]))


@pytest.mark.parametrize("layout", [{"as_one_line": True}, {"indent": 3}, {"pointy_brackets": True}])
def test_other_layouts_are_declined(tmp_path, layout):
    path = write(tmp_path, text_format.MessageToString(sample_models()[0][1], **layout))
    assert graph_columns.scan_columns(path) is None


def test_bad_utf8_is_declined_and_reported_by_the_whole_file_parse(tmp_path):
    text = text_format.MessageToString(sample_models()[0][1]).encode()
    path = write(tmp_path, text.replace(b'name: "w"', b'name: "w\xff"'))
    assert graph_columns.scan_columns(path) is None
    errors: list[str] = []
    assert load_op_graph([path], errors) == (None, 0)
    line = text[:text.index(b'name: "w"')].count(b"\n") + 1
    assert errors == [f"{path}: line {line}: not valid UTF-8"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(model=models())
def test_random_models_load_like_the_whole_file(tmp_path, model):
    path = write(tmp_path, text_format.MessageToString(model, as_utf8=False))
    try:
        want = exact_graph([path])
    except FormatError:
        return
    graph, loaded = load_op_graph([path], [])
    assert loaded == 1
    assert_same_graph(graph, want)
    if graph_columns.scan_columns(path) is not None:
        assert scan(path) is not None  # the kernel never takes a file the Python scan declines


CLEAN_TEXT = text_format.MessageToString(sample_models()[0][1])  # no escapes: the kernel's own layout


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(st.tuples(st.integers(0, len(CLEAN_TEXT)), st.sampled_from(["del", "ins", "dup"]),
                                st.sampled_from(' \n{}:"\\-0123456789abexDT_'), st.integers(1, 30)),
                      min_size=1, max_size=3))
# found: an input of an op after the first taken from a missing op: the kernel's warning numbered
# it among all ops' inputs ("input 5", not "input 1")
@example(edits=[(60, "dup", " ", 24), (4204, "del", " ", 1)])
# an input (6 spaces) and a fusion attr's key (7) indented otherwise: the op's all the same for
# TextFormat; the Python scan declines such files (test_graph_scan), so must the kernel
@example(edits=[(3620, "ins", " ", 2)])
@example(edits=[(800, "ins", " ", 1)])
def test_mutated_text_is_declined_or_scanned_as_python_does(tmp_path, edits):
    """Any corruption: the kernel declines (None), or the Python scan takes the file too and
    gives the same graph (ops, summaries, warnings, each op's details or error)."""
    path = write(tmp_path, mutate(CLEAN_TEXT, edits))
    found = graph_columns.scan_columns(path)
    if found is None:
        return
    python = scan(path)
    assert python is not None
    graph, _ = load_op_graph([path], [])
    want = OpGraph.from_scans([(str(path), *python)])
    assert list(graph.ops.values()) == list(want.ops.values())
    assert (graph.graphs, graph.warnings) == (want.graphs, want.warnings)
    for key, op in want.ops.items():  # the same details, or the same error reading them
        assert _details(graph.ops[key]) == _details(op), key


def _details(op):
    try:
        return op.id, op.stream_id, op.outputs, [r.desc for r in op.inputs], dict(op.attrs)
    except FormatError as exc:
        return str(exc)


def test_start_up_makes_no_node_and_ni_makes_a_few(sample_ws, tmp_path, capsys):
    """The op index stays columns through start-up (and a cached start); showing one op makes
    that op's node and its neighbours', not one per op."""
    from precision_shell.model.session import Session
    from tests.conftest import run_cli

    ws, _ = sample_ws
    for _ in range(2):  # the first start, then from the start-up cache
        session = Session.open(ws, output=tmp_path / "out")
        graph = session.graph
        assert graph is not None and graph._map is None and graph.op_count > 30
        key = next(k for k in graph.sorted_names() if graph.ops[k].inputs)
        made = sum(node is not None for node in graph.ops._nodes)
        assert made == 1 and graph.ops._index is None  # found in the name blob, no dict of every op
        graph.consumers(key), graph.producers(key)
        assert sum(node is not None for node in graph.ops._nodes) < 10
        session.after_command()
    code, out, err = run_cli(capsys, ws, "-o", str(tmp_path / "out"), "-c", f"ni {key}")
    assert code == 0 and key in out and err == ""


def test_a_file_cut_short_under_the_scan_is_declined_not_a_crash(tmp_path):
    """The kernel reads a memory-mapped file: pages lost to a truncation raise SIGBUS, caught
    during the scan (None: the caller reads the file again by the Python route)."""
    import mmap
    import os

    model = pb.ModelDef(name="m")
    g = model.graph.add(name="g")
    for k in range(300):
        add_op(g, f"op{k}", "Relu", [f"op{k - 1}:0"] if k else [], original=[f"tf/op{k}"])
    path = write(tmp_path, text_format.MessageToString(model))
    assert path.stat().st_size > 4 * mmap.PAGESIZE
    fd = os.open(path, os.O_RDWR)
    try:
        mapped = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        assert graph_columns._kernel.scan(mapped) is not None
        os.ftruncate(fd, 100)
        assert graph_columns._kernel.scan(mapped) is None
        mapped.close()
    finally:
        os.close(fd)
    errors: list[str] = []
    assert load_op_graph([path], errors) == (None, 0) and len(errors) == 1  # the cut file, one line
