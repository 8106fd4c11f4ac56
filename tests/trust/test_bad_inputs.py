"""Each corrupt or hostile input of issue 11 gives one line naming the file and the reason, no
traceback, and the rest of the workspace is still processed.

Workspaces are copies of the sample generator's (tests/conftest.py), corrupted one way each.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import precision_shell
from precision_shell.errors import FormatError
from precision_shell.formats.dtypes import DT_FLOAT16
from precision_shell.formats.dump_file import DumpTensor, read_dump_header, write_dump
from precision_shell.formats.opdebug import encode_opdebug_new
from precision_shell.formats.quoting import SHOWN_CHARS
from precision_shell.formats.shapes import check_dims
from tests.conftest import json_docs, run_cli

# an error line: "error: " or "warning: ", the path, the reason; never longer than this
MAX_LINE = 400


@pytest.fixture
def ws(sample_ws, tmp_path) -> tuple[Path, dict]:
    """A fresh copy of the sample workspace (no output folder) to corrupt."""
    src, manifest = sample_ws
    root = tmp_path / "ws"
    shutil.copytree(src / "precision_data", root / "precision_data", ignore=shutil.ignore_patterns("temp"))
    return root, manifest


def lines_naming(text: str, path: Path | str) -> list[str]:
    return [line for line in text.splitlines() if str(path) in line]


def assert_one_line(err: str, out: str, path: Path | str, reason: str) -> str:
    """Exactly one ``error:``/``warning:`` line names ``path`` (with ``reason``): on stderr, or
    among a command's notes on stdout; no traceback anywhere."""
    assert "Traceback" not in err + out and "internal error" not in err + out
    named = [line for line in lines_naming(err + "\n" + out, path) if line.startswith(("error: ", "warning: "))]
    assert len(named) == 1, err
    assert reason in named[0] and len(named[0]) < MAX_LINE, named[0]
    return named[0]


def info_doc(capsys, root, *extra) -> tuple[int, dict, str]:
    rc, out, err = run_cli(capsys, root, *extra, "-c", "info", "--format", "json")
    (doc,) = json_docs(out)
    return rc, doc, err


def dump_path(root: Path, manifest: dict, op: str) -> Path:
    return root / next(o["dump_file"] for o in manifest["ops"] if o["name"] == op)


def dumped_ops(manifest: dict) -> list[str]:
    return [o["name"] for o in manifest["ops"] if o.get("dump_file")]


# -- JSON nesting, overlong numbers ---------------------------------------------------------------

def test_deeply_nested_fusion_result_is_one_error_and_the_rest_loads(ws, capsys):
    root, manifest = ws
    fusion = root / "precision_data/fusion/fusion_result.json"
    fusion.write_text("[" * 100_000 + "]" * 100_000)
    rc, doc, err = info_doc(capsys, root)
    assert rc == 1
    assert_one_line(err, "", fusion, "JSON nested too deeply")
    assert doc["fusion_graphs"] == 0
    assert doc["npu_dump_files"] == manifest["totals"]["npu_dump_files"]
    assert doc["golden_tensors"] == manifest["totals"]["golden_files"] and doc["ops"] > 0


def test_deeply_nested_graph_json_is_one_error_and_the_dumps_still_load(ws, capsys, tmp_path):
    root, manifest = ws
    graph = tmp_path / "graph.json"
    graph.write_text('{"graph": [' + '{"op": [' * 50_000 + "]}" * 50_000 + "]}")
    rc, doc, err = info_doc(capsys, root, "--graph", graph)
    assert rc == 1
    assert_one_line(err, "", graph, "nested too deeply")
    assert doc["ops"] == 0 and doc["npu_dump_files"] == manifest["totals"]["npu_dump_files"]


def test_deeply_nested_graph_text_op_is_one_error_when_read(ws, capsys, tmp_path):
    root, manifest = ws
    graph = tmp_path / "ge_proto_00000001_Build.txt"
    nested = 'attr { key: "k" value { func { name: "f" ' * 5000 + "} } }" * 5000
    graph.write_text('graph {\n  name: "g"\n  op {\n    name: "deep"\n    type: "T"\n    ' + nested + "\n  }\n}\n")
    rc, out, err = run_cli(capsys, root, "--graph", graph, "-c", "ni deep; info")
    assert rc == 1
    assert_one_line(err, out, graph, "nested too deeply")
    assert "deep" in out and f"{manifest['totals']['npu_dump_files']} dump files" in out


