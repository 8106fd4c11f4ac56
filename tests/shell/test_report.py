"""``report``: the gathered data on the sample workspace (truth from the generator's manifest and
from the commands' own output), the command in batch mode, and its one-line refusals."""

from __future__ import annotations

import importlib.util
import base64
import gzip
import json
import re
import shutil
import sys

import networkx as nx
import numpy as np
import pytest

from precision_shell.jsonable import jsonable
from precision_shell.model.tensor_ref import name_of
from precision_shell.model.session import Session
from precision_shell.report.gather import ensure_results, gather
from precision_shell.samples.writer import SampleOptions, write_workspace
from tests.conftest import json_docs, run_cli

pytestmark = pytest.mark.skipif(importlib.util.find_spec("jinja2") is None,
                                reason="the report extra is not installed: pip install -e '.[report]'")



@pytest.fixture(scope="module")
def report_data(sample_ws, tmp_path_factory):
    root, manifest = sample_ws
    out = tmp_path_factory.mktemp("report_out")
    session = Session.open(root, output=out)
    notes = ensure_results(session)
    return session, gather(session, notes=notes), manifest


def test_designed_root_is_first_on_the_chart_and_in_the_details(report_data):
    session, data, manifest = report_data
    lossy = manifest["lossy"]["op"]
    first = [p for p in data.points if p.first]
    assert [p.op for p in first] == [lossy]
    roots = [p for p in data.points if p.role == "root"]
    assert roots[0].op == lossy
    assert [p.order for p in data.points] == sorted(p.order for p in data.points)
    assert data.roots[0].suspect.op == lossy and data.roots[0].suspect.first
    # the chart's cosine of the root is the manifest's (rounded to 6 places there)
    assert roots[0].cosine == pytest.approx(manifest["lossy"]["cosine"], abs=1e-6)
    # every op with a compared output is on the chart: those the manifest gives a golden for
    executed = {op["name"] for op in manifest["ops"] if "order" in op
                and any(o["cosine"] is not None or not o["finite"] for o in op["outputs"])}
    assert executed <= {p.op for p in data.points}
    assert data.roots_total == 2 and data.roots[1].suspect.op == manifest["overflow"]["op"]


def test_root_neighbourhood_is_the_depth_2_data_neighbourhood(report_data):
    session, data, manifest = report_data
    lossy = manifest["lossy"]["op"]
    picture = data.roots[0].graph
    assert picture.center == lossy and picture.depth == 2
    data_edges = nx.Graph()
    data_edges.add_nodes_from(session.graph.nx.nodes)
    data_edges.add_edges_from((a, b) for a, b, d in session.graph.nx.edges(data=True) if d["kind"] == "data")
    expected = set(nx.ego_graph(data_edges, lossy, radius=2))
    assert {n.key for n in picture.nodes} == expected
    entry = next(op for op in manifest["ops"] if op["name"] == lossy)
    producers = {i["source"].rsplit(":", 1)[0] for i in entry["inputs"]}
    distance = {n.key: n.distance for n in picture.nodes}
    assert producers and all(distance[p] == 1 for p in producers)
    centre = picture.node(lossy)
    assert centre.role == "root" and centre.failing
    assert centre.cosine == pytest.approx(manifest["lossy"]["cosine"], abs=1e-6)
    # producers are drawn above their consumers, nodes never overlap
    for e in picture.edges:
        if e.kind == "data":
            assert picture.node(e.src).y < picture.node(e.dst).y
    boxes = {(n.x, n.y) for n in picture.nodes}
    assert len(boxes) == len(picture.nodes)


