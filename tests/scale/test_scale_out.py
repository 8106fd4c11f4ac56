"""Multi-rank, multi-step workspaces (issue 15): Opdebug records matched to their own device and
step, the generator's truth, and ``--ranks``/``--steps`` on ``ac``/``vc``/``vcs``."""

from __future__ import annotations

import pytest

from precision_shell.samples.writer import SampleOptions, write_workspace
from tests.conftest import json_docs, run_cli


@pytest.fixture(scope="module")
def multi_ws(tmp_path_factory):
    root = tmp_path_factory.mktemp("multi_ws")
    return root, write_workspace(root, SampleOptions(seed=0), multi=(4, 2))


def _ac(capsys, root, device, step):
    rc, out, err = run_cli(capsys, root, "-c", f"use --device {device} --step {step}; ac -l 0",
                           "--format", "json")
    return rc, json_docs(out)[-1]


def test_opdebug_records_belong_to_their_own_device_and_step(capsys, multi_ws):
    root, manifest = multi_ws
    truth = manifest["scale_out"]["overflow"]
    rank, op = truth["rank"], truth["op"]
    for entry in manifest["scale_out"]["sets"]:
        _, rows = _ac(capsys, root, entry["rank"], entry["step"])
        hardware = [r for r in rows if r["source"] == "opdebug"]
        if entry["rank"] == rank and entry["step"] in truth["steps"]:
            assert [r["op"] for r in hardware] == [op]
            # the record's file is the one in this set's own overflow folder
            assert all(entry["overflow_dump_dir"] in rec["file"] for rec in hardware[0]["records"])
            assert rows[0]["op"] == op and rows[0]["role"] == "producer"
        else:
            assert hardware == [], (entry, hardware)
            assert rows == []   # the clean loss scale: no value finding either
        assert all((r["rank"], r["step"]) == (entry["rank"], entry["step"]) for r in rows)
    rc, out, err = run_cli(capsys, root, "-c", "ac")
    n = len(truth["steps"])
    assert f"{n} Opdebug file{'s' * (n != 1)} of other devices or steps not counted here" in out


def test_a_rank_dumped_from_another_graph_is_named(capsys, tmp_path):
    manifest = write_workspace(tmp_path, SampleOptions(seed=0), multi=(3, 1))
    entry = next(e for e in manifest["scale_out"]["sets"] if e["rank"] == 1)
    leaf = tmp_path / entry["npu_dump_dir"]
    files = sorted(p for p in leaf.iterdir() if p.is_file())
    for i, p in enumerate(files):   # another model: none of its op names is in the loaded graph
        fields = p.name.split(".")
        fields[1] = f"other_model_op_{i}"
        p.rename(p.with_name(".".join(fields)))
    rc, out, err = run_cli(capsys, tmp_path, "-c", "vcs --ranks all", "--format", "json")
    rows = json_docs(out)[-1]
    assert f"rank 1 step 0: only 0 of {len(files)} dumped ops are in the loaded graph" in err
    assert [r["rank"] for r in rows] == [0, 1, 2]


def test_default_sample_has_no_scale_out_entry(sample_ws):
    _, manifest = sample_ws
    assert "scale_out" not in manifest and manifest["overflow"]["op"] == "loss_scale/Mul"


def test_timeline_grid_and_next_in_the_terminal(capsys, multi_ws):
    root, manifest = multi_ws
    truth = manifest["scale_out"]["overflow"]
    rc, out, err = run_cli(capsys, root, "-c", "ac --ranks all --steps all; next; vcs --ranks all; next")
    assert rc == 0, err
    first = truth["first"]
    assert f"first overflow: step {first['step']}, rank {first['rank']}, {first['op']} (opdebug)" in out
    lines = out.splitlines()
    grid = lines.index("overflowing ops, step x rank:")
    ranks = lines[grid + 1].split()[1:]
    assert ranks == [str(r) for r in range(manifest["scale_out"]["ranks"])]
    for step in range(manifest["scale_out"]["steps"]):
        counts = lines[grid + 2 + step].split()
        assert counts[0] == str(step)
        hot = [ranks[i] for i, c in enumerate(counts[1:]) if c != "0"]
        assert hot == ([str(truth["rank"])] if step in truth["steps"] else [])
    assert "[1/" in out and f"{first['op']} (Mul)" in out
    odd = manifest["scale_out"]["odd_rank"]
    assert f"odd rank out: rank {odd['rank']} (step 0: first divergence {odd['op']}" in out
    assert "rank 0 step 0" in out   # the merged list's first op panel names its set


def test_ctrl_c_during_a_multi_set_compare_keeps_what_finished(multi_ws, tmp_path):
    from precision_shell.commands.multi_set import compare_sets, select_sets
    from precision_shell.model.session import Session

    root, manifest = multi_ws
    session = Session.open(root, output=tmp_path / "out")
    selection = select_sets(session, "all", "all")

    class CtrlCAfterFirstSet:
        def __init__(self, label, total):
            self.label = label

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def advance(self, n=1):
            if self.label == "comparing dump sets":
                raise KeyboardInterrupt

    session.progress = CtrlCAfterFirstSet
    done, merged, warnings = compare_sets(session, selection, jobs=1)
    total = len(manifest["scale_out"]["sets"])
    assert 1 <= len(done) < total
    not_started = [w for w in warnings if w.endswith("not compared (interrupted)")]
    assert len(done) + len(not_started) == total
    # the merged CSV holds the rows of the sets that finished, each with its rank and step
    lines = merged.read_text().splitlines()
    assert lines[0].startswith("Rank,Step,Index")
    assert {tuple(line.split(",")[:2]) for line in lines[1:]} == \
        {(d.dump_set.device, d.dump_set.step) for d in done if d.result.count_done()[0]}


def test_a_dump_folder_without_levels_keeps_every_opdebug_record(capsys, sample_ws, tmp_path):
    """``--npu LEAF``: the active set has no device/step folder names, so the overflow-mode
    dump's records all apply to it (as before the per-device matching)."""
    root, manifest = sample_ws
    rc, out, err = run_cli(capsys, root, "--npu", root / manifest["paths"]["npu_dump_dir"],
                           "-o", tmp_path / "out", "-c", "ac -l 0", "--format", "json")
    rows = json_docs(out)[-1]
    hardware = [r for r in rows if r["source"] == "opdebug"]
    assert [r["op"] for r in hardware] == [manifest["overflow"]["op"]], err
