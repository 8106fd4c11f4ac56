"""``ls``, ``ni`` (panel and ``-s`` DOT neighbourhood), ``li``/``lo`` on a generated workspace.

Truth comes from the generator: its manifest (ops, edges, passes, original op names) and its
arrays (``run_network``); the DOT file is parsed here and compared with a BFS written here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
from collections import Counter, deque
from pathlib import Path

import numpy as np
import pytest

from precision_shell.cli import main
from precision_shell.samples.__main__ import main as generate
from precision_shell.samples.network import run_network


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("inspect_ws")
    assert generate([str(root), "--force"]) == 0
    return root


@pytest.fixture(scope="module")
def manifest(ws) -> dict:
    return json.loads((ws / "pshell_sample_manifest.json").read_text())


@pytest.fixture(scope="module")
def net():
    return run_network(0)


def run(ws: Path, commands: str, capsys, fmt: str = "json", out: Path | None = None):
    argv = [str(ws), "-c", commands, "--format", fmt]
    if out is not None:
        argv += ["-o", str(out)]
    rc = main(argv)
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def run_json(ws, command, capsys, out=None):
    rc, text, err = run(ws, command, capsys, out=out)
    assert rc == 0, err
    return json.loads(text)


def all_ops(manifest) -> list[dict]:
    return manifest["graph_only_ops"] + manifest["ops"]


def data_edges(manifest) -> set[tuple[str, str, int, int]]:
    """(producer, consumer, producer output, consumer input) from the manifest's input sources."""
    edges = set()
    for op in all_ops(manifest):
        for j, inp in enumerate(op["inputs"]):
            producer, out = inp["source"].rsplit(":", 1)
            edges.add((producer, op["name"], int(out), j))
    return edges


def bfs(edges, start: str, depth: int) -> dict[str, int]:
    neighbours: dict[str, set[str]] = {}
    for a, b, _, _ in edges:
        neighbours.setdefault(a, set()).add(b)
        neighbours.setdefault(b, set()).add(a)
    dist, queue = {start: 0}, deque([start])
    while queue:
        node = queue.popleft()
        if dist[node] == depth:
            continue
        for other in neighbours.get(node, ()):
            if other not in dist:
                dist[other] = dist[node] + 1
                queue.append(other)
    return dist


_DOT_ID = r'"((?:[^"\\]|\\.)*)"'
_DOT_NODE = re.compile(rf"^\s*{_DOT_ID}\s*\[(.*)\];\s*$")
_DOT_EDGE = re.compile(rf"^\s*{_DOT_ID}\s*->\s*{_DOT_ID}\s*\[(.*)\];\s*$")


def parse_dot(text: str):
    """Nodes {name: attribute text} and edges [(src, dst, attribute text)] of our DOT output."""
    unquote = lambda s: re.sub(r"\\(.)", r"\1", s)  # noqa: E731
    nodes, edges = {}, []
    lines = text.strip().splitlines()
    assert lines[0].startswith("digraph ") and lines[-1] == "}"
    for line in lines[1:-1]:
        if m := _DOT_EDGE.match(line):
            edges.append((unquote(m[1]), unquote(m[2]), m[3]))
        elif (m := _DOT_NODE.match(line)) and not m[1].startswith(LEGEND):
            nodes[unquote(m[1])] = m[2]
    return nodes, edges


LEGEND = "\u2063"   # the legend's node ids start with an invisible separator


def parse_legend(text: str) -> dict[str, str]:
    """The legend of our DOT output: {meaning: fill colour}."""
    found = re.findall(r'"\u2063legend [^"]*" \[label="([^"]*)"(?:, fillcolor="([^"]*)")?', text)
    return {meaning: fill for meaning, fill in found}


# ---- ls ---------------------------------------------------------------------------------------

def test_ls_pass_lists_exactly_the_ops_that_pass_fused(ws, manifest, capsys):
    assert manifest["passes"], "the generator must fuse something"
    for pass_name, fused in manifest["passes"].items():
        rows = run_json(ws, f"ls -f {pass_name}", capsys)
        # -f is a case-insensitive substring: every pass name containing it counts
        expected = [op["name"] for op in manifest["ops"]
                    if any(pass_name.lower() in p.lower() for p in op["passes"])]
        assert [r["op"] for r in rows] == expected
        assert set(fused) <= {r["op"] for r in rows}
        exact = run_json(ws, f'ls -f "/^{pass_name}$/"', capsys)
        assert [r["op"] for r in exact] == fused
        for r in exact:
            m = next(op for op in manifest["ops"] if op["name"] == r["op"])
            assert r["original_ops"] == m["original_ops"] and r["passes"] == m["passes"]
            assert r["type"] == m["type"]