def test_suspect_rows_equal_vcs_json_and_exports_decode(report_data, sample_ws, capsys, tmp_path):
    session, data, manifest = report_data
    rc, out, err = run_cli(capsys, sample_ws[0], "-o", tmp_path, "-c",
                           f"vcs --format json; export suspects --format fusion-switch -o {tmp_path}/f.cfg;"
                           f"export suspects --format keep-fp32 -o {tmp_path}/k.txt")
    assert rc == 0, err
    vcs_rows = json_docs(out.splitlines()[0])[0]
    assert jsonable(data.suspect_rows) == vcs_rows
    assert [r[2] for r in data.suspects.rows] == [r["op"] for r in vcs_rows]     # columns: #, order, op
    files = {f.name: f.text for f in data.exports}
    assert json.loads(files["suspects.json"]) == vcs_rows
    assert files["suspects_fusion_switch.cfg"] == (tmp_path / "f.cfg").read_text()
    assert files["suspects_keep_fp32.txt"] == (tmp_path / "k.txt").read_text()
    assert files["suspects.csv"].splitlines()[0].startswith("order,op,type")
    assert len(files["suspects.csv"].splitlines()) == len(vcs_rows) + 1


def test_root_histograms_bin_every_value_of_the_tensors(report_data):
    session, data, manifest = report_data
    lossy = next(op for op in manifest["ops"] if op["name"] == manifest["lossy"]["op"])
    hists = data.roots[0].histograms
    count = int(np.prod(lossy["outputs"][0]["logical_shape"]))
    assert hists.npu_tensor == name_of(manifest["lossy"]["tensor"])    # the printed form: OP:N
    assert sum(hists.npu.counts) == sum(hists.golden.counts) == sum(hists.error.counts) == count
    # the overflow root: the +inf values are counted beside the bins, not in them
    over = data.roots[1].histograms
    assert over.npu.pos_inf == manifest["overflow"]["pos_inf"]
    assert sum(over.npu.counts) + over.npu.pos_inf + over.npu.neg_inf + over.npu.nan == over.npu.total


def test_overflow_and_fusion_tables_come_from_the_commands(report_data):
    session, data, manifest = report_data
    assert data.overflow.rows[0][2] == manifest["overflow"]["op"]     # columns: #, order, op
    assert "producer" in data.overflow.rows[0][6]
    assert data.fusion is not None and data.fusion.data["passes"]
    blame = data.roots[0].suspect.fusion_blame
    assert blame and all(p in blame for p in next(
        op["passes"] for op in manifest["ops"] if op["name"] == manifest["lossy"]["op"]))


def test_batch_report_writes_one_self_contained_file(sample_ws, capsys, tmp_path):
    root, manifest = sample_ws
    target = tmp_path / "r.html"
    rc, out, err = run_cli(capsys, root, "-o", tmp_path, "-c", f"vcs -c 0.98; report -o {target} --roots 1")
    assert rc == 0, err
    assert f"wrote {target}" in out
    html = target.read_text()
    assert len(html.encode()) < 5_000_000
    # nothing loaded from elsewhere when the page opens
    assert not re.search(r'(src|href)="(https?:)?//', html)
    first = re.search(r'<g class="root-marker first-divergence" data-op="([^"]+)"', html)
    assert first and first.group(1) == manifest["lossy"]["op"]
    assert html.count('<section class="root"') == 1       # --roots 1
    commands = re.search(r'<pre id="commands">(.*?)</pre>', html, re.S).group(1).splitlines()
    assert commands == ["vcs -c 0.98", f"report -o {target} --roots 1"]
    links = re.findall(r'download="([^"]+)" data-mime="[^"]+" data-gz="([^"]+)"', html)
    assert [name for name, _ in links] == ["suspects.csv", "suspects.json", "suspects_fusion_switch.cfg",
                                           "suspects_keep_fp32.txt"]
    rows = json.loads(gzip.decompress(base64.b64decode(dict(links)["suspects.json"])))
    assert rows[0]["op"] == manifest["lossy"]["op"] and rows[0]["first"]
    # hovering the root's point names it (SVG <title>)
    assert (f"<title>#{rows[0]['order']} {rows[0]['op']} ({rows[0]['type']})\n"
            f"cosine {rows[0]['cosine']:.6g}\n") in html


