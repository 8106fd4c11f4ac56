"""File sizes of a big tree are counted after start-up (issue 31): `info` says what is not known
yet, `info --sizes` waits for the exact totals, and the counted sizes reach the start-up cache."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from precision_shell.commands.registry import REGISTRY
from precision_shell.commands.runner import execute, split_statements
from precision_shell.model import folder_listing, size_count
from precision_shell.model.session import Session


def _info(session: Session, line: str = "info"):
    outcome = execute(session, split_statements(line)[0], REGISTRY)
    assert outcome.error is None, outcome.error
    rows = dict(outcome.result.blocks[0][1])
    return outcome.result.data, rows


def _bytes_on_disk(folder: Path, pattern: str) -> int:
    return sum(os.stat(p).st_size for p in folder.rglob(pattern) if p.is_file())


def _dump_and_golden_dirs(root: Path, manifest: dict) -> tuple[Path, Path]:
    return root / manifest["paths"]["npu_dump_dir"], root / manifest["paths"]["golden_dir"]


@pytest.fixture(autouse=True)
def _own_counts(monkeypatch):
    """The counts a test starts are not left to this process's exit."""
    monkeypatch.setattr(size_count, "_counting", [])


@pytest.fixture
def gated_stat(monkeypatch):
    """Every background size count waits for the returned event before it stats a folder."""
    gate, stat_sizes = threading.Event(), folder_listing._stat_sizes

    def waiting(folder, names):
        if threading.current_thread() is not threading.main_thread():
            assert gate.wait(30), "the test never opened the gate"
        return stat_sizes(folder, names)

    monkeypatch.setattr(folder_listing, "_stat_sizes", waiting)
    monkeypatch.setattr(size_count, "INLINE_SIZES_BELOW", 1)  # every tree counts as big
    yield gate
    gate.set()


def test_info_says_sizes_are_being_counted_then_shows_them(sample_ws, tmp_path, gated_stat):
    root, manifest = sample_ws
    dumps_dir, golden_dir = _dump_and_golden_dirs(root, manifest)
    session = Session.open(root, output=tmp_path / "out")
    data, rows = _info(session)
    assert data["npu_dump_bytes"] is None and data["golden_bytes"] is None
    assert data["npu_dump_files"] == manifest["totals"]["npu_dump_files"]   # counts need no stat
    assert "size being counted" in rows["npu"] and "size being counted" in rows["golden"]
    assert not session.size_counts[0].done

    gated_stat.set()
    data, rows = _info(session, "info --sizes")
    dump_bytes = sum(p.stat().st_size for p in dumps_dir.iterdir())  # the sample's folder holds dumps only
    assert data["npu_dump_bytes"] == dump_bytes == manifest["totals"]["npu_dump_bytes"]
    assert data["golden_bytes"] == _bytes_on_disk(golden_dir, "*.npy")
    assert "size being counted" not in rows["npu"] + rows["golden"]
    assert session.size_counts[0].done
    assert _info(session)[0]["npu_dump_bytes"] == dump_bytes  # known now without --sizes


def test_a_small_tree_has_its_sizes_at_once(sample_ws, tmp_path):
    root, manifest = sample_ws
    dumps_dir, golden_dir = _dump_and_golden_dirs(root, manifest)
    session = Session.open(root, output=tmp_path / "out")
    assert all(count.thread is None for count in session.size_counts)
    data, rows = _info(session)
    assert data["npu_dump_bytes"] == manifest["totals"]["npu_dump_bytes"]
    assert data["golden_bytes"] == _bytes_on_disk(golden_dir, "*.npy")
    assert "size being counted" not in rows["npu"]


def test_sizes_counted_in_the_background_reach_the_next_start(sample_ws, tmp_path, monkeypatch):
    root, manifest = sample_ws
    monkeypatch.setattr(size_count, "INLINE_SIZES_BELOW", 1)
    first = Session.open(root, output=tmp_path / "out")
    first.wait_for_sizes()
    assert first.size_counts[0].thread is not None
    expected = _info(first)[0]

    def no_stat(folder, names):
        raise AssertionError(f"{folder}: sizes stat'ed although the cache holds them")

    monkeypatch.setattr(folder_listing, "_stat_sizes", no_stat)
    second = Session.open(root, output=tmp_path / "out")
    data, _ = _info(second)
    assert data["npu_dump_bytes"] == expected["npu_dump_bytes"] == manifest["totals"]["npu_dump_bytes"]
    assert data["golden_bytes"] == expected["golden_bytes"] is not None


def test_use_counts_the_sizes_of_the_new_dump_set(sample_ws, tmp_path, gated_stat):
    root, manifest = sample_ws
    session = Session.open(root, output=tmp_path / "out")
    started = len(session.size_counts)
    session.use()
    assert len(session.size_counts) == started + 1
    assert _info(session)[0]["npu_dump_bytes"] is None
    gated_stat.set()
    assert _info(session, "info --sizes")[0]["npu_dump_bytes"] == manifest["totals"]["npu_dump_bytes"]


