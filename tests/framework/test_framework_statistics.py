"""Statistics-mode msprobe dumps (msprobe's default task): ``vcs`` judges outputs by their Max,
Min and Norm (product.md §15), ``ac`` calls a tensor overflowing only when Max or Min is
non-finite. Truth computed here from the dump.json statistics of the committed sample."""

from __future__ import annotations

import json
import math

import numpy as np

from conftest import json_docs, run_cli
from framework_dumps import leaf, sample, write_dump

TOLERANCE = 0.1


def _entries(run: str) -> dict:
    truth = json.loads((sample() / "truth.json").read_text())
    return json.loads((sample() / truth["runs"][run]["rank_dir"] / "dump.json").read_text())["data"]


def _leaves(node) -> list[dict]:
    if isinstance(node, dict):
        if "dtype" in node and "shape" in node:
            return [node]
        return [] if "type" in node else [x for v in node.values() for x in _leaves(v)]
    if isinstance(node, list):
        return [x for v in node for x in _leaves(v)]
    return []


def _failing_stats(t: dict, g: dict, tolerance: float) -> list[str]:
    failed = []
    for key in ("Max", "Min", "Norm"):
        a, b = t.get(key), g.get(key)
        if a is None or b is None or not math.isfinite(b):
            continue
        if not math.isfinite(a) or abs(a - b) / max(abs(b), 1e-12) > tolerance:
            failed.append(key)
    return failed


def expected_forward_roots(tolerance: float) -> tuple[list[str], dict[str, list[str]]]:
    """Forward entries failing by statistics whose inputs all pass, in dump order; and each
    failing entry's failing statistics of its worst output."""
    target, golden = _entries("stats_target_bf16"), _entries("stats_golden_fp32")
    roots, failing = [], {}
    for name, entry in target.items():
        if ".forward" not in name or name not in golden:
            continue
        g = golden[name]
        sides = lambda e: (_leaves([e.get(k) for k in ("input_args", "input_kwargs", "parameters")]),
                           _leaves(e.get("output")))
        (t_in, t_out), (g_in, g_out) = sides(entry), sides(g)
        out_fail = [_failing_stats(a, b, tolerance) for a, b in zip(t_out, g_out)]
        if not any(out_fail):
            continue
        failing[name] = next(f for f in out_fail if f)
        if not any(_failing_stats(a, b, tolerance) for a, b in zip(t_in, g_in)):
            roots.append(name)
    return roots, failing


def test_statistics_vcs_lists_the_designed_root_first(capsys, tmp_path):
    truth = json.loads((sample() / "truth.json").read_text())
    roots, failing = expected_forward_roots(TOLERANCE)
    assert roots and roots[0] == truth["precision_loss"]["root"]       # the sample's design holds
    rc, out, err = run_cli(capsys, sample() / "stats_target_bf16", "--golden", sample() / "stats_golden_fp32",
                           "-o", tmp_path / "out", "--format", "json", "-c", "vcs -l 0",
                           "-c", "vcs -l 0 --stat-tolerance 1000")
    assert rc == 0, err
    rows, loose = json_docs(out)
    assert [r["op"] for r in rows if r["role"] == "root"] == roots
    assert [r["op"] for r in rows if r["first"]] == [roots[0]]
    assert {r["op"] for r in rows} == set(failing)
    for r in rows:
        assert r["cosine"] is None and r["statistic"]
        assert set(r["statistic"].split(",")) <= {"Max", "Min", "Norm"}
        assert r["tensor"] in r["failed_outputs"]
    assert loose == []          # nothing is off by 1000x


def test_statistics_vcs_table_says_which_statistic_failed(capsys, tmp_path):
    rc, out, err = run_cli(capsys, sample() / "stats_target_bf16", "--golden", sample() / "stats_golden_fp32",
                           "-o", tmp_path / "out", "-c", "vcs -l 0", "-c", "vcs --stat-tolerance -1")
    assert rc == 2 and err.strip().splitlines() == ["error: --stat-tolerance is a relative error >= 0, got -1.0"]
    header = next(line for line in out.splitlines() if line.startswith("#"))
    assert "failed statistic" in header and "rel. error" in header and "cosine" not in header
    roots, failing = expected_forward_roots(TOLERANCE)
    first = next(line for line in out.splitlines() if "first divergence" in line and roots[0] in line)
    assert ",".join(failing[roots[0]]) in first.split()