def test_ls_without_filter_is_the_op_type_histogram(ws, manifest, capsys):
    rows = run_json(ws, "ls", capsys)
    expected = Counter(op["type"] for op in all_ops(manifest))
    assert {r["type"]: r["ops"] for r in rows} == dict(expected)
    counts = [r["ops"] for r in rows]
    assert counts == sorted(counts, reverse=True)
    fused = Counter(op["type"] for op in manifest["ops"]
                    if op["passes"] or len(op["original_ops"] or []) > 1)
    assert {r["type"]: r["fused"] for r in rows if r["fused"]} == dict(fused)


def test_ls_filters_name_regex_type_fused_and_kernel(ws, manifest, capsys):
    names = [op["name"] for op in all_ops(manifest)]
    rows = run_json(ws, 'ls -n "/^fc[0-9]/" -l 1', capsys)   # JSON ignores the display limit
    assert sorted(r["op"] for r in rows) == sorted(n for n in names if re.match(r"^fc[0-9]", n))
    rows = run_json(ws, "ls -t transdata", capsys)
    assert sorted(r["op"] for r in rows) == sorted(op["name"] for op in all_ops(manifest)
                                                   if "transdata" in op["type"].lower())
    rows = run_json(ws, "ls --fused", capsys)
    assert [r["op"] for r in rows] == [op["name"] for op in manifest["ops"]
                                       if op["passes"] or len(op["original_ops"] or []) > 1]
    kernel = run_json(ws, "ni fc1/MatMul", capsys)["kernel"]
    assert kernel
    assert [r["op"] for r in run_json(ws, f'ls -k "/^{kernel}$/"', capsys)] == ["fc1/MatMul"]
    # the table shows the limit and says how many more there are
    rc, text, _ = run(ws, "ls -t Const -l 2", capsys, fmt="table")
    n_const = sum(op["type"] == "Const" for op in all_ops(manifest))
    assert rc == 0 and f"... {n_const - 2} more (use -l 0)" in text


def test_ls_bad_regex_is_one_line_and_the_batch_continues(ws, capsys):
    rc, out, err = run(ws, 'ls -t "/(/"; ls -t Conv2D', capsys)
    assert rc == 1
    assert err.count("\n") == 1 and "bad regular expression" in err
    assert json.loads(out)[0]["op"] == "conv1/Conv2D"


# ---- ni ---------------------------------------------------------------------------------------

def test_ni_panel_matches_generator(ws, manifest, net, capsys):
    op = next(o for o in manifest["ops"] if o["name"] == "fc1/MatMul")
    panel = run_json(ws, "ni fc1/MatMul", capsys)
    assert panel["type"] == op["type"] and panel["passes"] == op["passes"]
    assert panel["original_ops"] == op["original_ops"]
    assert [f"{i['producer']}:{i['producer_output']}" for i in panel["inputs"]] == \
        [i["source"] for i in op["inputs"]]
    consumers = sorted((o["name"], j) for o in all_ops(manifest) for j, i in enumerate(o["inputs"])
                       if i["source"] == "fc1/MatMul:0")
    assert sorted((c["op"], c["input"]) for c in panel["outputs"][0]["consumers"]) == consumers
    assert panel["outputs"][0]["shape"] == op["outputs"][0]["device_shape"]
    # dump stats: the generator's own NPU arrays (logical layout)
    (dump,) = panel["dumps"]
    assert Path(dump["file"]).name == Path(op["dump_file"]).name
    npu_op = net.op("fc1/MatMul")
    for t in dump["tensors"]:
        arr = (npu_op.inputs[t["index"]].tensor if t["kind"] == "input" else npu_op.outputs[t["index"]]).npu
        arr = arr.astype(np.float64)
        assert t["logical_shape"] == list(arr.shape)
        assert t["stats"]["min"] == arr.min() and t["stats"]["max"] == arr.max()
        assert t["stats"]["mean"] == pytest.approx(arr.mean(), rel=1e-9)
        assert t["stats"]["zero"] == int((arr == 0).sum())
    # golden: every original op's golden file, the output's origin marked
    golden = {g["tensor"]: g for g in panel["golden"]}
    assert set(golden) == {f"{name}:0" for name in op["original_ops"]}
    origin = op["outputs"][0]["golden"]
    assert golden[origin]["for_output"] == 0
    expected = np.load(ws / manifest["golden_files"][origin]).astype(np.float64)
    assert golden[origin]["stats"]["max"] == expected.max()
    assert golden[origin]["stats"]["std"] == pytest.approx(expected.std(), rel=1e-9)


