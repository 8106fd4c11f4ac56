"""A first start loads the graph in a forked child while the session indexes the dumps."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import sys

import pytest

from precision_shell.model import graph_job, graph_load
from precision_shell.model.load_cache import LoadCache
from precision_shell.model.session import Session

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork is used on Linux only")


@pytest.fixture
def ws(sample_ws, tmp_path, monkeypatch):
    monkeypatch.setattr(graph_job, "FORK_ABOVE_BYTES", 0)  # the sample graph is small
    root = tmp_path / "ws"
    shutil.copytree(sample_ws[0] / "precision_data", root / "precision_data")
    shutil.rmtree(root / "precision_data" / "temp", ignore_errors=True)  # other tests' caches
    return root


def _graph_file(root):
    return next((root / "precision_data/npu/debug_0/graph").glob("ge_proto_*_Build.txt"))


def test_child_loads_the_graph_and_writes_the_cache(ws, monkeypatch):
    parent = os.getpid()
    calls = []
    real = graph_load.load_op_graph
    monkeypatch.setattr(graph_load, "load_op_graph",
                        lambda files, errors: calls.append(os.getpid()) or real(files, errors))
    forked = Session.open(ws)
    assert calls == []  # not loaded in this process: the child did it
    cache = list((ws / "precision_data/temp/pshell/cache").glob("graph-*.json"))
    assert len(cache) == 1  # written by the child before it exited
    errors: list[str] = []
    want, _ = real([_graph_file(ws)], errors)
    assert list(forked.graph.ops) == list(want.ops) and len(want.ops) > 30
    op = next(o for o in want.ops.values() if o.outputs)
    assert forked.graph.ops[op.key].outputs == op.outputs  # details read from the file
    assert forked.graph.graphs == want.graphs and os.getpid() == parent


def test_a_broken_graph_reports_the_childs_error(ws):
    graph = _graph_file(ws)
    graph.write_text(graph.read_text()[:5000])
    session = Session.open(ws)
    assert session.graph is None
    assert len(session.load_errors) == 1 and session.load_errors[0].startswith(f"{graph}: line ")
    assert not list((ws / "precision_data/temp/pshell/cache").glob("graph-*.json"))
    assert session.dumps.op_file_count > 0  # the rest of the workspace is loaded


def test_a_crashing_child_falls_back_to_loading_here(ws, monkeypatch):
    parent = os.getpid()
    real = graph_load.load_op_graph

    def crash_in_child(files, errors):
        if os.getpid() != parent:
            raise RuntimeError("boom")
        return real(files, errors)

    monkeypatch.setattr(graph_load, "load_op_graph", crash_in_child)
    session = Session.open(ws)
    assert session.graph is not None and session.load_errors == []
    assert len(session.graph.ops) == len(real([_graph_file(ws)], [])[0].ops)


def test_a_planted_pickle_is_ignored_and_the_child_rewrites_the_entry(ws, tmp_path):
    from tests.model.test_load_cache import _Touch  # a pickle whose loading creates a file

    Session.open(ws)  # writes the entry, so that its exact name is known
    (entry,) = (ws / "precision_data/temp/pshell/cache").glob("graph-*.json")
    marker = tmp_path / "marker"
    planted = pickle.dumps(_Touch(marker))
    entry.write_bytes(planted)
    session = Session.open(ws)
    assert not marker.exists() and session.load_errors == []
    assert session.load_warnings == [f"cache entry ignored: {entry}: not UTF-8"]
    assert entry.read_bytes() != planted and json.loads(entry.read_bytes().partition(b"\n")[0])["kind"] == "graph"  # by the child
    want, _ = graph_load.load_op_graph([_graph_file(ws)], [])
    assert list(session.graph.ops.values()) == list(want.ops.values())
    assert Session.open(ws).load_warnings == []


def test_a_bad_entry_from_the_child_is_reported_and_the_graph_loaded_here(ws, monkeypatch):
    parent = os.getpid()
    real_entry = LoadCache.entry

    def damaged_in_child(kind, key, value):
        data = real_entry(kind, key, value)
        return data[:len(data) // 2] if os.getpid() != parent else data

    monkeypatch.setattr(LoadCache, "entry", staticmethod(damaged_in_child))
    session = Session.open(ws)
    (warning,) = session.load_warnings
    assert warning == "cache entry ignored: graph from the loading process: blobs: sizes do not add up (truncated?)"
    assert session.graph is not None and session.load_errors == []
    assert len(session.graph.ops) == len(graph_load.load_op_graph([_graph_file(ws)], [])[0].ops)