@pytest.mark.parametrize("count", ['"{}"', "{}"], ids=["string", "number"])
def test_a_5000_digit_fusion_count_gives_a_short_error(ws, capsys, count):
    root, manifest = ws
    fusion = root / "precision_data/fusion/fusion_result.json"
    text = re.sub(r'"match_times": "\d+"', '"match_times": ' + count.format("9" * 5000),
                  fusion.read_text(), count=1)
    assert "9" * 5000 in text
    fusion.write_text(text)
    rc, doc, err = info_doc(capsys, root)
    assert rc == 1
    line = assert_one_line(err, "", fusion, "match_times" if count.startswith('"') else "more than 4300 digits")
    assert "9" * (SHOWN_CHARS + 1) not in line
    assert doc["npu_dump_files"] == manifest["totals"]["npu_dump_files"] and doc["ops"] > 0


# -- dumps ----------------------------------------------------------------------------------------

def test_header_length_0_is_reported_and_the_op_stays_listed(ws, capsys):
    root, manifest = ws
    bad_op = manifest["lossy"]["op"]
    bad = dump_path(root, manifest, bad_op)
    blob = bad.read_bytes()
    bad.write_bytes(struct.pack("<Q", 0) + blob[8:])
    rc, out, err = run_cli(capsys, root, "-c", "ac")
    assert_one_line(err, out, bad, "header length 0")
    assert manifest["overflow"]["op"] in out  # the other dumps are still scanned
    rc, out, err = run_cli(capsys, root, "-c", f"pt {bad_op}:output:0")
    assert rc == 1
    assert err.strip() == f"error: {bad}: header length 0"
    other = next(op for op in dumped_ops(manifest) if op != bad_op)
    rc, out, err = run_cli(capsys, root, "-c", f"pt {other}:output:0")
    assert rc == 0, err
    # the op is listed (with its file) among the dumps, not dropped
    rc, doc, err = info_doc(capsys, root)
    assert doc["npu_dump_files"] == manifest["totals"]["npu_dump_files"]


def _replace_output(path: Path, original_shape: tuple[int, ...]) -> None:
    header = read_dump_header(path)
    write_dump(path, header.op_name, [], [DumpTensor(np.zeros((0,), np.float16), DT_FLOAT16, 2, original_shape)])


@pytest.mark.parametrize("original", [(30_000_000, 0), (2**40, 2**40, 0)])
def test_empty_tensor_with_a_huge_original_shape_is_refused_before_allocating(ws, capsys, original):
    root, manifest = ws
    bad_op = manifest["lossy"]["op"]
    bad = dump_path(root, manifest, bad_op)
    _replace_output(bad, original)
    start = time.perf_counter()
    rc, out, err = run_cli(capsys, root, "-c", f"pt {bad_op}:output:0")
    assert time.perf_counter() - start < 5  # was 11.6 s and 2.1 GB for (30000000, 0)
    assert rc == 1
    assert_one_line(err, out, bad, "original shape")
    assert "empty rows" in err
    other = next(op for op in dumped_ops(manifest) if op != bad_op)
    assert run_cli(capsys, root, "-c", f"pt {other}:output:0")[0] == 0


def test_zero_slice_step_is_a_usage_error(ws, capsys):
    root, manifest = ws
    op = dumped_ops(manifest)[0]
    rc, out, err = run_cli(capsys, root, "-c", f"pt {op}:output:0[::0]; pt {op}:output:0[:1]")
    assert rc == 2
    (line,) = [x for x in err.splitlines() if x]
    assert line == "error: bad slice '::0' in '[::0]': the step cannot be 0"
    assert "Traceback" not in err and out  # the second command still ran


def test_opdebug_data_len_beyond_the_record_is_an_error(ws, capsys):
    root, manifest = ws
    opdebug = root / manifest["overflow"]["opdebug_file"]
    record = encode_opdebug_new("AIC", {"task_id": manifest["overflow"]["task_id"], "status": 0x20,
                                        "data_len": 0xFFFFFFFF})
    write_dump(opdebug, "Node_OpDebug", [], [DumpTensor(np.frombuffer(record, np.uint8), 4, 2)])
    rc, out, err = run_cli(capsys, root, "-c", "ac")
    assert_one_line(err, out, opdebug, f"data_len {0xFFFFFFFF} is beyond the record")
    # the value scan of the dumps still finds the overflowing op
    assert manifest["overflow"]["op"] in out
    rc, doc, err = info_doc(capsys, root)
    assert [e for e in doc["errors"] if str(opdebug) in e] and doc["overflow_records"] == 0