def test_ni_text_panel_and_all_attrs(ws, capsys):
    rc, text, err = run(ws, "ni fc1/MatMul -a", capsys, fmt="table")
    assert rc == 0, err
    for piece in ("fc1/MatMul (MatMulV2)", "MatMulBiasAddFusionPass", "fc1/MatMul, fc1/BiasAdd",
                  "trans_TransData_3:0 (TransData)", "attrs", "_datadump_original_op_names"):
        assert piece in text
    attrs = run_json(ws, "ni fc1/MatMul -a", capsys)["attrs"]
    assert attrs["pass_name"] == "MatMulBiasAddFusionPass"


def test_ni_ambiguous_and_unknown_names(ws, capsys):
    rc, out, err = run(ws, "ni MatMul; ni no_such_op; ls -t Conv2D", capsys)
    assert rc == 1
    lines = err.strip().splitlines()
    assert len(lines) == 2
    assert "fc1/MatMul" in lines[0] and "fc2/MatMul" in lines[0] and "matches 2 ops" in lines[0]
    assert "no op matches 'no_such_op'" in lines[1]
    assert json.loads(out)[0]["op"] == "conv1/Conv2D"   # the shell went on


def _no_dot_path(tmp_path, monkeypatch):
    empty = tmp_path / "empty_bin"
    empty.mkdir(exist_ok=True)
    monkeypatch.setenv("PATH", str(empty))


@pytest.mark.parametrize("center", ["fc1/MatMul", "ln1/add_1/LayerNorm", "loss_scale/Mul"])
def test_ni_s2_writes_exactly_the_depth2_neighbourhood(ws, manifest, capsys, tmp_path, monkeypatch, center):
    _no_dot_path(tmp_path, monkeypatch)
    out_dir = tmp_path / "out"
    panel = run_json(ws, f"ni {center} -s 2", capsys, out=out_dir)
    files = panel["subgraph"]
    dot_path = Path(files["dot"])
    assert dot_path.parent == out_dir / "graphs" and dot_path.name.endswith("_d2.dot")
    assert files["svg"] is None and "dot" in files["svg_note"]
    nodes, edges = parse_dot(dot_path.read_text())
    all_edges = data_edges(manifest)
    dist = bfs(all_edges, center, 2)
    assert set(nodes) == set(dist)
    assert {(a, b) for a, b, _ in edges} == {(a, b) for a, b, _, _ in all_edges if a in dist and b in dist}
    for a, b, attrs in edges:
        labels = {f'label="{o}→{i}"' for x, y, o, i in all_edges if (x, y) == (a, b)}
        assert any(lab in attrs for lab in labels)
    types = {op["name"]: op["type"] for op in all_ops(manifest)}
    for name, attrs in nodes.items():
        assert f"\\n{types[name]}" in attrs
    assert "penwidth=3" in nodes[center]
    # the text panel says where the file went and that there is no SVG
    rc, text, _ = run(ws, f"ni {center} -s 2", capsys, fmt="table", out=out_dir)
    assert str(dot_path) in text and "not on PATH" in text


