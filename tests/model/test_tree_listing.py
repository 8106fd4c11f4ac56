"""Listing a big tree in one pass (issue 31): the golden count read from the joined names agrees
with reading them name by name; a folder of regular files only is listed from its entries' types."""

from __future__ import annotations

import os
import random

import pytest

from precision_shell.formats.dump_names import golden_keys_in, golden_names_counted, parse_golden_name
from precision_shell.model import folder_listing
from precision_shell.model.dump_index import scan_dump_dir
from precision_shell.model.golden_index import scan_golden_dir


def _name_by_name(names: list[str]) -> tuple[list[str], int]:
    """The reference: each name parsed on its own."""
    parsed = [(n, parse_golden_name(n)) for n in names if "\n" not in n]
    accepted = [n for n, g in parsed if g is not None]
    return accepted, len({(g.op_name, g.output_index) for _, g in parsed if g is not None})


CORNERS = ["conv1_Conv2D.0.1700000000000001.npy", "a.0.npy", ".0.npy", "x.input.0.npy",
           "x.output.3.5.npy", "y.b.output.0.npy", "z.1.2.npy", "bad", "c.01.npy", "d.0.npyx",
           "e..0.npy", "f.0.0.0.npy", "g.-1.npy", "output.0.npy", "h.output.0.1.npy", "",
           "k l.0.npy", "m.0.npy\n", "n.7.npy", "input.1.npy", "p\nq.0.npy"]


@pytest.mark.parametrize("names", [
    CORNERS,
    [n for n in CORNERS if parse_golden_name(n) is not None and "\n" not in n],  # goldens only
    ["a.0.5.npy", "a.0.6.npy", "a.1.npy", "b_c.0.1.npy"],       # two files of one tensor
    ["c.01.5.npy", "c.1.6.npy", "c.2.npy"],                      # "01" and "1": one index
    ["v.05.0.1.npy", "v.05.1.1.npy", "w.0.npy"],                 # a zero-led field in the op
    ["1.2.npy", "1.2.3.npy", "9.0.npy"],                         # all-digit ops
    [],
])
def test_golden_names_counted_agrees_with_parsing_each_name(names):
    accepted, distinct = golden_names_counted(names)
    assert (accepted, distinct) == _name_by_name(names)
    keyed = golden_keys_in(names)
    assert accepted == [n for n, _, _ in keyed]


def test_golden_names_counted_on_random_folders():
    rng = random.Random(31)
    parts = ["conv", "dense_1", "x", "0", "01", "7", "input", "output", "a-b", ""]
    for _ in range(300):
        names = []
        for _ in range(rng.randint(0, 12)):
            fields = [rng.choice(parts) for _ in range(rng.randint(1, 4))]
            names.append(".".join(fields) + rng.choice([".npy", ".npy", ".npy", ".txt"]))
        assert golden_names_counted(names) == _name_by_name(names), names


def _write(path, size):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\0" * size)


def test_a_folder_of_regular_files_and_one_with_a_link_and_a_folder(tmp_path):
    plain, mixed = tmp_path / "plain", tmp_path / "mixed"
    for i in range(30):
        _write(plain / f"op_{i}.0.{1700 + i}.npy", i)
        _write(mixed / f"op_{i}.0.{1700 + i}.npy", i)
    _write(plain / "notes.txt", 3)
    (mixed / "sub").mkdir()
    _write(mixed / "sub" / "deep.0.npy", 5)
    os.symlink(mixed / "op_0.0.1700.npy", mixed / "linked.0.npy")
    os.symlink(mixed / "nowhere", mixed / "dangling.0.npy")
    os.mkdir(mixed / "looks_like.1.npy")

    index = scan_golden_dir(plain)
    (files,) = index.listing.folders
    assert sorted(files.names) == sorted(n for n in os.listdir(plain) if n.endswith(".npy"))
    assert files.subdirs == [] and index.warnings == []
    assert len(index) == 30 and index.total_bytes == sum(range(30))

    index = scan_golden_dir(mixed)
    top = index.listing.folders[0]
    assert sorted(top.names) == sorted([f"op_{i}.0.{1700 + i}.npy" for i in range(30)] + ["linked.0.npy"])
    assert sorted(top.subdirs) == ["looks_like.1.npy", "sub"]
    assert any("dangling.0.npy" in w for w in index.warnings)
    assert any("looks_like.1.npy: is a directory" in w for w in index.warnings)
    assert len(index) == 32  # 30 + the link + sub/deep.0.npy
    assert index.total_bytes == sum(range(30)) + 0 + 5  # the link: op_0's 0 bytes


def test_start_up_reads_each_folder_of_the_tree_once(sample_ws, tmp_path, monkeypatch):
    from precision_shell.model.session import Session

    root, manifest = sample_ws
    read, scandir = [], os.scandir

    def counting(path="."):
        read.append(os.path.realpath(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", counting)
    session = Session.open(root, output=tmp_path / "out")
    dumps_dir = os.path.realpath(root / manifest["paths"]["npu_dump_dir"])
    golden_dir = os.path.realpath(root / manifest["paths"]["golden_dir"])
    assert read.count(dumps_dir) == 1 and read.count(golden_dir) == 1
    assert session.dumps.op_file_count == manifest["totals"]["npu_dump_files"]
    assert folder_listing._remembered == {}  # nothing kept after start-up


def test_a_folder_changed_since_discovery_is_read_again(tmp_path):
    folder = tmp_path / "dumps"
    _write(folder / "Add.add_1.3.2.1700000000000001", 10)
    stamp = folder_listing.folder_stamp(folder)
    names, others = folder_listing.read_entries(folder)
    folder_listing.remember_entries(folder, stamp, names, others)
    _write(folder / "Mul.mul_1.4.2.1700000000000002", 20)
    os.utime(folder, ns=(stamp[2] + 10**9, stamp[2] + 10**9))  # a clock tick later, whatever the clock
    index = scan_dump_dir(folder)
    assert index.op_file_count == 2 and index.total_bytes == 30
    assert folder_listing._remembered == {}


@pytest.mark.parametrize("joined, ok", [
    ("a\0b", True), ("a\0...\0b", True), ("x", True), ("", True), ("a\0.b\0c.", True),
    ("a\0\0b", False), ("a\0.\0b", False), ("a\0..\0b", False), (".\0a", False), ("a\0..", False),
    ("\0a", False), ("a\0", False), (".", False), ("..", False), ("a/b", False),
])
def test_a_cached_listing_naming_the_folder_or_its_parent_is_refused(tmp_path, joined, ok):
    """A shared output folder's cache entry cannot make pshell read '', '.' or '..' as a file."""
    from precision_shell.model.load_cache import LoadCache

    cache = LoadCache(tmp_path / "cache", warnings := [])
    kind = folder_listing.listing_kind("test", lambda value, count: value)
    value = folder_listing.FolderFiles(tmp_path, joined, None, [], [])
    decoded = cache.value_of(kind, LoadCache.entry(kind, ("k",), value), ("k",), "entry")
    if ok:
        assert decoded is not None and decoded[0] == joined
        assert decoded[-1] == (len(joined.split("\0")) if joined else 0)  # the count
    else:
        assert decoded is None and len(warnings) == 1
