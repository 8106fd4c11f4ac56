"""`ac` on generated workspaces: the generator's overflow op is the first producer."""

from __future__ import annotations

import csv
import json
import shutil

import numpy as np
import pytest

from precision_shell.formats.dump_file import DumpTensor, write_dump
from precision_shell.formats.opdebug import encode_opdebug_old
from precision_shell.samples.writer import SampleOptions, write_workspace
from tests.conftest import json_docs, run_cli


def _first_producer(rows):
    return next(r for r in rows if r["role"] == "producer")


@pytest.mark.parametrize("layout", ["old", "new"])
def test_ac_names_the_overflow_op_as_first_producer(tmp_path, capsys, layout):
    manifest = write_workspace(tmp_path, SampleOptions(opdebug_layout=layout))
    truth = manifest["overflow"]
    rc, out, err = run_cli(capsys, tmp_path, "-c", "ac", "--format", "json")
    assert rc == 0, err
    rows = json_docs(out)[0]
    first = _first_producer(rows)
    assert first["op"] == truth["op"] and first["source"] == "opdebug"
    assert "float overflow" in first["status"]
    out0 = first["outputs"][0]
    assert (out0["pos_inf"], out0["neg_inf"], out0["nan"]) == (truth["pos_inf"], truth["neg_inf"], truth["nan"])
    by_op = {r["op"]: r for r in rows}
    for op in truth["downstream_non_finite"]:
        assert by_op[op]["role"] == "propagated"
    # `order` is the execution order `vc` numbers its rows by (issue 30: it was the list position)
    rc, out, err = run_cli(capsys, tmp_path, "-o", tmp_path / "out", "-c", "vc", "--format", "json")
    with open(json_docs(out)[0]["csv"], newline="") as f:
        vc_index = {row[2]: int(row[0]) for row in list(csv.reader(f))[1:]}   # NPUDump -> Index
    assert [r["order"] for r in rows] == [vc_index[r["op"]] for r in rows]
    assert [r["order"] for r in rows] == sorted(r["order"] for r in rows) and rows[0]["order"] > 1
    assert rows.index(first) < min(rows.index(by_op[o]) for o in truth["downstream_non_finite"])


def test_ac_next_prev_goto_in_batch(sample_ws, capsys):
    ws, manifest = sample_ws
    rc, out, err = run_cli(capsys, ws, "-c", "ac; next; next; prev; goto 1")
    assert rc == 0, err
    panels = [line for line in out.splitlines() if line.startswith("[")]
    names = [p.split("] ")[1].split(" (")[0] for p in panels]
    # next, next, prev, goto 1 -> items 1, 2, 1, 1 of the list `ac` made
    assert names[0] == manifest["overflow"]["op"]
    assert names[1] != names[0] and names[2:] == [names[0], names[0]]
    assert panels[0].startswith("[1/") and panels[1].startswith("[2/")
    rc, _, err = run_cli(capsys, ws, "-c", "next")
    assert rc == 1 and "run `ac`" in err


def test_ac_values_only_and_fail_on_findings(sample_ws, capsys):
    ws, manifest = sample_ws
    rc, out, err = run_cli(capsys, ws, "-c", "ac --values-only", "--format", "json", "--fail-on-findings")
    assert rc == 3, err
    rows = json_docs(out)[0]
    assert all(r["source"] == "value" for r in rows)
    assert _first_producer(rows)["op"] == manifest["overflow"]["op"]


def test_ac_opdebug_only_and_neither(sample_ws, capsys, tmp_path):
    ws, manifest = sample_ws
    dst = tmp_path / "ws"
    shutil.copytree(ws / "precision_data", dst / "precision_data")
    shutil.rmtree(dst / "precision_data" / "npu" / "debug_0" / "dump")
    rc, out, err = run_cli(capsys, dst, "-c", "ac", "--format", "json")
    assert rc == 0, err
    (row,) = json_docs(out)[0]
    assert row["op"] == manifest["overflow"]["op"] and row["role"] == "producer"
    shutil.rmtree(dst / "precision_data" / "overflow")
    rc, out, err = run_cli(capsys, dst, "-c", "ac")
    assert rc == 1 and "nothing to scan" in err


def test_bad_opdebug_records_are_reported_and_scan_continues(sample_ws, capsys, tmp_path):
    ws, manifest = sample_ws
    dst = tmp_path / "ws"
    shutil.copytree(ws / "precision_data", dst / "precision_data")
    folder = (dst / manifest["overflow"]["opdebug_file"]).parent
    # a corrupt record (wrong size), one matching no dump, and a task id that two ops share
    write_dump(folder / "Opdebug.Node_OpDebug.90.1.1706197403673400", "Node_OpDebug", [],
               [DumpTensor(np.zeros(100, np.uint8), 4, 2)])
    rec = encode_opdebug_old(ai_core={"task_id": 999, "stream_id": 1, "status": 0x20})
    write_dump(folder / "Opdebug.Node_OpDebug.91.1.1706197403673401", "Node_OpDebug", [],
               [DumpTensor(np.frombuffer(rec, np.uint8), 4, 2)])
    src = dst / manifest["overflow"]["overflow_dump_file"]
    dup = src.with_name(src.name.replace("Mul.loss_scale_Mul", "Mul.other_Mul"))
    shutil.copy(src, dup)
    rc, out, err = run_cli(capsys, dst, "-c", "ac -l 0")
    assert rc == 0, err
    assert "matches no op dump" in out and "appears in dumps of 2 ops" in out
    assert "Opdebug.Node_OpDebug.90.1.1706197403673400" in out
    assert manifest["overflow"]["op"] in out


def test_export_overflow_csv_and_json(sample_ws, capsys, tmp_path):
    ws, manifest = sample_ws
    rc, out, err = run_cli(capsys, ws, "-c", f"ac; export overflow -o {tmp_path/'o.csv'}; "
                                             f"export overflow -o {tmp_path/'o.json'}")
    assert rc == 0, err
    rows = list(csv.DictReader(open(tmp_path / "o.csv")))
    data = json.load(open(tmp_path / "o.json"))
    assert rows[0]["op"] == data[0]["op"] == manifest["overflow"]["op"]
    assert len(rows) == len(data) == 1 + len(manifest["overflow"]["downstream_non_finite"])


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "bfloat16"])
def test_looks_clean_agrees_with_numpy_on_special_values(dtype):
    import ml_dtypes
    from precision_shell.analysis.overflow.scan import looks_clean

    dt = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    rng = np.random.default_rng(0)
    base = (rng.standard_normal(3000) * 1000).astype(dt)
    assert looks_clean(base)
    specials = [np.nan, np.inf, -np.inf, -0.0]
    if dtype == "float16":
        specials += [65504.0, -65504.0, 65500.0]
    for value in specials:
        arr = base.copy()
        arr[1234] = value
        f32 = arr.astype(np.float64)
        expected = bool(np.isfinite(f32).all()) and not (dtype == "float16" and (np.abs(f32) == 65504).any())
        assert looks_clean(arr) == expected, value