def test_ni_s_makes_svg_when_dot_is_installed(ws, capsys, tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "dot"
    # a stand-in Graphviz: records its arguments and writes the -o file
    fake.write_text('#!/bin/sh\necho "$@" > "$(dirname "$0")/args"\n'
                    'while [ $# -gt 0 ]; do if [ "$1" = "-o" ]; then echo "<svg/>" > "$2"; fi; shift; done\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", str(bin_dir) + os.pathsep + os.environ.get("PATH", ""))
    panel = run_json(ws, "ni pool1/MaxPool -s 1", capsys, out=tmp_path / "out")
    svg = Path(panel["subgraph"]["svg"])
    assert svg.read_text().strip() == "<svg/>" and svg.with_suffix(".dot").exists()
    assert "-Tsvg" in (bin_dir / "args").read_text()
    # a failing dot: no SVG, the reason said, the command still succeeds
    fake.write_text("#!/bin/sh\necho 'syntax error' >&2\nexit 3\n")
    panel = run_json(ws, "ni pool1/MaxPool -s 1", capsys, out=tmp_path / "out2")
    assert panel["subgraph"]["svg"] is None and "exit 3" in panel["subgraph"]["svg_note"]


def test_ni_depth0_is_the_op_alone(ws, capsys, tmp_path):
    panel = run_json(ws, "ni pool1/MaxPool -s 0", capsys, out=tmp_path)
    nodes, edges = parse_dot(Path(panel["subgraph"]["dot"]).read_text())
    assert list(nodes) == ["pool1/MaxPool"] and edges == []
    rc, _, err = run(ws, "ni pool1/MaxPool -s -1", capsys)
    assert rc == 1 and "-s DEPTH" in err


# ---- li / lo ----------------------------------------------------------------------------------

def test_li_depth1_lists_each_input_with_its_producer(ws, manifest, capsys):
    for op in manifest["ops"]:
        rows = run_json(ws, f'li "{op["name"]}"', capsys)
        assert [(r["input"], f'{r["op"]}:{r["output"]}') for r in rows] == \
            [(j, i["source"]) for j, i in enumerate(op["inputs"])]
        assert all(r["depth"] == 1 and r["edge"] == "data" for r in rows)


def test_li_lo_unlimited_depth_reach_all_ancestors_and_descendants(ws, manifest, capsys):
    edges = data_edges(manifest)

    def reach(start, forward):
        seen, queue = set(), [start]
        while queue:
            node = queue.pop()
            for a, b, _, _ in edges:
                nxt = b if forward else a
                if (a if forward else b) == node and nxt not in seen:
                    seen.add(nxt)
                    queue.append(nxt)
        return seen

    lossy = manifest["lossy"]["op"]
    rows = run_json(ws, f"lo {lossy} -d 0", capsys)
    assert {r["op"] for r in rows} == reach(lossy, True)
    assert set(manifest["lossy"]["downstream_below_threshold"]) <= {r["op"] for r in rows}
    rows = run_json(ws, f"li {lossy} -d 0", capsys)
    assert {r["op"] for r in rows} == reach(lossy, False)
    # each op is expanded once; later sightings are marked, not repeated
    expanded = [r["op"] for r in rows if not r["repeated"]]
    assert len(expanded) == len(set(expanded))


def test_lo_text_tree_is_indented_by_depth(ws, capsys):
    rc, text, err = run(ws, "lo conv1/Conv2D -d 2", capsys, fmt="table")
    assert rc == 0, err
    lines = text.splitlines()
    assert lines[0] == "conv1/Conv2D (Conv2D)"
    # output 0 of the op above feeds input 0 of the next: the consumer tensor by its printed name
    assert lines[1].startswith("|- :0 -> pool1/MaxPool:in0  (MaxPool)")
    assert lines[2].startswith("|  |- :0 -> trans_TransData_2:in0  (TransData)")
    assert len(lines) == 3


def test_ni_after_compare_shows_metrics_and_colours_suspects(ws, manifest, capsys, tmp_path):
    lossy = manifest["lossy"]
    rc, out, err = run(ws, f"vcs -c 0.98; ni {lossy['op']} -s 2", capsys, out=tmp_path)
    assert rc == 0, err
    vcs_rows, panel = (json.loads(line) for line in out.strip().splitlines())
    roles = {r["op"]: r["role"] for r in vcs_rows}
    assert panel["role"] == "root" == roles[lossy["op"]]
    metric = next(m for m in panel["metrics"] if m["tensor"] == lossy["tensor"])
    assert metric["cosine"] == pytest.approx(lossy["cosine"], abs=1e-6)
    nodes, _ = parse_dot(Path(panel["subgraph"]["dot"]).read_text())
    assert f"cos {lossy['cosine']:.4f}" in nodes[lossy["op"]] and "#f4a3a3" in nodes[lossy["op"]]
    downstream = [n for n in lossy["downstream_below_threshold"] if n in nodes]
    assert downstream, "depth 2 reaches a propagated op"
    for name in downstream:
        assert roles[name] == "propagated" and "#fcd9a8" in nodes[name] and "propagated" in nodes[name]
    # GE-inserted Cast/TransData outputs meet their producer's golden (formats.md A.8.5): each
    # shows its cosine, and is painted by role when vcs lists it (trans_Cast_5 inherits the
    # root's), else by its cosine (passing: the legend's "cosine > 0.98" colour)
    text = Path(panel["subgraph"]["dot"]).read_text()
    legend = parse_legend(text)
    trans = [name for name in nodes if name.startswith("trans_")]
    assert trans and any(name in roles for name in trans) and any(name not in roles for name in trans)
    for name in trans:
        assert "cos " in nodes[name]
        want = legend[roles[name]] if name in roles else legend["cosine > 0.98"]
        assert f'fillcolor="{want}"' in nodes[name], name
    # the legend names every colour the picture uses, and nothing else
    used = {m for m in re.findall(r'fillcolor="([^"]*)"', "\n".join(nodes.values()))}
    assert set(legend.values()) - {None, ""} == used


def test_ni_s_file_dot_and_svg(ws, manifest, capsys, tmp_path, monkeypatch):
    lossy = manifest["lossy"]["op"]
    monkeypatch.chdir(tmp_path)
    _no_dot_path(tmp_path, monkeypatch)
    rc, out, err = run(ws, f"vcs; ni {lossy} -s hood.dot -d 1", capsys, out=tmp_path / "out")
    assert rc == 0, err
    panel = json.loads(out.strip().splitlines()[-1])
    assert Path(panel["subgraph"]["dot"]).resolve() == (tmp_path / "hood.dot").resolve()
    assert panel["subgraph"]["depth"] == 1
    nodes, edges = parse_dot((tmp_path / "hood.dot").read_text())
    assert set(nodes) == set(bfs(data_edges(manifest), lossy, 1))
    assert "root / overflow producer" in parse_legend((tmp_path / "hood.dot").read_text())
    assert panel["subgraph"]["svg"] is None and not (tmp_path / "hood.svg").exists()
    rc, _, err = run(ws, f"ni {lossy} -s hood.txt", capsys)
    assert rc == 1 and "a file ending .dot or .svg" in err


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz `dot` is not installed")
def test_ni_s_file_svg_is_rendered_by_graphviz(ws, manifest, capsys, tmp_path, monkeypatch):
    lossy = manifest["lossy"]["op"]
    monkeypatch.chdir(tmp_path)
    rc, out, err = run(ws, f"vcs; ni {lossy} -s hood.svg", capsys, out=tmp_path / "out")
    assert rc == 0, err
    svg = (tmp_path / "hood.svg").read_text()
    assert svg.lstrip().startswith("<?xml") or "<svg" in svg[:500]
    assert lossy in svg and "legend" in svg and "#f4a3a3" in svg.lower()


@pytest.fixture(scope="module")
def ws_control(ws, manifest, tmp_path_factory) -> Path:
    """A copy of the workspace whose graph has a control edge aux/Sum -> aux/Sub (``:-1``)."""
    from google.protobuf import text_format

    from precision_shell.formats.protoload import ge_ir_pb

    root = tmp_path_factory.mktemp("control_ws") / "ws"
    shutil.copytree(ws, root)
    graph_file = root / manifest["paths"]["graph_file"]
    model = text_format.Parse(graph_file.read_text(), ge_ir_pb().ModelDef())
    (sub,) = [op for op in model.graph[0].op if op.name == "aux/Sub"]
    sub.input.append("aux/Sum:-1")
    graph_file.write_text(text_format.MessageToString(model))
    return root


def test_control_edges_shown_with_c_and_dashed_but_never_widen(ws_control, manifest, capsys, tmp_path):
    rows = run_json(ws_control, "li aux/Sub", capsys)
    assert all(r["edge"] == "data" for r in rows)
    rows = run_json(ws_control, "li aux/Sub -c", capsys)
    control = [r for r in rows if r["edge"] == "control"]
    assert [(r["op"], r["depth"]) for r in control] == [("aux/Sum", 1)]
    assert [r["op"] for r in run_json(ws_control, "lo aux/Sum -c", capsys) if r["edge"] == "control"] == ["aux/Sub"]
    rc, text, _ = run(ws_control, "li aux/Sub -c", capsys, fmt="table")
    assert "|- [ctrl] aux/Sum  (ReduceSumD)" in text
    # distance counts data edges only: aux/Sum is 3 data hops from aux/Sub
    assert bfs(data_edges(manifest), "aux/Sub", 3)["aux/Sum"] == 3
    for depth, present in ((2, False), (3, True)):
        panel = run_json(ws_control, f"ni aux/Sub -s {depth}", capsys, out=tmp_path)
        nodes, edges = parse_dot(Path(panel["subgraph"]["dot"]).read_text())
        assert ("aux/Sum" in nodes) == present
        dashed = [(a, b) for a, b, attrs in edges if "dashed" in attrs]
        assert dashed == ([("aux/Sum", "aux/Sub")] if present else [])


def test_without_a_graph_graph_commands_say_so_and_pt_golden_still_works(ws, manifest, capsys, tmp_path):
    root = tmp_path / "ws"
    shutil.copytree(ws, root)
    for f in (root / manifest["paths"]["graph_file"]).parent.glob("ge_proto_*"):
        f.unlink()
    rc, out, err = run(root, "ls; ni fc1/MatMul; li fc1/MatMul; pt golden:fc1/BiasAdd:0[0, :2]", capsys)
    assert rc == 1
    errors = [line for line in err.splitlines() if "no graph loaded" in line]
    assert len(errors) == 3
    golden = np.load(root / manifest["golden_files"]["fc1/BiasAdd:0"])
    assert json.loads(out)["values"] == golden[0, :2].astype(float).tolist()
