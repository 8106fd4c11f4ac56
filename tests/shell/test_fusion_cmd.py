"""``fusion``: fused ops with passes and original op names (truth: the generator's manifest) and
the fusion_result.json pass table in all four file shapes (truth: the file, decoded here)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from precision_shell.cli import main
from precision_shell.samples.__main__ import main as generate


@pytest.fixture(scope="module")
def workspaces(tmp_path_factory) -> dict[int, Path]:
    out = {}
    for shape in (1, 2, 3, 4):
        root = tmp_path_factory.mktemp(f"fusion_ws{shape}")
        assert generate([str(root), "--force", "--fusion-shape", str(shape)]) == 0
        out[shape] = root
    return out


def manifest_of(ws: Path) -> dict:
    return json.loads((ws / "pshell_sample_manifest.json").read_text())


def run(ws: Path, commands: str, capsys, fmt: str = "json", extra=()):
    rc = main([str(ws), "-c", commands, "--format", fmt, *extra])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def run_json(ws, command, capsys, extra=()):
    rc, out, err = run(ws, command, capsys, extra=extra)
    assert rc == 0, err
    return json.loads(out)


def file_objects(path: Path) -> list[tuple[str, dict]]:
    """(graph id, {"graph_fusion": ..., "ub_fusion": ...}) for each graph in a fusion_result.json
    of any of the four shapes, decoded plainly (objects back to back are split by raw_decode)."""
    text, decoder, pos, docs = path.read_text(), json.JSONDecoder(), 0, []
    while pos < len(text):
        if text[pos].isspace():
            pos += 1
            continue
        doc, pos = decoder.raw_decode(text, pos)
        docs.extend(doc if isinstance(doc, list) else [doc])
    out = []
    for doc in docs:
        if "graph_fusion" in doc or "ub_fusion" in doc:
            out.append((doc["session_and_graph_id"], doc))
        else:
            out.extend((key, body) for key, body in doc.items())
    return out


def expected_passes(path: Path) -> set[tuple[str, str, str, int, int]]:
    rows = set()
    for graph_id, body in file_objects(path):
        for kind, key in (("graph", "graph_fusion"), ("ub", "ub_fusion")):
            for name, counts in body.get(key, {}).items():
                rows.add((graph_id, kind, name, int(counts["match_times"]), int(counts["effect_times"])))
    return rows


def test_fusion_json_gives_each_fused_op_with_its_original_ops(workspaces, capsys):
    ws = workspaces[1]
    manifest = manifest_of(ws)
    data = run_json(ws, "fusion", capsys)
    fused = [op for op in manifest["ops"] if op["passes"] or len(op["original_ops"]) > 1]
    assert [r["op"] for r in data["fused_ops"]] == [op["name"] for op in fused]
    for row, op in zip(data["fused_ops"], fused):
        assert row["original_ops"] == op["original_ops"] and row["passes"] == op["passes"]
        assert row["type"] == op["type"] and row["graph"] == manifest["graph_name"]
    # every pass the generator used appears with exactly the ops it made
    by_pass = {r["pass"]: r for r in data["passes"]}
    for name, ops in manifest["passes"].items():
        assert by_pass[name]["ops"] == ops
        assert by_pass[name]["effect_times"] == len(ops)


@pytest.mark.parametrize("shape", [1, 2, 3, 4])
def test_pass_table_in_all_four_file_shapes(workspaces, capsys, shape):
    ws = workspaces[shape]
    fusion_file = ws / manifest_of(ws)["paths"]["fusion_file"]
    expected = expected_passes(fusion_file)
    assert len({g for g, *_ in expected}) == (1 if shape == 1 else 2)
    data = run_json(ws, "fusion", capsys)
    got = {(r["graph"], r["kind"], r["pass"], r["match_times"], r["effect_times"]) for r in data["passes"]}
    # shape 4 keys graphs "session_and_graph_id_0_1": the id is the part after the prefix
    normalise = lambda g: g.removeprefix("session_and_graph_id_")  # noqa: E731
    assert {(normalise(g), *rest) for g, *rest in got} == {(normalise(g), *rest) for g, *rest in expected}
    assert all(r["kind"] in ("graph", "ub") for r in data["passes"])


def test_filters_by_pass_op_and_graph(workspaces, capsys):
    ws = workspaces[2]
    manifest = manifest_of(ws)
    data = run_json(ws, "fusion -p MatMulBiasAdd", capsys)
    assert [r["op"] for r in data["fused_ops"]] == manifest["passes"]["MatMulBiasAddFusionPass"]
    assert {r["pass"] for r in data["passes"]} == {"MatMulBiasAddFusionPass"}
    # -n also matches an original (framework) op name inside a fused op
    data = run_json(ws, "fusion -n conv1/Relu", capsys)
    (conv,) = data["fused_ops"]
    assert "conv1/Relu" in conv["original_ops"]
    assert {r["pass"] for r in data["passes"]} == set(conv["passes"])
    # -g with a fusion_result graph id keeps that graph's passes only
    expected = {name for g, _, name, _, _ in expected_passes(ws / manifest["paths"]["fusion_file"]) if g == "0_0"}
    data = run_json(ws, "fusion -g /^0_0$/", capsys)
    assert {r["pass"] for r in data["passes"]} == expected and data["fused_ops"] == []
    # -g with the GE graph name keeps its ops and the fusion graph whose id ends like the name
    data = run_json(ws, f"fusion -g {manifest['graph_name']}", capsys)
    assert len(data["fused_ops"]) == len([op for op in manifest["ops"] if op["passes"]])
    assert {r["graph"] for r in data["passes"]} == {manifest["session_graph_id"]}


def test_text_output_lists_graph_ops_and_pass_table(workspaces, capsys):
    ws = workspaces[1]
    rc, text, err = run(ws, "fusion", capsys, fmt="table")
    assert rc == 0, err
    manifest = manifest_of(ws)
    assert f"graph {manifest['graph_name']}: 4 fused ops" in text
    assert "conv1/Conv2D, conv1/BiasAdd, conv1/Relu" in text
    assert "fusion_result.json passes" in text and "TbeCommonRules0FusionPass" in text


def test_without_fusion_file_the_ops_are_still_listed(workspaces, capsys, tmp_path):
    ws = tmp_path / "ws"
    shutil.copytree(workspaces[1], ws)
    (ws / manifest_of(ws)["paths"]["fusion_file"]).unlink()
    data = run_json(ws, "fusion", capsys)
    assert data["passes"] == [] and len(data["fused_ops"]) == 4
    rc, text, _ = run(ws, "fusion", capsys, fmt="table")
    assert rc == 0 and "fusion_result.json" in text and "not loaded" in text
