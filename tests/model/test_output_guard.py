"""The output guard: no writer (export -o, > and >>, dc -o, pt -w, ni -s, vc's CSV, the cache)
writes inside precision_data/ (except temp/pshell) or an input folder, or over an input file;
symlinks and `..` are resolved first; files get the mode the umask gives; a redirect into a
missing folder is one error line and the batch goes on."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from precision_shell.atomic_write import write_atomic
from tests.conftest import json_docs, run_cli

OP = "conv1/Conv2D"
GOLDEN = "golden:fc1/BiasAdd:0"
REFUSAL = re.compile(r"^error: (?P<path>.+?): refusing to write "
                     r"(?:inside the input folder (?P<folder>.+?)|over the input file (?P<file>.+?)) \(")


@pytest.fixture(scope="module")
def ws(sample_ws, tmp_path_factory) -> Path:
    """A copy of the sample workspace with the formats.md §5 folders it lacks (empty ones, and
    a vendor compare CSV made by pshell's own `vc`)."""
    src, _ = sample_ws
    root = tmp_path_factory.mktemp("guard_ws")
    shutil.copytree(src / "precision_data", root / "precision_data")
    pd = root / "precision_data"
    for extra in ("npu/debug_0/prof", "tf/graph", "pt/npu", "temp/decode"):
        (pd / extra).mkdir(parents=True)
    out = root.parent / f"{root.name}_out"
    assert run_cli_quiet(root, "-o", out, "-c", "vc") == 0
    csv = next((out / "compare").glob("result_*.csv"))
    stamp = csv.stem.split("_")[1]
    (pd / "temp" / "vector_compare" / stamp).mkdir(parents=True)
    shutil.copy(csv, pd / "temp" / "vector_compare" / stamp / csv.name)
    return root


def run_cli_quiet(*argv) -> int:
    from precision_shell.cli import main

    return main([str(a) for a in argv])


def snapshot(root: Path) -> dict:
    """Every file's bytes (hashed) and mtime and every folder's listing under precision_data,
    pshell's own temp/pshell left out."""
    pd = root / "precision_data"
    own = pd / "temp" / "pshell"
    state = {}
    for folder, dirs, files in os.walk(pd):
        here = Path(folder)
        if here == own or own in here.parents:
            continue
        state[str(here)] = sorted(name for name in dirs + files if here / name != own)
        for name in files:
            path = here / name
            state[str(path)] = (hashlib.sha1(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns)
    return state


def refusals(err: str) -> list[re.Match]:
    lines = err.strip().splitlines()
    found = [REFUSAL.match(line) for line in lines]
    assert all(found), f"not one refusal line each: {lines}"
    return found


def assert_named_input_holds(match: re.Match, target: Path) -> None:
    """The folder a refusal names really holds the target (both resolved), or the file is it."""
    real = Path(os.path.realpath(target))
    if match["file"]:
        assert Path(os.path.realpath(match["file"])) == real
    else:
        assert real.is_relative_to(Path(os.path.realpath(match["folder"])))


PLAIN = ["", "npu", "npu/debug_0", "npu/debug_0/dump", "npu/debug_0/graph", "npu/debug_0/prof",
         "overflow", "overflow/dump", "tf", "tf/dump", "tf/graph", "pt/npu", "fusion", "temp",
         "temp/decode", "temp/vector_compare"]
FOLDERS = PLAIN + ["<dump leaf>", "<dump time/device/model>", "<overflow leaf>", "<vendor CSV folder>"]


def folder_of(ws: Path, label: str) -> Path:
    """A folder of formats.md §5 in the workspace (labels in <> are found in the tree)."""
    pd = ws / "precision_data"
    if label in PLAIN:
        return pd / label
    leaf = next(p for p in (pd / "npu/debug_0/dump").rglob("*") if p.is_file()).parent
    return {"<dump leaf>": leaf,
            "<dump time/device/model>": leaf.parent.parent,
            "<overflow leaf>": next(p for p in (pd / "overflow").rglob("*") if p.is_file()).parent,
            "<vendor CSV folder>": next((pd / "temp/vector_compare").glob("*/result_*.csv")).parent,
            }[label]


@pytest.mark.parametrize("label", FOLDERS)
def test_every_explicit_writer_is_refused_in_every_input_folder(ws, label, capsys, tmp_path):
    folder = folder_of(ws, label)
    before = snapshot(ws)
    targets = [folder / "overflow.csv", folder / "info.txt", folder / "info.txt", folder / "dc",
               folder, folder / "t.npy"]
    line = (f"ac; export overflow -o {targets[0]}; info > {targets[1]}; info >> {targets[2]}; "
            f"dc {OP} -o {targets[3]}; dc {OP} -o {targets[4]}; pt {GOLDEN} -w {targets[5]}")
    rc, _, err = run_cli(capsys, ws, "-c", line)
    assert rc == 1
    found = refusals(err)
    assert [Path(m["path"]) for m in found] == targets
    for match, target in zip(found, targets):
        assert_named_input_holds(match, target)
    assert snapshot(ws) == before


OWN_FOLDER_OK = {"temp", "temp/decode"}   # -o there: pshell's own output folder under temp/


@pytest.mark.parametrize("label", [f for f in FOLDERS if f not in OWN_FOLDER_OK])
def test_an_output_folder_inside_the_inputs_takes_nothing(ws, label, capsys):
    folder = folder_of(ws, label)
    before = snapshot(ws)
    rc, _, err = run_cli(capsys, ws, "-o", folder, "-c",
                         f"ni {OP} -s 1; vc; dc {OP}; pt {GOLDEN} -w; ac; export overflow")
    assert rc == 1
    found = refusals(err)
    assert len(found) == 5          # ni -s, vc's CSV, dc, pt -w, export
    assert all("choose another output folder" in line for line in err.strip().splitlines())
    for match in found:
        assert_named_input_holds(match, Path(match["path"]))
    assert snapshot(ws) == before


def test_pshell_output_folder_under_temp_is_allowed(ws, capsys):
    own = ws / "precision_data" / "temp" / "mine"
    try:
        rc, _, err = run_cli(capsys, ws, "-o", own, "-c", f"ni {OP} -s 1; vc; info > {own}/i.txt")
        assert rc == 0, err
        assert (own / "i.txt").read_text().strip() and list((own / "compare").glob("result_*.csv"))
        assert list((own / "graphs").glob("*.dot"))
    finally:
        shutil.rmtree(own, ignore_errors=True)


def input_files(ws: Path) -> list[Path]:
    pd = ws / "precision_data"
    dump = next(p for p in (pd / "npu/debug_0/dump").rglob("*") if p.is_file())
    return [pd / "fusion" / "fusion_result.json", pd / "npu/debug_0/graph/ge_proto_00000001_Build.txt",
            sorted((pd / "tf" / "dump").glob("*.npy"))[0], dump,
            next((pd / "temp/vector_compare").glob("*/result_*.csv"))]


def test_no_writer_replaces_an_input_file(ws, capsys, tmp_path):
    before = snapshot(ws)
    for target in input_files(ws):
        rc, _, err = run_cli(capsys, ws, "-o", tmp_path, "-c",
                             f"vcs; export suspects -o {target} --format json; info > {target}; "
                             f"info >> {target}; pt {GOLDEN} -w {target}")
        assert rc == 1
        found = refusals(err)
        saved = target if target.suffix == ".npy" else target.with_name(target.name + ".npy")  # pt -w
        assert [Path(m["path"]) for m in found] == [target] * 3 + [saved]
        for match, written in zip(found, [target] * 3 + [saved]):
            assert_named_input_holds(match, written)
    assert snapshot(ws) == before


def test_script_and_config_files_are_inputs(ws, capsys, tmp_path):
    script, config = tmp_path / "script.txt", tmp_path / "config.ini"
    script.write_text(f"info > {script}\ninfo > {config}\n")
    config.write_text("[pshell]\nlimit = 5\n")
    texts = (script.read_bytes(), config.read_bytes())
    rc, _, err = run_cli(capsys, ws, "-o", tmp_path / "out", "-f", script, "--config", config)
    assert rc == 1
    assert [m["file"] for m in refusals(err)] == [str(script), str(config)]
    assert (script.read_bytes(), config.read_bytes()) == texts


def test_symlinks_into_the_inputs_are_refused(ws, capsys, tmp_path):
    pd = ws / "precision_data"
    (tmp_path / "golden_link").symlink_to(pd / "tf" / "dump")
    (tmp_path / "report.json").symlink_to(pd / "fusion" / "fusion_result.json")
    (tmp_path / "dangling.txt").symlink_to(pd / "tf" / "dump" / "new.txt")   # not there yet
    before = snapshot(ws)
    targets = [tmp_path / "golden_link" / "x.txt", tmp_path / "report.json", tmp_path / "dangling.txt"]
    rc, _, err = run_cli(capsys, ws, "-o", tmp_path / "out", "-c",
                         f"info > {targets[0]}; vcs; export suspects -o {targets[1]} --format json; "
                         f"info >> {targets[2]}")
    assert rc == 1
    found = refusals(err)
    assert [Path(m["path"]) for m in found] == targets
    assert [bool(m["file"]) for m in found] == [False, True, False]
    for match, target in zip(found, targets):
        assert_named_input_holds(match, target)
    assert snapshot(ws) == before and not (pd / "tf" / "dump" / "new.txt").exists()
    # the output folder itself behind a link: refused too, nothing written through it
    rc, _, err = run_cli(capsys, ws, "-o", tmp_path / "golden_link", "-c", f"dc {OP}")
    assert rc == 1 and "golden .npy folder" in err
    assert snapshot(ws) == before


def test_dotdot_paths_are_resolved(ws, capsys, tmp_path):
    pd = ws / "precision_data"
    sneaky = tmp_path / "no" / ".." / ".." / os.path.relpath(pd / "fusion", tmp_path.parent) / "x.txt"
    before = snapshot(ws)
    rc, _, err = run_cli(capsys, ws, "-o", tmp_path / "out", "-c", f"info > {sneaky}")
    assert rc == 1 and refusals(err)[0]["folder"] == str(pd)   # precision_data: only temp/pshell
    assert snapshot(ws) == before
    # and `..` that ends outside the inputs is fine
    fine = pd / "tf" / ".." / ".." / ".." / tmp_path.name / "ok.txt"
    rc, _, err = run_cli(capsys, ws, "-o", tmp_path / "out", "-c", f"info > {fine}")
    assert rc == 0, err
    assert (tmp_path / "ok.txt").read_text().strip()


def test_allowed_locations(ws, capsys, tmp_path):
    own = ws / "precision_data" / "temp" / "pshell"
    rc, _, err = run_cli(capsys, ws, "-c", f"dc {OP}; pt {GOLDEN} -w; info > {own}/info.txt; "
                                          f"ac; export overflow; export overflow -o {tmp_path}/o.csv")
    assert rc == 0, err
    assert list((own / "decode").glob("*.npy")) and (own / "golden_fc1_BiasAdd_0.npy").is_file()
    assert (own / "info.txt").read_text() and (own / "overflow.csv").read_text() == \
        (tmp_path / "o.csv").read_text()


def test_missing_parent_folder_is_one_line_and_the_batch_goes_on(ws, capsys, tmp_path):
    missing = tmp_path / "missing" / "dir"
    rc, out, err = run_cli(capsys, ws, "-o", tmp_path / "out", "--format", "json", "-c",
                           f"info > {missing}/x.txt; info; ac; export overflow -o {missing}/o.csv; "
                           f"pt {GOLDEN} -w {missing}/t.npy; dc {OP} -o {missing}/d")
    assert rc == 1
    assert err.splitlines() == [f"error: {missing}/{name}: folder {missing} does not exist"
                                for name in ("x.txt", "o.csv", "t.npy", "d")]
    assert json_docs(out)[0]["output_dir"] == str(tmp_path / "out")   # the second `info` ran
    assert not (tmp_path / "missing").exists()


def test_config_set_output_inside_the_inputs_is_refused_and_not_kept(ws, capsys, tmp_path):
    config = tmp_path / "config.ini"
    rc, _, err = run_cli(capsys, ws, "--config", config, "-c",
                         f"config set output {ws / 'precision_data' / 'tf'}; config show output")
    assert rc == 1 and len(refusals(err)) == 1
    assert not config.exists()


@pytest.mark.parametrize("mask", [0o022, 0o077], ids=["umask022", "umask077"])
def test_files_follow_the_umask(ws, tmp_path, mask):
    out = tmp_path / "out"
    line = f"ac; export overflow -o {tmp_path}/o.csv; info > {tmp_path}/i.txt; vc; dc {OP}; pt {GOLDEN} -w"
    proc = subprocess.run([sys.executable, "-m", "precision_shell", str(ws), "-o", str(out), "-c", line],
                          capture_output=True, text=True, preexec_fn=lambda: os.umask(mask), timeout=120)
    assert proc.returncode == 0, proc.stderr
    written = [tmp_path / "o.csv", tmp_path / "i.txt", *out.glob("compare/*.csv"), *out.glob("decode/*"),
               *out.glob("*.npy"), *out.glob("cache/dumps-*")]
    assert len(written) >= 6
    assert {stat.S_IMODE(p.stat().st_mode) for p in written} == {0o666 & ~mask}


def test_rewriting_a_file_keeps_its_mode(tmp_path):
    target = tmp_path / "kept.txt"
    target.write_text("old")
    target.chmod(0o640)
    write_atomic(target, lambda fh: fh.write("new"))
    assert target.read_text() == "new" and stat.S_IMODE(target.stat().st_mode) == 0o640


def test_paths_given_on_the_command_line_are_inputs(ws, capsys, tmp_path):
    """--npu/--golden/--overflow folders are input trees; --graph/--fusion files are never
    replaced, while new files beside them are fine (such a file often sits in the user's own
    working folder, where `vcs > low.txt` must work)."""
    pd = ws / "precision_data"
    given = tmp_path / "given"
    leaf = next(p for p in (pd / "npu/debug_0/dump").rglob("*") if p.is_file()).parent
    shutil.copytree(leaf, given / "npu" / "run" / "0")
    shutil.copytree(pd / "tf" / "dump", given / "golden")
    shutil.copytree(pd / "overflow", given / "overflow")
    shutil.copy(pd / "npu/debug_0/graph/ge_proto_00000001_Build.txt", given / "graph.txt")
    (given / "fusion").mkdir()
    shutil.copy(pd / "fusion" / "fusion_result.json", given / "fusion" / "fusion_result.json")
    (given / "fusion" / "sub").mkdir()
    refused = [given / "npu" / "x.txt", given / "npu" / "run" / "x.txt", given / "golden" / "x.txt",
               given / "overflow" / "dump" / "x.txt", given / "graph.txt",
               given / "fusion" / "fusion_result.json"]
    kept = {p: p.read_bytes() for p in refused if p.exists()}   # the graph and fusion files
    fine = [given / "x.txt", given / "fusion" / "x.txt", given / "fusion" / "sub" / "ok.txt"]
    line = "; ".join(f"info > {p}" for p in refused + fine)
    (tmp_path / "root").mkdir()     # a workspace folder of its own: every part comes from a flag
    rc, _, err = run_cli(capsys, tmp_path / "root", "--npu", given / "npu", "--golden", given / "golden",
                         "--overflow", given / "overflow", "--graph", given / "graph.txt",
                         "--fusion", given / "fusion" / "fusion_result.json", "-o", tmp_path / "out",
                         "-c", line)
    assert rc == 1
    found = refusals(err)
    assert [Path(m["path"]) for m in found] == refused
    for match, target in zip(found, refused):
        assert_named_input_holds(match, target)
    assert len(kept) == 2 and all(p.read_bytes() == data for p, data in kept.items())
    assert not [p for p in refused if p.exists() and p not in kept]
    assert all(p.read_text().strip() for p in fine)
