"""Issue 22 (part A, bad data): what a workspace holds that is not what pshell expects is said,
one line naming it, and the rest goes on: NaN/Inf statistics compare, a bad dump.json entry is
skipped while the others load, odd dump names and INI problems are counted or named, a golden
.npy that is not numbers names its file, and a planted output-folder link is not followed."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from precision_shell.config import Config, load_config
from precision_shell.errors import FormatError
from precision_shell.formats.golden_npy import read_npy_header
from precision_shell.formats.msprobe.dump import read_rank_dump
from precision_shell.formats.msprobe.layout import find_rank_dirs
from tests.conftest import run_cli

FRAMEWORK_SAMPLE = Path(__file__).resolve().parents[2] / "sample_data" / "framework"


# --- NaN/Inf statistics in dump.json are values --------------------------------------------------

def _tensor_leaves(node, found):
    """Every dict holding a "Max" in a dump.json entry, in document order."""
    if isinstance(node, dict):
        if "Max" in node:
            found.append(node)
        for v in node.values():
            _tensor_leaves(v, found)
    elif isinstance(node, list):
        for v in node:
            _tensor_leaves(v, found)
    return found


def _int_leaves(node, found):
    """The tensor leaves of an integer dtype in a dump.json ``data`` tree, in document order."""
    if isinstance(node, dict):
        if str(node.get("dtype", "")).startswith("torch.int"):
            found.append(node)
        else:
            for v in node.values():
                _int_leaves(v, found)
    elif isinstance(node, list):
        for v in node:
            _int_leaves(v, found)
    return found


@pytest.mark.skipif(not (FRAMEWORK_SAMPLE / "target_bf16").is_dir(), reason="framework sample not present")
@pytest.mark.parametrize("target,golden,key", [("stats_target_bf16", "stats_golden_fp32", "NPU max"),
                                               ("target_bf16", "golden_fp32", "NPU max")])
def test_nan_and_inf_statistics_on_integer_leaves_compare(tmp_path, capsys, target, golden, key):
    """NaN/-Infinity/Infinity and a 400-digit integer as Max/Min/Mean/Norm of integer leaves
    (json's NaN literals): framework vc (and vcs on tensors) compare the pair; the cells say so."""
    work = tmp_path / target
    shutil.copytree(FRAMEWORK_SAMPLE / target, work)
    dump = next(work.glob("step0/*/dump.json"))
    doc = json.loads(dump.read_text())
    leaves = _int_leaves(doc["data"], [])
    assert len(leaves) >= 2
    leaves[0].update(Max=float("nan"), Min=float("-inf"), Mean=float("inf"), Norm=float("nan"))
    leaves[1].update(Max=10**400, Min=-10**400)
    dump.write_text(json.dumps(doc))       # writes the NaN / Infinity literals msprobe writes
    assert "NaN" in dump.read_text() and "-Infinity" in dump.read_text()
    out_dir = tmp_path / "out"
    rc, out, err = run_cli(capsys, work, "--golden", FRAMEWORK_SAMPLE / golden, "-o", out_dir,
                           "-c", "vc" if target.startswith("stats") else "vc; vcs")
    assert "internal error" not in out + err and "Traceback" not in out + err
    rows = list(csv.DictReader(next(out_dir.glob("compare_result_*.csv")).open()))
    assert len(rows) > 200      # every other row still there
    # the cells as msprobe writes them (its CSV pads some with a space)
    cells = [(r[key].strip().lower(), r["NPU min"].strip()) for r in rows]
    assert cells.count(("nan", "-inf")) == 1
    assert cells.count(("inf", "-inf")) >= 1      # the 400-digit integers


# --- partial reads keep the rest -------------------------------------------------------------------

@pytest.mark.skipif(not (FRAMEWORK_SAMPLE / "target_bf16").is_dir(), reason="framework sample not present")
def test_bad_dump_json_entries_are_skipped_one_line_each_and_the_rest_loads(tmp_path):
    """A copy of the sample dump.json with, among its entries, one nested 5,000 deep, one with a
    5,000-digit number, one holding a byte that is not UTF-8, one with a syntax error, and the
    first entry given again (changed) at the end."""
    rank_dir = tmp_path / "step0" / "rank0"
    shutil.copytree(FRAMEWORK_SAMPLE / "target_bf16" / "step0" / "rank0", rank_dir)
    doc = json.loads((rank_dir / "dump.json").read_text())
    entries = list(doc["data"].items())
    parts = [json.dumps(name) + ": " + json.dumps(body) for name, body in entries]
    bad = {3: ': {"output": ' + "[" * 5000 + "]" * 5000 + "}",
           7: ': {"output": [{"type": "int", "value": ' + "9" * 5000 + "}]}",
           11: ': {"output": [{"type": "str", "value": "@BYTE@"}]}',
           15: ': {"output": [1.2.3]}'}
    for i, body in bad.items():
        parts[i] = json.dumps(entries[i][0]) + body
    first_name, first_body = entries[0]
    again = json.loads(json.dumps(first_body))
    tensors = _tensor_leaves(again, [])
    tensors[0]["Max"] = 12345.5           # tells the second copy from the first
    parts.append(json.dumps(first_name) + ": " + json.dumps(again))
    header = {k: v for k, v in doc.items() if k != "data"}
    text = json.dumps(header)[:-1] + ', "data": {' + ", ".join(parts) + "}}"
    (rank_dir / "dump.json").write_bytes(text.encode().replace(b"@BYTE@", b"caf\xe9"))

    rank = read_rank_dump(find_rank_dirs(rank_dir)[0])
    want = [name for i, (name, _) in enumerate(entries) if i not in bad]
    loaded = [e.name for e in rank.entries]
    assert loaded[:len(want)] == want          # in order, nothing after a bad one lost
    # then the skipped entries' tensor files, recovered from their names (with a line each)
    assert set(loaded[len(want):]) <= {entries[i][0] for i in bad}
    assert max(x.max for x in rank.entries[0].leaves if x.max is not None) == 12345.5   # the last copy kept
    json_path = rank_dir / "dump.json"
    lines = [w for w in rank.warnings if w.startswith(f"{json_path}: ")]
    reasons = {3: "nests too deeply", 7: "a number of more than 4300 digits", 11: "not UTF-8 text",
               15: "invalid JSON"}
    for i, reason in reasons.items():
        named = [w for w in lines if f"entry {entries[i][0]}:" in w]
        assert len(named) == 1 and reason in named[0], (i, lines)
    dup = [w for w in lines if "duplicate" in w]
    assert dup == [f"{json_path}: 1 duplicate entries (the last of each kept, as json.load keeps it): {first_name}"]
    assert len(lines) == 5


@pytest.mark.skipif(not (FRAMEWORK_SAMPLE / "target_bf16").is_dir(), reason="framework sample not present")
@pytest.mark.parametrize("layout", ["msprobe", "compact"])
def test_a_duplicate_entry_in_an_otherwise_valid_dump_json_is_said(tmp_path, layout):
    """A whole, valid file is one json.loads (which keeps the last of a repeated name silently):
    the repeat is still counted, in msprobe's indented layout and in a compact one."""
    rank_dir = tmp_path / "step0" / "rank0"
    shutil.copytree(FRAMEWORK_SAMPLE / "target_bf16" / "step0" / "rank0", rank_dir)
    doc = json.loads((rank_dir / "dump.json").read_text())
    names = list(doc["data"])
    early = json.dumps({names[1]: {"output": []}}, indent=1 if layout == "msprobe" else None)
    text = json.dumps(doc, indent=1) if layout == "msprobe" else json.dumps(doc)
    opening = '"data": {\n' if layout == "msprobe" else '"data": {'
    inserted = early[1:-1].strip("\n") + ","
    text = text.replace(opening, opening + (inserted.replace("\n", "\n ") + "\n" if layout == "msprobe" else inserted), 1)
    assert json.loads(text)["data"].keys() == doc["data"].keys()     # valid JSON, same names
    (rank_dir / "dump.json").write_text(text)
    rank = read_rank_dump(find_rank_dirs(rank_dir)[0])
    # the name keeps its first place (dict order), the value of its last copy (the original)
    assert [e.name for e in rank.entries] == [names[1], names[0]] + names[2:]
    assert len(rank.entries[0].leaves) > 0
    json_path = rank_dir / "dump.json"
    assert rank.warnings == [f"{json_path}: 1 duplicate entries (the last of each kept, as json.load "
                             f"keeps it): {names[1]}"]

def test_unparseable_dump_names_are_said_once_with_a_count(ws_copy, capsys):
    folder = next(p.parent for p in (ws_copy / "precision_data" / "npu").rglob("*.*.*.*") if p.is_file()
                  and p.parent.name == "0")
    dump = next(p for p in folder.iterdir() if p.is_file())
    for odd in ("Conv2D.conv1.12x.1706193202306372", "Add.a.b"):
        shutil.copy(dump, folder / odd)
    (folder / f"{dump.name}.output.0.npy").write_bytes(b"")    # a decoded sibling: not a dump, no word
    for command in ("info", "vc"):      # info's panel lists it; vc's run says it once on stderr
        rc, out, err = run_cli(capsys, ws_copy, "-c", command)
        named = [line.strip() for line in (out + err).splitlines() if str(folder) in line]
        assert len(named) == 1 and named[0].endswith(
            f"{folder}: 2 file names not in the dump name form type.name.task[.stream].timestamp, "
            f"skipped (e.g. 'Add.a.b')"), (command, out, err)


@pytest.fixture
def ws_copy(sample_ws, tmp_path) -> Path:
    src, _ = sample_ws
    root = tmp_path / "ws"
    shutil.copytree(src / "precision_data", root / "precision_data", ignore=shutil.ignore_patterns("temp"))
    return root


def test_config_problems_are_one_warning_each_never_fatal(tmp_path, ws_copy, capsys):
    path = tmp_path / "c.ini"
    path.write_text("[pshell]\nlimit = 3\nthreshold = 0.9\nthis line is junk\nlimit = 7\n"
                    "[pshel]\npager = off\n[pshell]\nthreshold = 2\n", encoding="utf-8")
    cfg = load_config(path)
    # the good lines count, the last of a key: limit 7; threshold's last value (2) is bad: default
    assert (cfg.limit, cfg.threshold, cfg.pager) == (7, Config().threshold, True)
    want = [f"{path}: line 4: not 'key = value' ('this line is junk'), skipped",
            f"{path}: line 5: [pshell] limit given again (line 2); the last one counts",
            f"{path}: line 8: section [pshell] given again (line 1); read as one section",
            f"{path}: line 9: [pshell] threshold given again (line 3); the last one counts",
            f"{path}: section [pshel] is not read (sections: [pshell], [profiles])"]
    assert cfg.warnings[:5] == want and len(cfg.warnings) == 6
    assert "threshold" in cfg.warnings[5] and "'2'" in cfg.warnings[5]
    # batch: the same lines on stderr, and the run goes on (a duplicate key used to abort it)
    rc, out, err = run_cli(capsys, ws_copy, "--config", path, "-c", "info")
    assert rc == 0 and [line for line in err.splitlines() if str(path) in line] == [f"warning: {w}" for w in cfg.warnings]


@pytest.mark.parametrize("array,kind", [(np.array(["ab", "c"]), "string"), (np.array([b"x"]), "bytes"),
                                        (np.zeros(2, [("a", "<f4"), ("b", "<i2")]), "structured"),
                                        (np.zeros(2, "datetime64[s]"), "datetime")])
def test_a_non_numeric_golden_npy_is_named(tmp_path, ws_copy, capsys, array, kind):
    golden = sorted((ws_copy / "precision_data" / "tf" / "dump").glob("*.npy"))[0]
    with pytest.raises(FormatError) as exc:
        np.save(tmp_path / "g.npy", array)
        read_npy_header(tmp_path / "g.npy")
    assert str(exc.value).startswith(f"{tmp_path / 'g.npy'}: holds {kind} values")
    values = np.load(golden)
    np.save(golden, np.resize(array, values.shape))
    rc, out, err = run_cli(capsys, ws_copy, "-c", "vc")
    assert any(str(golden) in line and f"holds {kind} values" in line for line in (out + err).splitlines())


# --- the default output folder is not followed out of the workspace ---------------------------------

def test_a_planted_output_folder_link_is_refused_unless_given_with_o(tmp_path, ws_copy, capsys):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (ws_copy / "precision_data" / "temp").mkdir()
    link = ws_copy / "precision_data" / "temp" / "pshell"
    link.symlink_to(elsewhere)
    rc, out, err = run_cli(capsys, ws_copy, "-c", "vc")
    named = [line for line in (out + err).splitlines() if str(link) in line]
    assert named[0] == (f"warning: {link}: a symbolic link to {elsewhere}, outside the workspace; "
                        f"pshell does not write there unless given with -o DIR")
    assert len(named) == 2 and named[1].startswith("error: ") and "refusing to write through" in named[1]
    assert rc != 0 and list(elsewhere.iterdir()) == []
    # given with -o, the same folder is the user's choice
    rc, out, err = run_cli(capsys, ws_copy, "-o", link, "-c", "vc")
    assert rc in (0, 1) and "refusing" not in err and list(elsewhere.glob("compare/result_*.csv"))
    # a link that stays inside precision_data is followed as before
    link.unlink()
    inside = ws_copy / "precision_data" / "temp" / "mine"
    inside.mkdir()
    link.symlink_to(inside)
    rc, out, err = run_cli(capsys, ws_copy, "-c", "vc")
    assert "refusing" not in err and list(inside.glob("compare/result_*.csv"))