# -- goldens, graph paths -------------------------------------------------------------------------

def test_golden_directory_and_symlink_loop_are_named(ws, capsys):
    root, manifest = ws
    golden_dir = root / manifest["paths"]["golden_dir"]
    as_dir, as_loop = sorted(golden_dir.glob("*.npy"))[:2]
    as_dir.unlink()
    as_dir.mkdir()
    as_loop.unlink()
    as_loop.symlink_to(as_loop.name)
    (golden_dir / "again").symlink_to(".")
    rc, doc, err = info_doc(capsys, root)
    assert rc == 1
    assert_one_line(err, "", as_dir, "is a directory")
    assert_one_line(err, "", as_loop, "Too many levels of symbolic links")
    assert_one_line(err, "", golden_dir / "again", "symbolic link loop")
    assert doc["golden_tensors"] == manifest["totals"]["golden_files"] - 2


def test_graph_paths_that_are_folders(ws, capsys, tmp_path):
    root, manifest = ws
    rc, out, err = run_cli(capsys, root, "--graph", tmp_path, "-c", "info")
    assert rc == 1 and err.strip() == f"error: {tmp_path}: is a directory, not a graph file"
    rc, out, err = run_cli(capsys, root, "--fusion", tmp_path, "-c", "info")
    assert rc == 1 and err.strip() == f"error: {tmp_path}: is a directory, not a fusion result file"
    folder = root / "precision_data/npu/debug_0/graph/ge_proto_00000009_Build.txt"
    folder.mkdir()
    rc, doc, err = info_doc(capsys, root)
    assert rc == 1
    assert_one_line(err, "", folder, "is a directory, not a graph file")
    assert doc["graphs"][0]["name"] == manifest["graph_name"]  # the real graph file still loads


# -- permissions ----------------------------------------------------------------------------------

def _run_without_file_permissions_bypass(root: Path, *args: str) -> subprocess.CompletedProcess:
    """pshell in a child process for which file permissions hold. As root they do not (root
    bypasses them through CAP_DAC_OVERRIDE/CAP_DAC_READ_SEARCH), so the child is started by
    ``setpriv`` with those two capabilities dropped from its bounding set: a real EACCES from the
    kernel, no monkeypatching. Not root: the child is simply this user."""
    cmd = [sys.executable, "-m", "precision_shell", str(root), *args]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv: permissions cannot be enforced")
        cmd = [setpriv, "--bounding-set", "-dac_override,-dac_read_search", "--"] + cmd
    env = dict(os.environ, PYTHONPATH=str(Path(precision_shell.__file__).parent.parent))
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.parametrize("part", ["npu_leaf", "golden", "overflow", "dump_file", "graph_file", "fusion_file"])
def test_unreadable_folder_or_file_is_named_not_taken_for_empty(ws, part):
    root, manifest = ws
    targets = {
        "npu_leaf": root / manifest["paths"]["npu_dump_dir"],
        "golden": root / manifest["paths"]["golden_dir"],
        "overflow": (root / manifest["overflow"]["opdebug_file"]).parent,
        "dump_file": dump_path(root, manifest, manifest["lossy"]["op"]),
        "graph_file": root / manifest["paths"]["graph_file"],
        "fusion_file": root / "precision_data/fusion/fusion_result.json",
    }
    locked = targets[part]
    mode = locked.stat().st_mode
    locked.chmod(0)
    try:
        done = _run_without_file_permissions_bypass(root, "-c", "info", "--format", "json")
        scan = _run_without_file_permissions_bypass(root, "-c", "ac") if part == "dump_file" else None
    finally:
        locked.chmod(mode)
    info = json.loads(done.stdout)
    totals = manifest["totals"]
    if part == "dump_file":  # read when scanned: a warning of ac, the other dumps scanned
        assert_one_line(scan.stderr, scan.stdout, locked, "cannot read: Permission denied")
        assert done.returncode == 0 and info["npu_dump_files"] == totals["npu_dump_files"]
        assert scan.returncode == 0 and manifest["overflow"]["op"] in scan.stdout
        return
    if part in ("graph_file", "fusion_file"):  # read at start-up: a load error, the rest loads
        assert_one_line(done.stderr, "", locked, "cannot read: Permission denied")
        assert done.returncode == 1 and info["npu_dump_files"] == totals["npu_dump_files"]
        assert (info["ops"] == 0) == (part == "graph_file")
        assert (info["fusion_graphs"] == 0) == (part == "fusion_file")
        return
    assert_one_line(done.stderr, "", locked, "cannot list folder (Permission denied)")
    assert done.returncode == 1  # said at start-up, as a load error
    assert (info["npu_dump_files"] == 0) == (part == "npu_leaf")
    assert (info["golden_tensors"] == 0) == (part == "golden")
    assert (info["overflow_records"] == 0) == (part == "overflow")
    if part == "npu_leaf":
        assert "cannot list folder (Permission denied)" in info["missing"][0]


