"""One JSON schema across kinds of dump (product.md §15): every list command, run with --format
json on a graph-mode session (the committed convnet sample) and on a framework session (the
committed msprobe sample), gives rows with the same keys."""

from __future__ import annotations

import shutil

from conftest import json_docs, run_cli
from framework_dumps import sample

# (graph-mode statement, framework statement): the same command on each kind
COMMANDS = [
    ("ls", "ls"),
    ("ls -t Conv2D", "ls -t Functional.softmax"),
    ("li conv1/Conv2D", "li Functional.softmax.0.forward"),
    ("lo conv1/Conv2D", "lo Functional.softmax.0.forward"),
    ("ac -l 0", "ac -l 0"),
    ("vcs -l 0", "vcs -l 0"),
    ("vcs --ranks all", "vcs --ranks all"),
    ("ac --ranks all", "ac --ranks all"),
]


def _rows(capsys, argv: list, statements: list[str]) -> list[list[dict]]:
    for s in statements:
        argv += ["-c", s]
    rc, out, err = run_cli(capsys, *argv)
    assert rc == 0, err
    docs = json_docs(out)
    assert len(docs) == len(statements)
    return docs


def test_every_list_command_has_one_row_schema(capsys, tmp_path):
    from pathlib import Path

    convnet = Path(__file__).resolve().parents[2] / "sample_data" / "convnet"
    graph_docs = _rows(capsys, [convnet, "-o", tmp_path / "g", "--format", "json"], [g for g, _ in COMMANDS])
    # the framework pair: the overflow run against the golden, so `ac` and `vcs` both find rows
    fw = [sample() / "overflow_fp16", "--golden", sample() / "golden_fp32", "-o", tmp_path / "f", "--format", "json"]
    fw_docs = _rows(capsys, fw, [f for _, f in COMMANDS])
    for (g_cmd, f_cmd), g_rows, f_rows in zip(COMMANDS, graph_docs, fw_docs):
        assert g_rows and f_rows, (g_cmd, f_cmd)         # a schema compared on no rows proves nothing
        g_keys = {tuple(sorted(r)) for r in g_rows}
        f_keys = {tuple(sorted(r)) for r in f_rows}
        assert len(g_keys) == 1 and g_keys == f_keys, (g_cmd, f_cmd, g_keys ^ f_keys)


def test_vcs_rows_name_the_worst_failing_output_on_every_kind(capsys, tmp_path):
    from pathlib import Path

    convnet = Path(__file__).resolve().parents[2] / "sample_data" / "convnet"
    (g_rows,) = _rows(capsys, [convnet, "-o", tmp_path / "g", "--format", "json"], ["vcs -l 0"])
    fw = [sample() / "target_bf16", "--golden", sample() / "golden_fp32", "-o", tmp_path / "f", "--format", "json"]
    (f_rows,) = _rows(capsys, fw, ["vcs -l 0"])
    for rows in (g_rows, f_rows):
        for r in rows:
            assert r["tensor"] in r["failed_outputs"]
            assert r["role"] in ("root", "propagated", "param_grad") and isinstance(r["first"], bool)
        assert sum(r["first"] for r in rows) == 1
    # the framework row's cosine is the worst failing output's own: at or below the threshold
    for r in f_rows:
        assert r["cosine"] is None or r["cosine"] <= 0.98


def test_multi_set_summary_rows_list_roots_by_name(capsys, tmp_path):
    target = tmp_path / "t"
    golden = tmp_path / "g"
    for root, run in ((target, "target_bf16"), (golden, "golden_fp32")):
        shutil.copytree(sample() / run / "step0" / "rank0", root / "step0" / "rank0")
    (summary, single) = _rows(capsys, [target, "--golden", golden, "-o", tmp_path / "o", "--format", "json"],
                              ["vcs --ranks all", "vcs -l 0"])
    assert summary[0]["roots"] == [r["op"] for r in single if r["role"] == "root"]
    assert summary[0]["first_divergence"] == next(r["op"] for r in single if r["first"])


def test_suspect_exports_have_one_set_of_columns(capsys, tmp_path):
    import csv
    from pathlib import Path

    convnet = Path(__file__).resolve().parents[2] / "sample_data" / "convnet"
    headers = []
    for argv in ([convnet], [sample() / "target_bf16", "--golden", sample() / "golden_fp32"]):
        out = tmp_path / str(len(headers))
        rc, _, err = run_cli(capsys, *argv, "-o", out, "-c", "vcs", "-c", "export suspects")
        assert rc == 0, err
        with open(out / "suspects.csv", newline="") as f:
            rows = list(csv.reader(f))
        assert len(rows) > 1 and all(len(r) == len(rows[0]) for r in rows)
        assert not any(cell.startswith(("[", "{")) for r in rows[1:] for cell in r)   # scalars, no JSON
        headers.append(rows[0])
    assert sorted(headers[0]) == sorted(headers[1])