def test_report_refusals_are_one_line(sample_ws, capsys, tmp_path, monkeypatch):
    root, _ = sample_ws
    rc, out, err = run_cli(capsys, root, "-o", tmp_path, "-c", f"report -o {tmp_path}/no/such/r.html")
    assert rc == 1 and err.count("\n") == 1 and "does not exist" in err
    golden_dir = root / "precision_data" / "tf" / "dump"
    rc, out, err = run_cli(capsys, root, "-o", tmp_path, "-c", f"report -o {golden_dir}/r.html")
    assert rc == 1 and err.count("\n") == 1 and "refusing to write" in err
    assert not (golden_dir / "r.html").exists()
    monkeypatch.setitem(sys.modules, "jinja2", None)        # the extra not installed
    rc, out, err = run_cli(capsys, root, "-o", tmp_path, "-c", f"report -o {tmp_path}/r.html")
    assert (rc, err) == (1, "error: report needs the optional extra: pip install 'precision-shell[report]' "
                         "(from a checkout: pip install -e '.[report]')\n")
    assert not (tmp_path / "r.html").exists()


def test_nothing_computable_is_one_line(tmp_path, capsys):
    ws = tmp_path / "ws"
    write_workspace(ws, SampleOptions(seed=0))
    pd = ws / "precision_data"
    for folder in (pd / "npu" / "debug_0" / "dump", pd / "tf", pd / "overflow"):
        shutil.rmtree(folder)
    rc, out, err = run_cli(capsys, ws, "-o", tmp_path, "-c", f"report -o {tmp_path}/r.html")
    assert rc == 1 and err.count("\n") == 1 and "nothing to report" in err, err
    assert not (tmp_path / "r.html").exists()


def test_a_large_neighbourhood_keeps_the_nearest_ops(report_data, monkeypatch):
    from precision_shell.analysis.inspect.neighbourhood import neighbourhood
    from precision_shell.report import layout

    session, data, manifest = report_data
    lossy = manifest["lossy"]["op"]
    hood = neighbourhood(session.graph, lossy, 2)
    monkeypatch.setattr(layout, "MAX_NODES", 4)
    picture = layout.neighbourhood_picture(session.graph, lossy, 2, {}, {}, 0.98)
    assert [n.key for n in sorted(picture.nodes, key=lambda n: (n.distance, hood.nodes.index(n.key)))] \
        == hood.nodes[:4]
    assert picture.omitted == len(hood.nodes) - 4 > 0
    drawn = {n.key for n in picture.nodes}
    assert all(e.src in drawn and e.dst in drawn for e in picture.edges)
    # each drawn op counts its data neighbours left out, distinct ones
    for n in picture.nodes:
        left_out = {e.dst if e.src == n.key else e.src for e in hood.edges if e.kind == "data"
                    and n.key in (e.src, e.dst) and not {e.src, e.dst} <= drawn}
        assert n.hidden == hood.hidden.get(n.key, 0) + len(left_out)


def test_each_root_carries_the_verdict_replay_gives_it(report_data, sample_ws, capsys):
    """The report replays every root shown (as `vcs --replay` does) and renders the evidence:
    the verdict equals what `replay ROOT --format json` says in a fresh session."""
    from precision_shell.report.html import render_html

    session, data, manifest = report_data
    root, _ = sample_ws
    html = render_html(data)
    for detail in data.roots:
        rc, out, err = run_cli(capsys, root, "-o", session.workspace.output_dir, "-c",
                               f"replay {detail.suspect.op}", "--format", "json")
        (expected,) = json_docs(out)
        assert rc == 0 and detail.verdict is not None, err
        assert (detail.verdict.verdict, detail.verdict.profile) == (expected["verdict"], expected["profile"])
        assert [c.profile for c in detail.verdict.candidates] == [c["profile"] for c in expected["candidates"]]
        assert f"Replay verdict: {expected['verdict']}" in html
    assert data.roots[0].verdict.verdict == "kernel"   # the sample's designed lossy LayerNorm kernel
