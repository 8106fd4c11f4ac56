"""The start-up cache: plain data read back exactly; planted, damaged or foreign entries are
ignored with one warning naming the file and rebuilt; nothing in a cache file ever runs."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from precision_shell.model import folder_listing, graph_load, load_cache, op_node
from precision_shell.model.cache_codec import CacheKind, ints
from precision_shell.model.graph_cache import GRAPH, GRAPH_DETAILS
from precision_shell.model.load_cache import LoadCache, file_key
from precision_shell.model.session import Session
from tests.conftest import cache_round_trip, run_cli
from tests.formats.test_graph_scan import assert_same_graph, exact_graph

NUMBERS = CacheKind("numbers", list, lambda data, key: ints(data, "numbers"))


def _wait_for(folder, pattern, timeout=20.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = list(folder.glob(pattern))
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"no {pattern} in {folder} after {timeout} s")


def _wait_rewritten(path: Path, planted: bytes, timeout=20.0) -> None:
    """Until a background store replaced the planted bytes (renamed into place: complete)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if path.exists() and path.read_bytes() != planted:
            return
        time.sleep(0.05)
    raise AssertionError(f"{path} not rewritten after {timeout} s")


def test_store_and_load_round_trip_and_key_mismatch(tmp_path):
    cache = LoadCache(tmp_path / "c")
    cache.store(NUMBERS, ("a", 1), [1, 2])
    assert cache.load(NUMBERS, ("a", 1)) == [1, 2]
    assert cache.load(NUMBERS, ("a", 2)) is None  # another key: another file, none there
    assert cache.warnings == []
    (entry,) = (tmp_path / "c").glob("numbers-*.json")
    assert json.loads(entry.read_text())["value"] == [1, 2]  # plain JSON


