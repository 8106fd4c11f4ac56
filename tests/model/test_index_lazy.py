"""Dump and golden indexes built from folder listings: counts and sizes at start-up without parsing,
the full index on first lookup, equal to indexing the files one by one; the start-up cache."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from precision_shell.formats import dump_names
from precision_shell.formats.dump_names import parse_dump_name, parse_golden_name
from precision_shell.model import dump_index, folder_listing, golden_index
from precision_shell.model.dump_index import DumpFile, DumpIndex, scan_dump_dir
from precision_shell.model.golden_index import GoldenFile, GoldenIndex, scan_golden_dir
from precision_shell.model.load_cache import LoadCache
from precision_shell.model.session import Session


def _eager_dump_index(folder: Path) -> DumpIndex:
    """The reference: every file parsed and stat'ed one by one (what the index did before)."""
    files = []
    for entry in os.scandir(folder):
        parsed = parse_dump_name(entry.name)
        if parsed is not None and not entry.is_dir() and os.path.exists(entry.path):
            files.append(DumpFile(folder, entry.name, parsed, entry.stat().st_size))
    return DumpIndex(files)


def _eager_golden_index(root: Path) -> GoldenIndex:
    files = []
    for folder, _dirs, names in sorted(os.walk(root)):
        for name in sorted(names):
            parsed = parse_golden_name(name)
            if parsed is not None:
                files.append(GoldenFile(Path(folder), name, parsed, os.stat(Path(folder) / name).st_size))
    return GoldenIndex(root, files)


def _no_parsing(monkeypatch):
    def boom(names):
        raise AssertionError("names parsed although only counts and sizes were asked")
    monkeypatch.setattr(dump_index, "parse_dump_names", boom)
    monkeypatch.setattr(golden_index, "parse_golden_names", boom)


def test_sample_counts_and_bytes_without_parsing_then_the_full_index(sample_ws, monkeypatch):
    root, manifest = sample_ws
    dumps_dir, golden_dir = root / manifest["paths"]["npu_dump_dir"], root / manifest["paths"]["golden_dir"]
    dumps, golden = scan_dump_dir(dumps_dir), scan_golden_dir(golden_dir)
    with monkeypatch.context() as m:
        _no_parsing(m)
        assert dumps.op_file_count == manifest["totals"]["npu_dump_files"] == 23
        assert dumps.total_bytes == manifest["totals"]["npu_dump_bytes"]
        assert len(golden) == manifest["totals"]["golden_files"] == 39
        assert golden.total_bytes == manifest["totals"]["golden_bytes"]
    eager = _eager_dump_index(dumps_dir)
    assert dumps.files == eager.files and dumps.by_key == eager.by_key
    assert dumps.op_files == eager.op_files and dumps.opdebug == eager.opdebug
    assert len(dumps.op_files) == dumps.op_file_count
    op = next(iter(eager.by_key))
    assert dumps.latest_for_op(op) == eager.by_key[op][-1]
    ref = _eager_golden_index(golden_dir)
    assert golden.by_key == ref.by_key and golden.names() == ref.names()
    golden_path = root / manifest["golden_files"]["conv1/kernel:0"]
    assert golden.find("conv1/kernel", 0).path == golden_path