def test_statistics_null_on_one_side_is_not_comparable_not_an_error(capsys, tmp_path):
    """An output whose Max/Min/Norm are null on the target is listed as not comparable and
    judged by its producer; the rest is judged."""
    x = np.linspace(1, 2, 8).astype(np.float32)
    nulls = {"type": "mindspore.Tensor", "dtype": "Float32", "shape": [8], "Max": None, "Min": None,
             "Mean": None, "Norm": None}
    target = write_dump(tmp_path / "t" / "step0" / "rank0", {
        "Mint.exp.0.forward": {"input_args": [x], "output": [x * 3]},
        "Mint.abs.0.forward": {"input_args": [x * 3], "output": [nulls]}}, task="statistics")
    golden = write_dump(tmp_path / "g" / "step0" / "rank0", {
        "Mint.exp.0.forward": {"input_args": [x], "output": [x]},
        "Mint.abs.0.forward": {"input_args": [x], "output": [x]}}, task="statistics")
    rc, out, err = run_cli(capsys, target, "--golden", golden, "-o", tmp_path / "out", "-c", "vcs -l 0")
    assert rc == 0, err
    assert "1 output not comparable" in out and "Mint.abs.0.forward:0" in out
    rc, out, err = run_cli(capsys, target, "--golden", golden, "-o", tmp_path / "out", "--format", "json",
                           "-c", "vcs -l 0")
    (rows,) = json_docs(out)
    assert [(r["op"], r["role"]) for r in rows] == [("Mint.exp.0.forward", "root")]


def test_ac_on_statistics_reads_max_and_min_only(capsys, tmp_path):
    """An fp16 Norm overflows on finite values (Max 8200, Min 8180 over 64 elements: the sum of
    squares passes 65504): not an overflow. A non-finite Max is."""
    norm_only = {"type": "mindspore.Tensor", "dtype": "Float16", "shape": [64], "Max": 8200.0, "Min": 8180.0,
                 "Mean": 8190.0, "Norm": math.inf}
    assert 64 * 8180.0 ** 2 > 65504.0 ** 2 / 64    # the Norm overflow is real arithmetic, not a typo
    real = dict(norm_only, Max=math.inf)
    x = np.ones(64, np.float16)
    rank = write_dump(tmp_path / "d" / "step0" / "rank0", {
        "Mint.mul.0.forward": {"input_args": [x], "output": [norm_only]},
        "Mint.add.0.forward": {"input_args": [x], "output": [real]}}, task="statistics")
    rc, out, err = run_cli(capsys, rank, "-o", tmp_path / "out", "--format", "json", "-c", "ac -l 0")
    assert rc == 0, err
    (rows,) = json_docs(out)
    assert [(r["op"], r["role"]) for r in rows] == [("Mint.add.0.forward", "producer")]
    assert leaf(x)["Max"] == 1.0


def test_ac_ranks_all_steps_all_on_msprobe_folders(capsys, tmp_path):
    """Two steps x two ranks: rank0 a copy of the fp16 overflow run, rank1 of the bf16 run (no
    overflow). Every folder is scanned as `ac` scans one; rows carry their rank and step."""
    import shutil

    truth = json.loads((sample() / "truth.json").read_text())
    root = tmp_path / "dump"
    for step in ("step0", "step1"):
        for rank, run in (("rank0", "overflow_fp16"), ("rank1", "target_bf16")):
            shutil.copytree(sample() / truth["runs"][run]["rank_dir"], root / step / rank)
    rc, out, err = run_cli(capsys, sample() / "overflow_fp16", "-o", tmp_path / "one", "--format", "json",
                           "-c", "ac -l 0")
    assert rc == 0, err
    (single,) = json_docs(out)
    rc, out, err = run_cli(capsys, root, "-o", tmp_path / "out", "--format", "json",
                           "-c", "ac --ranks all --steps all -l 0", "-c", "ac --ranks 1 --steps 1")
    assert rc == 0, err
    rows, rank1 = json_docs(out)
    assert rank1 == []
    assert [(r["step"], r["rank"]) for r in rows] == [(s, "rank0") for s in (0, 1) for _ in single]
    for step in (0, 1):
        mine = [r for r in rows if r["step"] == step]
        assert [(r["op"], r["role"]) for r in mine] == [(r["op"], r["role"]) for r in single]
        assert [r["op"] for r in mine if r["first"]] == [truth["overflow"]["producer"]]
    assert [r["order"] for r in rows] == list(range(1, len(rows) + 1))
    rc, out, err = run_cli(capsys, root, "-o", tmp_path / "out", "-c", "ac --ranks all --steps all")
    grid = out[out.index("step x rank"):].splitlines()
    assert grid[1].split() == ["step", "rank0", "rank1"]
    assert grid[2].split() == ["0", str(len(single)), "0"] and grid[3].split() == ["1", str(len(single)), "0"]


