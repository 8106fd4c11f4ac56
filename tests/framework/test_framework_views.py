"""What a framework session shows besides the analyses: ``vc``'s per-reason skip counts (as graph
mode gives them), the toolbar on a framework pair, ``info`` on a dump without step folders."""

from __future__ import annotations

import json
import shutil

from conftest import json_docs, run_cli
from framework_dumps import sample
from precision_shell.model.framework_session import FrameworkSession
from precision_shell.shell.toolbar import toolbar_items


def _leaves(node) -> list:
    """Every leaf msprobe makes a row of: tensors, plain values and nulls."""
    if node is None:
        return [None]
    if isinstance(node, dict):
        if "type" in node:
            return [node]
        return [x for v in node.values() for x in _leaves(v)]
    if isinstance(node, list):
        return [x for v in node for x in _leaves(v)]
    return []


def test_vc_counts_skipped_rows_by_reason(capsys, tmp_path):
    truth = json.loads((sample() / "truth.json").read_text())
    # msprobe's rows are every leaf; those that are not tensors (ints, None, ...) have no file
    plain = truth["compare"]["tensor"]["rows"] - truth["runs"]["target_bf16"]["tensor_files"]
    rc, out, err = run_cli(capsys, sample() / "target_bf16", "--golden", sample() / "golden_fp32",
                           "-o", tmp_path / "o", "-c", "vc")
    assert rc == 0, err
    rows = truth["compare"]["tensor"]["rows"]
    assert f"compared {rows - plain} of {rows} tensors; skipped {plain} (plain value {plain})" in out
    rc, out, err = run_cli(capsys, sample() / "target_bf16", "--golden", sample() / "golden_fp32",
                           "-o", tmp_path / "o", "--format", "json", "-c", "vc")
    (data,) = json_docs(out)
    assert data["coverage"]["skipped"] == {"plain value": plain} and data["coverage"]["compared"] == rows - plain


def test_vc_counts_a_golden_without_the_entry_as_no_golden(capsys, tmp_path):
    """Drop one entry from a golden copy: its rows are skipped as 'no golden'."""
    truth = json.loads((sample() / "truth.json").read_text())
    golden = tmp_path / "golden" / "step0" / "rank0"
    shutil.copytree(sample() / truth["runs"]["golden_fp32"]["rank_dir"], golden)
    doc = json.loads((golden / "dump.json").read_text())
    dropped = doc["data"].pop(truth["precision_loss"]["root"])
    (golden / "dump.json").write_text(json.dumps(doc))
    for f in (golden / "dump_tensor_data").glob(truth["precision_loss"]["root"] + ".*"):
        f.unlink()
    n = len(_leaves(dropped))
    rc, out, err = run_cli(capsys, sample() / "target_bf16", "--golden", tmp_path / "golden",
                           "-o", tmp_path / "o", "--format", "json", "-c", "vc")
    assert rc == 0, err
    (data,) = json_docs(out)
    assert data["coverage"]["skipped"]["no golden"] == n


def test_toolbar_names_the_framework_selection(tmp_path):
    session = FrameworkSession.open(sample() / "target_bf16", golden=sample() / "golden_fp32", output=tmp_path)
    items = dict(toolbar_items(session))
    assert items["dump"] == "pytorch step 0 rank0 vs golden" and "run" not in items
    alone = dict(toolbar_items(FrameworkSession.open(sample() / "target_bf16", output=tmp_path)))
    assert alone["dump"].endswith("no golden")


def test_info_on_a_rank_folder_without_step_folders(capsys, tmp_path):
    truth = json.loads((sample() / "truth.json").read_text())
    rank = tmp_path / "rank0"
    shutil.copytree(sample() / truth["runs"]["target_bf16"]["rank_dir"], rank)
    rc, out, err = run_cli(capsys, rank, "-o", tmp_path / "o", "-c", "info")
    assert rc == 0, err
    assert "None" not in out and "no step folders" in out