def _write(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(range(256)) * (size // 256) + b"x" * (size % 256))
    return path


@pytest.fixture
def dump_folder(tmp_path) -> Path:
    folder = tmp_path / "dumps"
    _write(folder / "Add.add_1.3.2.1700000000000002", 300)
    _write(folder / "Add.add_1.3.2.1700000000000001", 200)        # older dump of the same op
    _write(folder / "Conv2D.conv.4.2.1700000000000003", 1000)
    _write(folder / "Opdebug.Node_OpDebug.59.1.1700000000000301", 64)
    _write(folder / "MatMul.fc.7.1619492699305998", 50)             # 4-field form
    _write(folder / "123456", 70)                                  # hashed, in mapping.csv
    _write(folder / "654321", 80)                                  # hashed, not in mapping.csv
    _write(folder / "Add.add_1.3.2.1700000000000002.input.0.npy", 5)  # decoded sibling
    _write(folder / "Add.add_1.3.2.1700000000000002.csv", 5)
    (folder / "mapping.csv").write_text("123456,Mul.a_very_long_name.9.2.1700000000000005\n")
    (folder / "Sub.sub.1.2.1700000000000009").mkdir()             # a folder named like a dump
    os.symlink(folder / "Conv2D.conv.4.2.1700000000000003", folder / "Relu.relu.5.2.1700000000000004")
    os.symlink(folder / "gone", folder / "Relu.dangling.6.2.1700000000000006")
    return folder


def test_dump_folder_listing_equals_one_by_one_indexing(dump_folder, monkeypatch):
    index = scan_dump_dir(dump_folder)
    assert f"{dump_folder / '654321'}: hashed dump name not in mapping.csv" in index.warnings
    assert any("Relu.dangling" in w and "cannot stat" in w for w in index.warnings)
    with monkeypatch.context() as m:
        _no_parsing(m)
        # Add x2, Conv2D, MatMul, the hashed Mul, the linked Relu; not Opdebug, the folder, the dangling link
        assert index.op_file_count == 6
        assert index.total_bytes == 300 + 200 + 1000 + 64 + 50 + 70 + 1000
        assert [f.filename for f in index.opdebug] == ["Opdebug.Node_OpDebug.59.1.1700000000000301"]
    assert len(index.op_files) == 6
    hashed = index.latest_for_op("a_very_long_name")
    assert (hashed.filename, hashed.size, hashed.name.op_type, hashed.name.task_id) == ("123456", 70, "Mul", 9)
    assert [f.size for f in index.files_for_op("add_1")] == [200, 300]  # oldest first
    assert index.latest_for_op("relu").size == 1000
    assert "Sub.sub.1.2.1700000000000009" not in {f.filename for f in index.files}
    reference = [f for f in _eager_dump_index(dump_folder).files if f.filename != "654321"]
    assert sorted(index.files) == sorted(reference + [hashed])


def test_a_dump_removed_after_the_scan_counts_zero_bytes_with_a_warning(dump_folder, tmp_path):
    cache = LoadCache(tmp_path / "cache")
    index = scan_dump_dir(dump_folder, cache=cache)
    (dump_folder / "Conv2D.conv.4.2.1700000000000003").unlink()
    assert index.total_bytes == 300 + 200 + 64 + 50 + 70  # the link now dangles too
    assert sum("cannot stat" in w for w in index.warnings) == 3  # the two gone + the old dangling one
    # the folder changed: the next scan lists it again
    again = scan_dump_dir(dump_folder, cache=cache)
    assert again.op_file_count == 4 and again.total_bytes == 300 + 200 + 64 + 50 + 70


def test_second_scan_reads_names_and_sizes_from_the_cache(dump_folder, tmp_path, monkeypatch):
    cache = LoadCache(tmp_path / "cache")
    first = scan_dump_dir(dump_folder, cache=cache)
    total, files = first.total_bytes, first.files  # sizes read now are added to the cache entry

    def no_listing(*args, **kwargs):
        raise AssertionError("folder listed or stat'ed although the cache is valid")

    monkeypatch.setattr(folder_listing, "_scan_one", no_listing)
    monkeypatch.setattr(folder_listing, "_stat_sizes", no_listing)
    second = scan_dump_dir(dump_folder, cache=cache)
    assert second.op_file_count == 6 and second.total_bytes == total
    assert second.files == files
    # the scan's warnings (hashed name not in mapping.csv, folder named like a dump, dangling
    # link), not the later ones
    assert second.warnings == first.warnings[:3]


def test_sizes_are_read_after_a_cached_scan_that_never_needed_them(dump_folder, tmp_path):
    cache = LoadCache(tmp_path / "cache")
    assert scan_dump_dir(dump_folder, cache=cache).op_file_count == 6
    second = scan_dump_dir(dump_folder, cache=cache)
    assert not any(f.has_sizes for f in second._listing.folders)
    assert second.total_bytes == 300 + 200 + 1000 + 64 + 50 + 70 + 1000
    assert all(f.has_sizes for f in scan_dump_dir(dump_folder, cache=cache)._listing.folders)


def test_changed_mapping_csv_and_other_cache_shapes_miss_the_cache(dump_folder, tmp_path):
    cache = LoadCache(tmp_path / "cache")
    assert scan_dump_dir(dump_folder, cache=cache).op_file_count == 6
    mapping = dump_folder / "mapping.csv"
    mapping.write_text("123456,Mul.a_very_long_name.9.2.1700000000000005\n"
                       "654321,Mul.another_long_name.9.2.1700000000000007\n")
    st = mapping.stat()
    os.utime(mapping, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    index = scan_dump_dir(dump_folder, cache=cache)
    assert index.op_file_count == 7 and index.latest_for_op("another_long_name").size == 80
    # an entry of another shape is ignored with a warning and rebuilt
    entry = max((tmp_path / "cache").glob("dumps-*.json"), key=lambda p: p.stat().st_mtime_ns)  # this mapping's
    entry.write_text(entry.read_text().replace('"summary":[', '"summary":[1,'))
    assert scan_dump_dir(dump_folder, cache=cache).op_file_count == 7
    assert cache.warnings == [f"cache entry ignored: {entry}: summary: not [hashed, opdebug]"]
    assert scan_dump_dir(dump_folder, cache=cache).op_file_count == 7 and len(cache.warnings) == 1


@pytest.fixture
def golden_folder(tmp_path) -> Path:
    root = tmp_path / "golden"
    _write(root / "conv1_Conv2D.0.1706193202306009.npy", 400)
    _write(root / "conv1_Conv2D.0.1706193202306500.npy", 410)   # newer: wins
    _write(root / "relu.0.npy", 100)                              # no timestamp
    _write(root / "relu.1.5.npy", 120)
    _write(root / "fc_MatMul.output.0.npy", 9)                    # decoded NPU file: not a golden
    _write(root / "notes.txt", 9)
    return root


def test_golden_duplicates_resolve_to_the_newest_file(golden_folder, monkeypatch):
    index = scan_golden_dir(golden_folder)
    with monkeypatch.context() as m:
        _no_parsing(m)
        assert len(index) == 3
        assert index.total_bytes == 410 + 100 + 120
    assert index.find("conv1/Conv2D", 0).filename == "conv1_Conv2D.0.1706193202306500.npy"
    assert index.names() == ["conv1_Conv2D:0", "relu:0", "relu:1"]
    assert [f.size for f in index.outputs_of("relu")] == [100, 120]
    assert index.by_key == _eager_golden_index(golden_folder).by_key


def test_golden_tensors_in_several_folders_count_once(golden_folder, tmp_path):
    _write(golden_folder / "step1" / "conv1_Conv2D.0.1706193202307000.npy", 420)  # newest of all
    _write(golden_folder / "step1" / "pool.0.1706193202307001.npy", 30)
    cache = LoadCache(tmp_path / "cache")
    for index in (scan_golden_dir(golden_folder, cache), scan_golden_dir(golden_folder, cache)):
        assert len(index) == 4
        assert index.total_bytes == 420 + 100 + 120 + 30
        assert index.find("conv1_Conv2D", 0).path == golden_folder / "step1" / "conv1_Conv2D.0.1706193202307000.npy"
        assert index.by_key == _eager_golden_index(golden_folder).by_key


def test_new_golden_file_invalidates_the_listing(golden_folder, tmp_path):
    cache = LoadCache(tmp_path / "cache")
    assert len(scan_golden_dir(golden_folder, cache)) == 3
    _write(golden_folder / "pool.0.1706193202307001.npy", 30)
    index = scan_golden_dir(golden_folder, cache)
    assert len(index) == 4 and index.total_bytes == 410 + 100 + 120 + 30
    (golden_folder / "relu.0.npy").unlink()
    assert len(scan_golden_dir(golden_folder, cache)) == 3


def test_unreadable_folder_is_a_warning_and_an_empty_index(tmp_path):
    index = scan_dump_dir(tmp_path / "missing")
    assert index.op_file_count == 0 and index.files == [] and index.total_bytes == 0
    assert index.warnings == [f"{tmp_path / 'missing'}: cannot list folder (No such file or directory)"]
    assert len(scan_golden_dir(tmp_path / "missing")) == 0


def test_info_is_the_same_cold_and_warm(sample_ws, tmp_path, capsys):
    from tests.conftest import json_docs, run_cli
    ws = tmp_path / "ws"
    shutil.copytree(sample_ws[0] / "precision_data", ws / "precision_data")
    out_dir = tmp_path / "out"
    docs = []
    for _ in range(2):
        rc, out, _err = run_cli(capsys, ws, "-o", out_dir, "-c", "info", "--format", "json")
        assert rc == 0
        docs.append(json_docs(out))
    assert docs[0] == docs[1]
    assert list((out_dir / "cache").glob("golden-*.json")) and list((out_dir / "cache").glob("dumps-*.json"))
    info = Session.open(ws, output=str(out_dir))
    manifest = sample_ws[1]
    assert info.dumps.op_file_count == manifest["totals"]["npu_dump_files"]
    assert info.golden.total_bytes == manifest["totals"]["golden_bytes"]
    assert dump_names.is_dump_name(info.dumps.op_files[0].filename)


def test_single_op_lookups_parse_only_that_op_then_many_build_the_index(dump_folder, monkeypatch):
    reference = _eager_dump_index(dump_folder).by_key
    index = scan_dump_dir(dump_folder)
    with monkeypatch.context() as m:
        _no_parsing(m)  # the full index is not built for a few lookups
        for key, files in reference.items():
            assert index.files_for_op(key) == files
        assert index.latest_for_op("a_very_long_name").filename == "123456"
        assert index.files_for_op("no_such_op") == [] and index.latest_for_op("no_such_op") is None
        assert index.files_for_op("Node_OpDebug") == []  # Opdebug files are not op dumps
    calls = []
    real_parse = dump_index.parse_dump_names
    monkeypatch.setattr(dump_index, "parse_dump_names", lambda names: calls.append(1) or real_parse(names))
    monkeypatch.setattr(dump_index, "_SINGLE_LOOKUPS", index._single_lookups + 1)
    index.files_for_op("add_1")
    assert calls == []
    assert [f.size for f in index.files_for_op("add_1")] == [200, 300] and calls == [1]  # indexed now
    index.files_for_op("conv")
    assert calls == [1]


def test_golden_lookups_before_the_index_is_built(golden_folder, monkeypatch):
    _write(golden_folder / "step1" / "conv1_Conv2D.0.1706193202307000.npy", 420)
    _write(golden_folder / "step1" / "relu.0.1.npy", 7)  # timestamp 1: newer than relu.0.npy (none = 0)
    reference = _eager_golden_index(golden_folder)
    index = scan_golden_dir(golden_folder)
    with monkeypatch.context() as m:
        _no_parsing(m)
        assert index.names() == reference.names() == ["conv1_Conv2D:0", "relu:0", "relu:1"]
        assert len(index) == 3
        for key, f in reference.by_key.items():
            assert index.find(*key) == f
        assert index.find("relu", 0).path == golden_folder / "step1" / "relu.0.1.npy"
        assert index.outputs_of("relu") == reference.outputs_of("relu") and len(index.outputs_of("relu")) == 2
        assert index.find("relu", 7) is None and index.outputs_of("nothing") == []
        assert index.total_bytes == reference.total_bytes == 420 + 7 + 120
    assert index.by_key == reference.by_key


def test_outputs_of_one_op_parses_only_its_names_and_agrees_with_the_full_index(sample_ws, tmp_path):
    from precision_shell.model.golden_index import scan_golden_dir

    golden_dir = sample_ws[0] / "precision_data" / "tf" / "dump"
    full = scan_golden_dir(golden_dir)
    full.by_key  # the whole index, every name parsed
    ops = sorted({key[0] for key in full.by_key})
    assert len(ops) > 10
    for op in ops:
        lazy = scan_golden_dir(golden_dir)
        got = lazy.outputs_of(op)
        assert got == full.outputs_of(op) and got
        assert lazy._positions is None and lazy._by_key is None  # nothing else was parsed
