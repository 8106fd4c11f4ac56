"""Charts: ``plot METRIC``, ``vcs --plot``, ``ac --plot``: the points are the compare/scan numbers,
roots and the first divergence marked, the text fits the terminal, plain without colour."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from precision_shell.cli import main
from precision_shell.commands import plot_cmd
from precision_shell.commands.results import Chart
from precision_shell.errors import CommandError
from precision_shell.render.plot import chart_text
from precision_shell.render.style import Style

ANSI = re.compile(r"\x1b\[")


def run(ws: Path, commands: str, capsys, fmt: str = "table"):
    rc = main([str(ws), "-c", commands, "--format", fmt])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def test_plot_points_are_the_compare_metrics_with_roots_marked(sample_ws, capsys):
    root, _ = sample_ws
    rc, out, err = run(root, "vcs -l 0", capsys, "json")
    assert rc == 0, err
    suspects = json.loads(out)
    rc, out, err = run(root, "plot max_abs_error; vcs --plot", capsys, "json")
    assert rc == 0, err
    max_abs, cosine = [json.loads(line) for line in out.splitlines()]
    by_op = {p["op"]: p for p in max_abs["points"]}
    orders = [p["order"] for p in max_abs["points"]]
    assert orders == sorted(orders) and len(orders) == len(set(orders))
    for s in suspects:      # every failing op is drawn, with its role
        assert by_op[s["op"]]["role"] == s["role"]
        assert by_op[s["op"]]["first"] == s["first"]
    first = [p["op"] for p in cosine["points"] if p["first"]]
    assert first == [s["op"] for s in suspects if s.get("first")]
    # an op with one output: its point is that output's metric
    single = [s for s in suspects if len(s.get("failed_outputs", [])) == 1 and s["max_abs_error"] is not None
              and isinstance(s["max_abs_error"], float)]
    assert single
    for s in single:
        assert by_op[s["op"]]["value"] == pytest.approx(s["max_abs_error"], rel=1e-9)
    assert cosine["metric"] == "cosine" and cosine["threshold"] == 0.98


def test_chart_text_fits_the_terminal_and_is_plain_in_a_file(sample_ws, capsys, tmp_path, monkeypatch):
    root, _ = sample_ws
    for columns in ("80", "160"):
        monkeypatch.setenv("COLUMNS", columns)
        rc, out, err = run(root, "vcs --plot", capsys)
        assert rc == 0, err
        assert max(len(line) for line in out.splitlines()) <= int(columns)
        assert not ANSI.search(out)
        assert "◆ root" in out and "▼ first divergence" in out and "first divergence: " in out
    monkeypatch.delenv("COLUMNS")
    target = tmp_path / "chart.txt"
    rc, _, err = run(root, f"plot cosine > {target}", capsys)
    assert rc == 0, err
    text = target.read_text()
    assert not ANSI.search(text) and text.startswith("cosine of each op's worst output")
    assert max(len(line) for line in text.splitlines()) <= 100


def test_ac_plot_counts_nan_and_inf_per_op(sample_ws, capsys):
    root, _ = sample_ws
    rc, out, err = run(root, "ac -l 0; ac --plot", capsys, "json")
    assert rc == 0, err
    rows, chart = [json.loads(line) for line in out.splitlines()]
    want = [sum(t["nan"] + t["pos_inf"] + t["neg_inf"] for t in r["outputs"]) for r in rows]
    assert [p["count"] for p in chart["points"]] == want and any(want)
    assert [p["role"] for p in chart["points"]] == [r["role"] for r in rows]
    rc, out, err = run(root, "ac --plot", capsys)
    assert "▼ producer" in out and f"first producer: {rows[0]['op']}" in out


def test_colour_only_when_asked():
    chart = Chart("t", "line", [1, 2, 3], [1.0, float("nan"), 0.5], ["a", "b", "c"], "cosine",
                  marks={"root": [3]})
    plain = chart_text(chart, Style(False), 60)
    assert not ANSI.search(plain) and "✕ nan/inf (1, on the edge)" in plain
    assert ANSI.search(chart_text(chart, Style(True), 60))


def test_unknown_metric_and_missing_plotext_are_one_line(sample_ws, capsys, monkeypatch):
    root, _ = sample_ws
    rc, _, err = run(root, "plot cosinus", capsys)
    assert rc == 2 and "unknown metric 'cosinus'" in err and len(err.strip().splitlines()) == 1
    monkeypatch.setattr(plot_cmd.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(CommandError, match="charts need plotext: pip install"):
        plot_cmd.require_plotext()


FRAMEWORK = Path(__file__).resolve().parents[2] / "sample_data" / "framework"


@pytest.mark.skipif(not (FRAMEWORK / "target_bf16").is_dir(), reason="framework sample not present")
def test_framework_vcs_plot_draws_msprobes_metrics_of_each_entry(capsys):
    argv = [str(FRAMEWORK / "target_bf16"), "--golden", str(FRAMEWORK / "golden_fp32"), "--format", "json", "-c"]
    rc = main(argv + ["vcs -l 0; vcs --plot; plot max_abs_error"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    suspects, cosine, max_abs = [json.loads(line) for line in out.splitlines()]
    by_op = {p["op"]: p for p in cosine["points"]}
    for s in suspects:
        assert by_op[s["op"]]["role"] == s["role"] and by_op[s["op"]]["first"] == s["first"]
        if isinstance(s["cosine"], float):
            assert by_op[s["op"]]["value"] == s["cosine"]
    assert [p["op"] for p in cosine["points"]] == [p["op"] for p in max_abs["points"]]
    assert cosine["threshold"] == 0.98 and max_abs["metric"] == "max_abs_error"
    rc = main(argv + ["plot relative_euclidean_distance"])
    assert rc == 2 and "msprobe's compare has no relative_euclidean_distance" in capsys.readouterr().err


def test_chart_csv_has_one_true_false_column_per_mark(sample_ws, capsys):
    root, _ = sample_ws
    rc, out, err = run(root, "vcs --plot; vcs -l 0", capsys, "csv")
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0] == "order,name,cosine,root,first divergence"
    rows = [line.split(",") for line in lines[1:lines.index(next(l for l in lines[1:] if l.startswith("#")))]]
    rc, out, err = run(root, "vcs -l 0", capsys, "json")
    suspects = json.loads(out)
    roots = {s["op"] for s in suspects if s["role"] == "root"}
    firsts = {s["op"] for s in suspects if s["first"]}
    assert {r[1] for r in rows if r[3] == "true"} == roots and {r[1] for r in rows if r[4] == "true"} == firsts
    assert all(r[3] in ("true", "false") and r[4] in ("true", "false") for r in rows)


def test_plot_with_several_dump_sets_is_refused_in_one_line(sample_ws, capsys):
    root, _ = sample_ws
    for line in ("vcs --plot --ranks all", "ac --plot --ranks all"):
        rc, _, err = run(root, line, capsys)
        assert rc == 2 and "--plot draws one dump set" in err and len(err.strip().splitlines()) == 1