def test_next_on_a_statistics_list_shows_the_statistics_beside_the_golden(capsys, tmp_path):
    roots, failing = expected_forward_roots(TOLERANCE)
    root = roots[0]
    t = _leaves(_entries("stats_target_bf16")[root]["output"])[0]
    g = _leaves(_entries("stats_golden_fp32")[root]["output"])[0]
    rel = max(abs(t[k] - g[k]) / max(abs(g[k]), 1e-12) for k in ("Max", "Min", "Norm"))
    rc, out, err = run_cli(capsys, sample() / "stats_target_bf16", "--golden", sample() / "stats_golden_fp32",
                           "-o", tmp_path / "out", "-c", "vcs", "-c", "next")
    assert rc == 0, err
    panel = out[out.index(f"[1/"):]
    row = next(line for line in panel.splitlines() if line.startswith(f"{root}:0 "))
    cells = row.split()
    assert cells[1:7] == [f"{v:.6g}" for k in ("Max", "Min", "Norm") for v in (t[k], g[k])]
    assert cells[7] == f"{rel:.4g}" and cells[8] == ",".join(failing[root]) and cells[9] == "FAIL"


def test_statistics_verdict_rules():
    """The rule of §15 on hand-picked statistics (each expected value worked out here)."""
    from precision_shell.analysis.root_cause.stat_verdict import judge_stats
    from precision_shell.model.runs import Stats

    g = Stats(10.0, -10.0, 0.0, 100.0)
    assert judge_stats(Stats(10.5, -10.5, 5.0, 104.0), g, 0.1).fails is False     # 5%, 5%, 4%; Mean unjudged
    v = judge_stats(Stats(12.0, -10.0, 0.0, 100.0), g, 0.1)
    assert v.fails and v.failed == ("Max",) and abs(v.rel_error - 0.2) < 1e-12
    v = judge_stats(Stats(float("nan"), -10.0, 0.0, float("inf")), g, 0.1)
    assert v.failed == ("Max", "Norm") and v.rel_error == math.inf          # non-finite where golden is finite
    v = judge_stats(Stats(None, None, 0.0, 100.0), Stats(10.0, -10.0, 0.0, None), 0.1)
    assert v.fails is None and v.failed == ()                                 # nothing comparable
    v = judge_stats(Stats(1.0, 2.0, 0.0, 3.0), Stats(math.inf, -math.inf, 0.0, math.nan), 0.1)
    assert v.fails is None                                                     # golden non-finite: not judged
    assert judge_stats(Stats(2e-13, 0.0, 0.0, 0.0), Stats(0.0, 0.0, 0.0, 0.0), 0.1).fails is True  # 2e-13/1e-12


def test_statistics_vcs_ranks_all(capsys, tmp_path):
    import shutil

    truth = json.loads((sample() / "truth.json").read_text())
    roots, _ = expected_forward_roots(TOLERANCE)
    for side, run in (("t", "stats_target_bf16"), ("g", "stats_golden_fp32")):
        for rank in ("rank0", "rank1"):
            shutil.copytree(sample() / truth["runs"][run]["rank_dir"], tmp_path / side / "step0" / rank)
    rc, out, err = run_cli(capsys, tmp_path / "t", "--golden", tmp_path / "g", "-o", tmp_path / "out",
                           "--format", "json", "-c", "vcs --ranks all")
    assert rc == 0, err
    (rows,) = json_docs(out)
    assert [(r["rank"], r["first_divergence"], r["roots"]) for r in rows] == \
        [("rank0", roots[0], roots), ("rank1", roots[0], roots)]