@pytest.mark.parametrize("locked_rel,named_rel,empty", [
    ("precision_data/tf", "precision_data/tf/dump", "golden_tensors"),
    ("precision_data/npu/debug_0", "precision_data/npu/debug_0/dump", "npu_dump_files"),
    ("precision_data/fusion", "precision_data/fusion/fusion_result.json", "fusion_graphs"),
])
def test_a_parent_folder_without_search_permission_is_named(ws, locked_rel, named_rel, empty):
    """A part below a folder that cannot be searched (mode 000) cannot even be looked at: it is
    named with the reason, not reported absent."""
    root, manifest = ws
    locked = root / locked_rel
    mode = locked.stat().st_mode
    locked.chmod(0)
    try:
        done = _run_without_file_permissions_bypass(root, "-c", "info", "--format", "json")
    finally:
        locked.chmod(mode)
    assert_one_line(done.stderr, "", root / named_rel, "cannot access (Permission denied)")
    assert done.returncode == 1
    info = json.loads(done.stdout)
    counts = {key: info[key] for key in ("golden_tensors", "npu_dump_files", "fusion_graphs")}
    assert [key for key, n in counts.items() if n == 0] == [empty]


def test_fifos_planted_as_inputs_are_named_and_never_opened(ws):
    """A FIFO blocks open() until a writer comes: one under a golden's, a dump's, a graph's and
    the fusion report's name must be named and skipped, not hang start-up or a command (the
    command runs in a child with a timeout, so a regression fails instead of hanging)."""
    root, manifest = ws
    golden = sorted((root / manifest["paths"]["golden_dir"]).glob("*.npy"))[0]
    dump = dump_path(root, manifest, manifest["lossy"]["op"])
    graph = root / "precision_data/npu/debug_0/graph/ge_proto_00000009_Build.txt"
    fusion = root / "precision_data/fusion/fusion_result.json"
    for path in (golden, dump, fusion):
        path.unlink()
    for path in (golden, dump, graph, fusion):
        os.mkfifo(path)
    env = dict(os.environ, PYTHONPATH=str(Path(precision_shell.__file__).parent.parent))
    done = subprocess.run([sys.executable, "-m", "precision_shell", str(root), "-c", "info; ac; vc"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert_one_line(done.stderr, done.stdout, golden, "not a regular file")
    assert_one_line(done.stderr, done.stdout, dump, "not a regular file")  # vc's warning
    assert_one_line(done.stderr, done.stdout, graph, "cannot read: not a regular file")
    assert_one_line(done.stderr, done.stdout, fusion, "cannot read: not a regular file")
    assert done.returncode == 1
    totals = manifest["totals"]
    assert f"{totals['npu_dump_files'] - 1} dump files" in done.stdout  # the others are listed
    assert f"golden    {totals['golden_files'] - 1} tensors" in done.stdout
    assert manifest["overflow"]["op"] in done.stdout  # ac still scans the other dumps


@pytest.mark.parametrize("shape,ok", [
    ((0, 4096, 4096), True),            # an empty batch of big matrices: [] to show, cheap
    ((1024, 1024, 0), True),            # the most empty rows allowed
    ((1024, 1025, 0), False), ((30_000_000, 0), False), ((2**40, 2**40, 0), False),
    ((0, 2**40, 2**40), False),         # numpy cannot describe it
    ((3, -1), False), ((), True), ((2, 3), True),
])
def test_shape_check_bounds_empty_shapes_only(shape, ok):
    if ok:
        assert check_dims(shape, "f", "shape") == int(np.prod(shape, dtype=object))
        np.empty(shape, np.float16).tolist()  # and it is cheap to build and list
    else:
        with pytest.raises(FormatError, match=r"^f: shape \["):
            check_dims(shape, "f", "shape")


def test_a_link_back_up_the_dump_tree_is_named_and_not_a_second_dump_set(ws, capsys):
    root, manifest = ws
    leaf = root / manifest["paths"]["npu_dump_dir"]
    (leaf / "up").symlink_to("..")
    rc, doc, err = info_doc(capsys, root)
    assert rc == 1
    assert "symbolic link to" in assert_one_line(err, "", leaf / "up", "a folder listed already")
    assert doc["npu_dump_files"] == manifest["totals"]["npu_dump_files"]
    assert doc["active"]["path"] == str(leaf)  # labelled by its real path, not via the link


def test_mapping_csv_naming_a_5000_digit_dump_is_a_warning(ws, capsys):
    """mapping.csv is file content: the real name of a hashed dump is not bounded like a file
    name, and a 5000-digit field made int() fail at start-up."""
    root, manifest = ws
    dump = dump_path(root, manifest, manifest["lossy"]["op"])
    hashed = dump.with_name("123456")
    dump.rename(hashed)
    (dump.parent / "mapping.csv").write_text(f"123456,{dump.name.rsplit('.', 1)[0]}.{'9' * 5000}\n")
    rc, doc, err = info_doc(capsys, root)
    assert "Traceback" not in err
    (line,) = [e for e in doc["errors"] if str(hashed) in e]
    assert "not a dump file name" in line and len(line) < MAX_LINE
    assert doc["npu_dump_files"] == manifest["totals"]["npu_dump_files"] - 1


def test_a_5000_digit_input_index_in_the_graph_is_one_short_warning(ws, capsys):
    root, manifest = ws
    graph = root / manifest["paths"]["graph_file"]
    text = graph.read_text()
    first = re.search(r'\n    input: "([^"]+):0"', text)
    graph.write_text(text.replace(first.group(0), f'\n    input: "{first.group(1)}:{"9" * 5000}"', 1))
    rc, doc, err = info_doc(capsys, root)
    assert rc == 1
    line = assert_one_line(err, "", graph, "cannot read input")
    assert "9" * (SHOWN_CHARS + 1) not in line
    assert doc["graphs"][0]["name"] == manifest["graph_name"] and doc["ops"] > 0


FRAMEWORK_SAMPLE = Path(__file__).resolve().parents[2] / "sample_data" / "framework"


@pytest.mark.skipif(not (FRAMEWORK_SAMPLE / "target_bf16").is_dir(), reason="framework sample not present")
def test_fifos_planted_in_an_msprobe_dump_are_named_and_never_opened(tmp_path):
    """The framework readers too: a FIFO as the golden's dump.json, then as a target tensor file,
    is one line; the rest loads and compares (children with a timeout: a regression fails)."""
    target, golden = tmp_path / "target", tmp_path / "golden"
    shutil.copytree(FRAMEWORK_SAMPLE / "target_bf16", target)
    shutil.copytree(FRAMEWORK_SAMPLE / "golden_fp32", golden)
    env = dict(os.environ, PYTHONPATH=str(Path(precision_shell.__file__).parent.parent))

    def run(planted: Path, commands: str) -> str:
        kept = planted.read_bytes()
        planted.unlink()
        os.mkfifo(planted)
        done = subprocess.run([sys.executable, "-m", "precision_shell", str(target), "--golden", str(golden),
                               "-o", str(tmp_path / "out"), "-c", commands],
                              capture_output=True, text=True, env=env, timeout=60)
        planted.unlink()
        planted.write_bytes(kept)
        text = done.stderr + done.stdout
        assert "Traceback" not in text
        named = [line for line in text.splitlines()
                 if str(planted) in line and line.startswith(("error: ", "warning: "))]
        assert len(named) == 1 and "not a regular file" in named[0], text
        return text

    text = run(golden / "step0/rank0/dump.json", "info")
    assert "target_bf16" not in text and "entries" in text      # the target still loaded
    tensor = target / "step0/rank0/dump_tensor_data/Functional.softmax.0.forward.output.0.pt"
    run(tensor, "vc")
    rows = list(csv.DictReader((tmp_path / "out" / "compare_result_rank0.csv").open()))
    compared = {r["NPU Name"] for r in rows if r["Cosine"] not in ("", "N/A", "nan", "unsupported")}
    assert len(compared) > 200 and "Functional.softmax.0.forward.output.0" not in compared
