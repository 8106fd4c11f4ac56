"""The start-up cache: a second open reads the pickled graph/listings; changed inputs miss."""

from __future__ import annotations

import os
import shutil
import time

from precision_shell.model.load_cache import LoadCache
from precision_shell.model.session import Session


def _wait_for(folder, pattern, timeout=20.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = list(folder.glob(pattern))
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"no {pattern} in {folder} after {timeout} s")


def test_store_and_load_round_trip_and_key_mismatch(tmp_path):
    cache = LoadCache(tmp_path / "c")
    cache.store("x", ("a", 1), {"v": [1, 2]})
    assert cache.load("x", ("a", 1)) == {"v": [1, 2]}
    assert cache.load("x", ("a", 2)) is None
    # a damaged entry is a miss, not an error
    (entry,) = (tmp_path / "c").glob("x-*.pkl")
    entry.write_bytes(b"garbage")
    assert cache.load("x", ("a", 1)) is None


def test_background_store_writes_from_a_detached_process(tmp_path):
    cache = LoadCache(tmp_path / "c")
    cache.store("big", ("k",), list(range(1000)), background=True)
    _wait_for(tmp_path / "c", "big-*.pkl")
    for _ in range(200):  # the rename is atomic: once the name exists, the content is complete
        if cache.load("big", ("k",)) is not None:
            break
        time.sleep(0.05)
    assert cache.load("big", ("k",)) == list(range(1000))


def test_second_open_uses_the_cache_and_a_changed_graph_misses_it(sample_ws, tmp_path, monkeypatch):
    ws = tmp_path / "ws"
    shutil.copytree(sample_ws[0] / "precision_data", ws / "precision_data")
    first = Session.open(ws)
    cache_dir = ws / "precision_data" / "temp" / "pshell" / "cache"
    _wait_for(cache_dir, "graph-*.pkl")
    time.sleep(0.2)

    import precision_shell.model.graph_load as graph_load

    def no_parse(files, errors):
        raise AssertionError("graph parsed although the cache is valid")

    real_load = graph_load.load_op_graph
    monkeypatch.setattr(graph_load, "load_op_graph", no_parse)
    second = Session.open(ws)
    assert list(second.graph.ops) == list(first.graph.ops)
    op = next(iter(first.graph.ops))
    assert dict(second.graph.ops[op].attrs) == dict(first.graph.ops[op].attrs)
    assert [f.filename for f in second.dumps.files] == [f.filename for f in first.dumps.files]
    assert len(second.golden) == len(first.golden)

    graph = next((ws / "precision_data/npu/debug_0/graph").glob("*_Build.txt"))
    stat = graph.stat()
    os.utime(graph, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    parsed = []
    monkeypatch.setattr(graph_load, "load_op_graph",
                        lambda files, errors: parsed.extend(files) or real_load(files, errors))
    third = Session.open(ws)
    assert parsed == [graph] and list(third.graph.ops) == list(first.graph.ops)


def test_new_dump_file_invalidates_the_folder_listing(sample_ws, tmp_path):
    ws = tmp_path / "ws"
    shutil.copytree(sample_ws[0] / "precision_data", ws / "precision_data")
    first = Session.open(ws)
    dump = first.dumps.op_files[0].path
    shutil.copy(dump, dump.with_name(dump.name.rsplit(".", 1)[0] + ".1999999999999999"))
    second = Session.open(ws)
    assert len(second.dumps.op_files) == len(first.dumps.op_files) + 1