def test_no_cache_write_starts_once_the_process_exits(tmp_path, monkeypatch):
    """At exit a daemon count must not begin a write it cannot finish (its temporary file would
    stay in the cache folder); a write under way is waited for (the same lock)."""
    from precision_shell.model.dump_index import scan_dump_dir
    from precision_shell.model.load_cache import LoadCache

    folder = tmp_path / "dumps"
    folder.mkdir()
    (folder / "Add.add_1.3.2.1700000000000001").write_bytes(b"x" * 7)
    cache = LoadCache(tmp_path / "cache")
    index = scan_dump_dir(folder, cache=cache)
    stored = sorted(p.read_bytes() for p in (tmp_path / "cache").rglob("*.json"))
    monkeypatch.setattr(folder_listing, "_exiting", False)
    folder_listing.end_cache_writes()
    assert folder_listing._exiting
    assert index.total_bytes == 7  # sizes read, but the entry is left as it was
    assert sorted(p.read_bytes() for p in (tmp_path / "cache").rglob("*.json")) == stored
    assert [p.name for p in (tmp_path / "cache").rglob("*") if p.name.startswith(".")] == []


_EXITS_FIRST = """
import sys, threading
from precision_shell.model import folder_listing, size_count
size_count.INLINE_SIZES_BELOW = 1
stat_sizes = folder_listing._stat_sizes

def never_in_a_thread(folder, names):
    if threading.current_thread() is not threading.main_thread():
        threading.Event().wait()  # the count never ends: the process exits first
    return stat_sizes(folder, names)

folder_listing._stat_sizes = never_in_a_thread
from precision_shell.model.session import Session
session = Session.open(sys.argv[1], output=sys.argv[2])
print(session.dumps.known_bytes, session.golden.known_bytes)
"""


def _cached_sizes(cache: Path) -> dict[str, bool]:
    """Kind of each listing entry in ``cache`` -> whether it holds sizes."""
    import json

    found = {}
    for path in cache.glob("*.json"):
        # the entry's JSON line (a graph entry carries raw array bytes after it)
        entry = json.loads(path.read_bytes().partition(b"\n")[0])
        if entry["kind"] in ("dumps", "golden"):
            found[path.name] = entry["value"]["sizes"] is not None
    return found


def test_a_run_that_exits_first_leaves_its_sizes_to_the_next_start(sample_ws, tmp_path, monkeypatch):
    import subprocess
    import sys
    import time

    root, manifest = sample_ws
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, "-c", _EXITS_FIRST, str(root), str(out)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["None", "None"]  # not known in that process
    for _ in range(600):  # a detached copy of it writes them: wait for it (not a child of ours)
        if _cached_sizes(out / "cache") and all(_cached_sizes(out / "cache").values()):
            break
        time.sleep(0.05)
    assert _cached_sizes(out / "cache") and all(_cached_sizes(out / "cache").values())

    def no_stat(folder, names):
        raise AssertionError(f"{folder}: sizes stat'ed although the cache holds them")

    monkeypatch.setattr(folder_listing, "_stat_sizes", no_stat)
    data, _ = _info(Session.open(root, output=out))
    assert data["npu_dump_bytes"] == manifest["totals"]["npu_dump_bytes"]
    golden_dir = _dump_and_golden_dirs(root, manifest)[1]
    assert data["golden_bytes"] == _bytes_on_disk(golden_dir, "*.npy")


def test_a_finished_count_is_not_kept(sample_ws, tmp_path, monkeypatch):
    root, _ = sample_ws
    monkeypatch.setattr(size_count, "INLINE_SIZES_BELOW", 1)
    session = Session.open(root, output=tmp_path / "out")
    assert session.size_counts[-1].thread is not None
    session.wait_for_sizes()
    assert size_count._counting == []


def test_the_background_count_yields_the_cores(sample_ws, tmp_path, monkeypatch):
    """The count thread runs at a lower priority than the session (a thread's own nice value on
    Linux), so a first start's session and graph loader get the cores; the session's own
    priority is unchanged."""
    root, _ = sample_ws
    monkeypatch.setattr(size_count, "INLINE_SIZES_BELOW", 1)
    seen = []
    stat_sizes = folder_listing._stat_sizes

    def recording(folder, names):
        seen.append((threading.current_thread().name, os.getpriority(os.PRIO_PROCESS, threading.get_native_id())))
        return stat_sizes(folder, names)

    monkeypatch.setattr(folder_listing, "_stat_sizes", recording)
    mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    session = Session.open(root, output=tmp_path / "out")
    session.wait_for_sizes()
    assert session.size_counts[0].thread is not None
    counted = [nice for name, nice in seen if name == "pshell-sizes"]
    assert counted and all(nice == min(mine + 10, 19) for nice in counted)
    assert all(nice == mine for name, nice in seen if name != "pshell-sizes")  # a wait counts at full speed
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == mine