@pytest.mark.parametrize("damage, reason", [
    (lambda e: b"\xff\xfe" + e, "not UTF-8"),
    (lambda e: e[:len(e) // 2], "not JSON"),
    (lambda e: e.replace(b'"format":2', b'"format":1'), "format 1, expected 2"),
    (lambda e: e.replace(b'"pshell":["', b'"pshell":["9'), "made by pshell"),
    (lambda e: e.replace(b'"kind":"numbers"', b'"kind":"graph"'), "kind 'graph', expected 'numbers'"),
    (lambda e: e.replace(b'"key":["a",1]', b'"key":["a",2]'), "made from other files"),
    (lambda e: e.replace(b"[1,2]", b'[1,"2"]'), "numbers: not all integers"),
    (lambda e: e.replace(b"[1,2]", b"[1,2.5]"), "numbers: not all integers"),
    (lambda e: e.replace(b"[1,2]", b"[1," + b"9" * 5000 + b"]"), "not JSON"),  # digits beyond int limit
    (lambda e: e.replace(b"[1,2]", b"[" * 100_000 + b"]" * 100_000), "nested too deeply"),
    (lambda e: pickle.dumps((2, "x", ("a", 1), [1, 2])), "not UTF-8"),
])
def test_a_damaged_entry_is_one_warning_naming_the_file_then_rebuilt(tmp_path, damage, reason):
    cache = LoadCache(tmp_path / "c")
    cache.store(NUMBERS, ("a", 1), [1, 2])
    (entry,) = (tmp_path / "c").glob("numbers-*.json")
    entry.write_bytes(damage(entry.read_bytes()))
    assert cache.load(NUMBERS, ("a", 1)) is None
    assert cache.load(NUMBERS, ("a", 1)) is None  # still bad: still the one warning
    assert len(cache.warnings) == 1
    assert cache.warnings[0].startswith(f"cache entry ignored: {entry}: ") and reason in cache.warnings[0]
    cache.store(NUMBERS, ("a", 1), [1, 2])
    assert cache.load(NUMBERS, ("a", 1)) == [1, 2] and len(cache.warnings) == 1


def test_another_versions_entry_is_never_read_and_is_replaced(tmp_path, monkeypatch):
    cache = LoadCache(tmp_path / "c")
    with monkeypatch.context() as m:  # as another pshell version would store it
        m.setattr(load_cache, "_MADE_BY", ["0.0.1", "0123456789abcdef"])
        m.setattr(load_cache, "_VERSION_DIGEST", "0123456789abcdef")
        cache.store(NUMBERS, ("a", 1), [1, 2])
        cache.store(NUMBERS, ("b", 1), [3])
    assert len(list((tmp_path / "c").glob("numbers-*-0123456789abcdef.json"))) == 2
    older_a = (tmp_path / "c").joinpath(f"{load_cache._prefix(NUMBERS, ('a', 1))}0123456789abcdef.json")
    assert older_a.exists()
    assert cache.load(NUMBERS, ("a", 1)) is None and cache.warnings == []  # another file: a plain miss
    cache.store(NUMBERS, ("a", 1), [1, 2])
    assert cache.load(NUMBERS, ("a", 1)) == [1, 2]
    names = sorted(p.name for p in (tmp_path / "c").glob("numbers-*.json"))
    assert len(names) == 2 and older_a.name not in names  # this key's old entry went; b's stays


def test_background_store_writes_from_a_detached_process(tmp_path):
    cache = LoadCache(tmp_path / "c")
    cache.store(NUMBERS, ("k",), list(range(1000)), background=True)
    _wait_for(tmp_path / "c", "numbers-*.json")
    for _ in range(200):  # the rename is atomic: once the name exists, the content is complete
        if cache.load(NUMBERS, ("k",)) is not None:
            break
        time.sleep(0.05)
    assert cache.load(NUMBERS, ("k",)) == list(range(1000))


# ---- round trips: the cached graph is the loaded graph ------------------------------------------
def _graph_path(ws: Path) -> Path:
    return next((ws / "precision_data/npu/debug_0/graph").glob("*_Build.txt"))


def test_scanned_and_parsed_graphs_come_back_op_by_op(sample_ws):
    path = _graph_path(sample_ws[0])
    errors: list[str] = []
    scanned, _ = graph_load.load_op_graph([path], errors)
    assert scanned.readers and errors == []  # the scanned route: details read from the text
    assert_same_graph(cache_round_trip(GRAPH, scanned, (file_key(path),)), exact_graph([path]))
    parsed = exact_graph([path])  # the parsed route: details and attrs travel in the entry
    assert_same_graph(cache_round_trip(GRAPH, parsed), exact_graph([path]))


def test_detail_rows_come_back_equal(sample_ws):
    graph, _ = graph_load.load_op_graph([_graph_path(sample_ws[0])], [])
    for op in list(graph.ops.values())[::2]:
        op.outputs  # every other op decoded: the rest stay None
    rows = graph.detail_rows()
    assert rows.count(None) == len(rows) // 2 and cache_round_trip(GRAPH_DETAILS, rows) == rows


@pytest.mark.parametrize("damage, reason", [
    (lambda d: d.append("x"), "an item is not 9 fields"),
    (lambda d: d[-1].pop(), "an item is not 9 fields"),
    (lambda d: d[0].__setitem__(1, 7), "name, dtype or layout not a string"),
    (lambda d: d[-1].__setitem__(3, None), "name, dtype or layout not a string"),
    (lambda d: d[0].__setitem__(5, 1.5), "origin_format not a string"),
    (lambda d: d[-1].__setitem__(7, ["n"]), "origin_name not a string"),
    (lambda d: d[0].__setitem__(8, True), "origin_output_index not an integer"),
    (lambda d: d[-1].__setitem__(4, "1,2"), "shape: not a list"),
    (lambda d: d[0].__setitem__(4, [1, "2"]), "shape: not all integers"),
    (lambda d: d[-1].__setitem__(6, [-(1 << 64)]), "origin_shape: value out of range"),
    (lambda d: d[-1].__setitem__(6, 3), "origin_shape: not a list"),
    (lambda d: d[0].__setitem__(0, None), "index: not all integers"),
])
def test_damaged_descs_of_a_details_entry_are_named(sample_ws, damage, reason):
    """The descriptor table of a details entry, checked a field at a time over all items: each
    kind of damage (first item or last) is refused with its reason; intact, every desc back."""
    from precision_shell.model.load_cache import LoadCache

    graph, _ = graph_load.load_op_graph([_graph_path(sample_ws[0])], [])
    for op in graph.ops.values():
        op.outputs
    rows = graph.detail_rows()
    entry = LoadCache.entry(GRAPH_DETAILS, ("key",), rows)
    head, sep, tail = entry.partition(b"\n")
    doc = json.loads(head)
    assert len(doc["value"]["descs"]) > 3 and cache_round_trip(GRAPH_DETAILS, rows) == rows
    damage(doc["value"]["descs"])
    cache = LoadCache(None)
    bad = json.dumps(doc).encode() + sep + tail
    assert cache.value_of(GRAPH_DETAILS, bad, ("key",), "entry") is None
    assert len(cache.warnings) == 1 and f"descs: {reason}" in cache.warnings[0]


def test_ni_shows_the_same_cold_and_warm(sample_ws, tmp_path, capsys, monkeypatch):
    ws = _copy(sample_ws, tmp_path)
    fused = next(op for op in graph_load.load_op_graph([_graph_path(ws)], [])[0].ops.values() if op.is_fused)
    cold = run_cli(capsys, ws, "-c", f"ni {fused.key} -a")
    _wait_for(_cache_dir(ws), "graph-*.json")
    time.sleep(0.2)
    monkeypatch.setattr(graph_load, "load_op_graph", _no_graph_parse)
    warm = run_cli(capsys, ws, "-c", f"ni {fused.key} -a")
    assert cold == warm and cold[0] == 0 and fused.key in cold[1] and "_datadump_original_op_names" in cold[1]




def _split(entry: bytes) -> tuple[dict, list[bytes]]:
    """A binary entry: its JSON header and the raw blobs after it (sizes in "blobs")."""
    header, _, payload = entry.partition(b"\n")
    header = json.loads(header)
    blobs, start = [], 0
    for size in header["blobs"]:
        blobs.append(payload[start:start + size])
        start += size
    return header, blobs


def _joined(header: dict, blobs: list[bytes]) -> bytes:
    header["blobs"] = [len(b) for b in blobs]
    return json.dumps(header).encode() + b"\n" + b"".join(blobs)


def _raw(value: str, blobs: list[bytes]) -> np.ndarray:
    """A column of the entry: "[d]{dtype}:{blob}" (d: stored as differences)."""
    code, _, index = value.partition(":")
    array = np.frombuffer(blobs[int(index)], dtype="<" + code.lstrip("d")).astype(np.int64)
    return np.cumsum(array) if code.startswith("d") else array


def _put(blobs: list[bytes], array) -> str:
    blobs.append(np.asarray(array, dtype="<i8").tobytes())
    return f"i8:{len(blobs) - 1}"


_COLUMN_DAMAGE = [  # the entry's columns are raw little-endian arrays after its JSON (graph_cache.py)
    (lambda ops, n, b: ops.update(in_op=_put(b, np.full(len(_raw(ops["in_op"], b)), n))),
     "in_op: value out of range"),
    (lambda ops, n, b: ops.update(order=_put(b, _raw(ops["order"], b)[:-4])), "order: "),
    (lambda ops, n, b: ops.update(order="i8:99"), "order: not an attached blob"),
    (lambda ops, n, b: ops.update(order="x" + ops["order"]), "order: not a packed column"),
    (lambda ops, n, b: ops.update(type_id=_put(b, _raw(ops["type_id"], b)[:-1])), "graphs: op counts do not add up"),
    (lambda ops, n, b: ops.update(kernel_off=_put(b, _raw(ops["kernel_off"], b)[::-1])), "kernel_off: "),
    (lambda ops, n, b: b.__setitem__(ops["names"], b"\xff" * 4), "names: not UTF-8"),
    (lambda ops, n, b: ops.update(orig_off=_put(b, np.full(n + 1, 5))), "orig_off: "),
    (lambda ops, n, b: ops.update(src_end=_put(b, np.zeros(n)), src_start=_put(b, np.ones(n))),
     "start, end: a span outside its file"),
]
_DETAILS_DAMAGE = [  # only a parsed graph keeps its ops' details in the entry (no text to read them from)
    (lambda ops, n, b: ops.update(details=[[0, 1, 1, [10**6], [], None]] * len(ops["details"])),
     "details: outputs: value out of range"),
    (lambda ops, n, b: [d.__setitem__(5, "AAAA") for d in ops["details"]],
     "details: attrs are not serialized NamedAttrs"),
]


@pytest.mark.parametrize("route, damage, reason", [("scanned", *d) for d in _COLUMN_DAMAGE]
                         + [("parsed", *d) for d in _COLUMN_DAMAGE + _DETAILS_DAMAGE])
def test_a_damaged_graph_column_is_named(sample_ws, route, damage, reason):
    path = _graph_path(sample_ws[0])
    graph = graph_load.load_op_graph([path], [])[0] if route == "scanned" else exact_graph([path])
    key = (file_key(path),)
    entry, blobs = _split(LoadCache.entry(GRAPH, key, graph))
    ops = entry["value"]["ops"]
    assert bool(ops["details"]) == (route == "parsed")
    damage(ops, len(_raw(ops["type_id"], blobs)), blobs)
    cache = LoadCache(None)
    assert cache.value_of(GRAPH, _joined(entry, blobs), key, "entry") is None
    (warning,) = cache.warnings
    assert warning.startswith("cache entry ignored: entry: ") and reason in warning, warning


def test_a_truncated_graph_entry_is_one_warning(sample_ws):
    path = _graph_path(sample_ws[0])
    key = (file_key(path),)
    data = LoadCache.entry(GRAPH, key, graph_load.load_op_graph([path], [])[0])
    cache = LoadCache(None)
    assert cache.value_of(GRAPH, data[:-7], key, "entry") is None
    assert cache.warnings == ["cache entry ignored: entry: blobs: sizes do not add up (truncated?)"]


def test_a_graph_entry_reads_ops_only_from_the_files_of_its_key(sample_ws, tmp_path):
    path = _graph_path(sample_ws[0])
    key = (file_key(path),)
    entry, blobs = _split(LoadCache.entry(GRAPH, key, graph_load.load_op_graph([path], [])[0]))
    other = tmp_path / "other.txt"  # any file the user can read, with its real size and mtime
    other.write_bytes(path.read_bytes())
    entry["value"]["readers"] = [[str(other), *file_key(other)[1:]]]
    cache = LoadCache(None)
    assert cache.value_of(GRAPH, _joined(entry, blobs), key, "entry") is None
    assert cache.warnings == ["cache entry ignored: entry: readers: not a graph file of the key"]


# ---- planted and damaged entries in every location ---------------------------------------------
def _copy(sample_ws, tmp_path) -> Path:
    ws = tmp_path / "ws"
    shutil.copytree(sample_ws[0] / "precision_data", ws / "precision_data")
    shutil.rmtree(ws / "precision_data" / "temp", ignore_errors=True)  # other tests' caches
    return ws


def _cache_dir(ws: Path) -> Path:
    return ws / "precision_data" / "temp" / "pshell" / "cache"


def _no_graph_parse(files, errors):
    raise AssertionError("graph parsed although the cache is valid")


class _Touch:
    """Unpickling this creates ``path``: what a planted pickle could do instead."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return Path.touch, (self.path,)


def _planted(kind: str, entry: bytes, marker: Path) -> bytes:
    if kind == "pickle":
        return pickle.dumps(_Touch(marker))
    if kind == "truncated":
        return entry[:len(entry) * 2 // 3]
    header, newline, blobs = entry.partition(b"\n")  # the graph's arrays follow its JSON line
    doc = json.loads(header)
    if kind == "wrong version":
        doc["format"] = 1
    else:  # the right header, a value of the wrong shape
        doc["value"] = {"ops": "many"} if isinstance(doc["value"], dict) else [doc["value"]]
    return json.dumps(doc).encode() + newline + blobs


def _entries(ws: Path, session: Session) -> dict[str, Path]:
    """Each cache location of the workspace -> its entry file (found by the key recorded in it)."""
    found = {}
    overflow = {str(d.resolve()) for d in session.workspace.overflow_dirs}
    for path in _cache_dir(ws).glob("*.json"):
        doc = json.loads(path.read_bytes().partition(b"\n")[0])
        kind, folder = doc["kind"], doc["key"][1] if doc["kind"] in ("dumps", "golden") else None
        if kind in ("graph", "graph_details", "golden"):
            found[kind] = path
        elif folder == str(session.active.path.resolve()):
            found["dump leaf"] = path
        elif folder in overflow:
            found["overflow"] = path
    assert set(found) == {"graph", "graph_details", "golden", "dump leaf", "overflow"}
    return found


def _first_open(ws: Path, monkeypatch) -> tuple[Session, dict[str, Path], dict]:
    """Open once with every op's details decoded and stored: every location has its entry."""
    monkeypatch.setattr(Session, "_DETAILS_STORE_MIN", 1)
    monkeypatch.setattr(op_node, "BULK_AFTER", 0)  # the sample has fewer ops than a bulk
    first = Session.open(ws)
    details = {key: (op.outputs, op.id) for key, op in first.graph.ops.items()}
    first.after_command()
    _wait_for(_cache_dir(ws), "graph_details-*.json")
    _wait_for(_cache_dir(ws), "graph-*.json")
    time.sleep(0.3)
    return first, _entries(ws, first), details


def _assert_all_from_the_cache(ws, first, details, monkeypatch) -> Session:
    """A clean open that reads every location from the cache."""
    from precision_shell.formats.graph.scan import OpTextReader

    with monkeypatch.context() as m:
        m.setattr(graph_load, "load_op_graph", _no_graph_parse)
        m.setattr(folder_listing, "_scan_one", lambda *a: pytest.fail("folder listed although cached"))
        m.setattr(OpTextReader, "op", lambda *a: pytest.fail("op details decoded although cached"))
        again = Session.open(ws)
        assert {key: (op.outputs, op.id) for key, op in again.graph.ops.items()} == details
        assert again.overflow_dumps.opdebug == first.overflow_dumps.opdebug
        assert len(again.golden) == len(first.golden)
        assert again.dumps.op_files == first.dumps.op_files
    assert again.load_warnings == [] and again.load_errors == []
    return again


@pytest.mark.parametrize("kind", ["pickle", "wrong shape", "truncated", "wrong version"])
def test_planted_entries_in_every_location_are_ignored_and_rebuilt(sample_ws, tmp_path, monkeypatch, kind):
    ws = _copy(sample_ws, tmp_path)
    first, entries, details = _first_open(ws, monkeypatch)
    marker = tmp_path / "marker"
    if kind == "pickle":  # the payload works: unpickling it does create the file
        pickle.loads(_planted(kind, b"", tmp_path / "proof"))
        assert (tmp_path / "proof").exists()
    planted = {}
    for location, path in entries.items():
        planted[path] = _planted(kind, path.read_bytes(), marker)
        path.write_bytes(planted[path])

    session = Session.open(ws)
    decoded = {key: (op.outputs, op.id) for key, op in session.graph.ops.items()}  # asks the details cache
    assert not marker.exists() and decoded == details and session.load_errors == []
    assert sorted(w.split(": ")[1] for w in session.load_warnings) == sorted(str(p) for p in entries.values())
    assert all(w.startswith("cache entry ignored: ") for w in session.load_warnings)
    assert session.overflow_dumps.opdebug == first.overflow_dumps.opdebug
    assert len(session.golden) == len(first.golden) and session.dumps.op_files == first.dumps.op_files

    session.after_command()  # the details were decoded again: stored again
    for path, data in planted.items():
        _wait_rewritten(path, data)
    _assert_all_from_the_cache(ws, first, details, monkeypatch)
    assert not marker.exists()


def test_batch_mode_warns_and_exits_0_with_a_planted_pickle(sample_ws, tmp_path, capsys, monkeypatch):
    ws = _copy(sample_ws, tmp_path)
    first, entries, details = _first_open(ws, monkeypatch)
    marker = tmp_path / "marker"
    for path in entries.values():
        path.write_bytes(_planted("pickle", b"", marker))
    op = next(iter(details))
    rc, out, err = run_cli(capsys, ws, "-c", f"info; ni {op}")
    assert rc == 0 and not marker.exists() and op in out
    warned = sorted(line.split(": ")[2] for line in err.splitlines())
    assert warned == sorted(str(p) for p in entries.values())
    assert all(line.startswith("warning: cache entry ignored: ") for line in err.splitlines())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the graph job forks on Linux only")
def test_the_command_line_ignores_a_planted_graph_pickle(sample_ws, tmp_path):
    ws = _copy(sample_ws, tmp_path)
    Session.open(ws)
    (entry,) = _wait_for(_cache_dir(ws), "graph-*.json")
    time.sleep(0.2)
    marker = tmp_path / "marker"
    entry.write_bytes(_planted("pickle", b"", marker))
    run = subprocess.run([sys.executable, "-m", "precision_shell", str(ws), "-c", "info"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and not marker.exists()
    assert run.stderr.startswith(f"warning: cache entry ignored: {entry}: not UTF-8")
    _wait_rewritten(entry, _planted("pickle", b"", marker))
    assert LoadCache(_cache_dir(ws)).load(GRAPH, (file_key(_graph_path(ws)),)) is not None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the graph job forks on Linux only")
def test_a_fifo_planted_as_a_cache_entry_does_not_hang_start_up(sample_ws, tmp_path):
    ws = _copy(sample_ws, tmp_path)
    Session.open(ws)
    (entry,) = _wait_for(_cache_dir(ws), "graph-*.json")
    time.sleep(0.2)
    entry.unlink()
    os.mkfifo(entry)   # nobody ever writes to it: a plain open() would wait forever
    run = subprocess.run([sys.executable, "-m", "precision_shell", str(ws), "-c", "info"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stderr.startswith(f"warning: cache entry ignored: {entry}: cannot read (not a regular file")


# ---- invalidation -------------------------------------------------------------------------------
def test_second_open_uses_the_cache_and_a_changed_graph_misses_it(sample_ws, tmp_path, monkeypatch):
    ws = _copy(sample_ws, tmp_path)
    first = Session.open(ws)
    _wait_for(_cache_dir(ws), "graph-*.json")
    time.sleep(0.2)
    real_load = graph_load.load_op_graph
    monkeypatch.setattr(graph_load, "load_op_graph", _no_graph_parse)
    second = Session.open(ws)
    assert list(second.graph.ops) == list(first.graph.ops)
    op = next(iter(first.graph.ops))
    assert dict(second.graph.ops[op].attrs) == dict(first.graph.ops[op].attrs)
    assert [f.filename for f in second.dumps.files] == [f.filename for f in first.dumps.files]
    assert len(second.golden) == len(first.golden)

    graph = _graph_path(ws)
    stat = graph.stat()
    os.utime(graph, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    parsed = []
    monkeypatch.setattr(graph_load, "load_op_graph",
                        lambda files, errors: parsed.extend(files) or real_load(files, errors))
    third = Session.open(ws)
    assert parsed == [graph] and list(third.graph.ops) == list(first.graph.ops)
    assert third.load_warnings == []  # a stale entry is another file: no warning


def test_new_dump_file_invalidates_the_folder_listing(sample_ws, tmp_path):
    ws = _copy(sample_ws, tmp_path)
    first = Session.open(ws)
    dump = first.dumps.op_files[0].path
    shutil.copy(dump, dump.with_name(dump.name.rsplit(".", 1)[0] + ".1999999999999999"))
    second = Session.open(ws)
    assert len(second.dumps.op_files) == len(first.dumps.op_files) + 1


def test_the_repl_shows_the_warnings_at_start_and_after_the_command_that_met_them(sample_ws, tmp_path,
                                                                                 monkeypatch):
    from tests.shell.test_repl import drive, make_opts

    ws = _copy(sample_ws, tmp_path)
    first, entries, details = _first_open(ws, monkeypatch)
    for location in ("golden", "graph_details"):
        entries[location].write_bytes(entries[location].read_bytes()[:100])
    session = Session.open(ws)  # the golden listing is read now, the op details on first use
    rc, _out, err, fired = drive(session, f"ni {next(iter(details))}\r\x04", make_opts(tmp_path))
    assert rc == 0 and not fired
    lines = err.splitlines()  # the start-up one first, then the one the command met
    assert [line.split(": ")[:3] for line in lines] == [
        ["warning", "cache entry ignored", str(entries[location])] for location in ("golden", "graph_details")]
    assert all(line.split(": ")[3].startswith("not JSON") for line in lines)


@pytest.mark.parametrize("kernel", [True, False])
def test_int_columns_pack_narrow_and_come_back(monkeypatch, kernel):
    """The graph entry's int columns: the narrowest ints of the values or of their differences,
    read back exactly, with their min, max and order (the C kernel and numpy alike)."""
    from array import array

    from precision_shell.formats.graph import columns as graph_columns

    if kernel and not graph_columns.kernel_available():
        pytest.skip("the C scanner is not built")
    monkeypatch.setattr(graph_columns, "kernel_available", lambda: kernel)
    rng = np.random.default_rng(5)
    offsets = np.cumsum(rng.integers(0, 300, 5000))          # differences fit 2 bytes, values 4
    cases = [(offsets, "q", True, 2), (rng.integers(-3, 100, 777), "i", False, 1),
             (np.array([-(1 << 62), 1 << 62, 0]), "q", False, 8), (np.array([], dtype=np.int64), "q", False, 1)]
    for values, code, want_delta, want_size in cases:
        delta, size, raw = graph_columns.pack_ints(array(code, values.tolist()))
        assert (delta, size, len(raw)) == (want_delta, want_size, size * len(values))
        out, lo, hi, ordered = graph_columns.unpack_ints(raw, size, delta, 8)
        assert np.frombuffer(out, dtype="<i8").tolist() == values.tolist()
        if len(values):
            assert (lo, hi, ordered) == (values.min(), values.max(), bool(np.all(np.diff(values) >= 0)))
    assert graph_columns.unpack_ints(np.array([1 << 40], dtype="<i8").tobytes(), 8, False, 4) is None
