"""``export suspects|compare``: CSV/JSON lists, the fusion-switch config and the keep-fp32 list,
written atomically; truth from the generator's manifest and its fusion_result.json."""

from __future__ import annotations

import csv
import json

import pytest

from precision_shell.cli import main
from precision_shell.formats.compare_csv import read_compare_csv, rows_equal
from precision_shell.formats.fusion_result import read_fusion_result
from precision_shell.samples.writer import SampleOptions, write_workspace


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    root = tmp_path_factory.mktemp("export_ws")
    return root, write_workspace(root, SampleOptions(seed=0))


def run(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def roots_of(manifest) -> list[dict]:
    names = {manifest["lossy"]["op"], manifest["overflow"]["op"]}
    return sorted((op for op in manifest["ops"] if op["name"] in names), key=lambda op: op["order"])


def test_suspects_json_and_csv_hold_the_vcs_rows(sample, capsys, tmp_path):
    rc, out, err = run(capsys, sample[0], "-o", tmp_path, "-c",
                       f"vcs; export suspects -o {tmp_path}/s.json; export suspects -o {tmp_path}/s.csv",
                       "--format", "json")
    assert rc == 0, err
    vcs_rows, msg_json, msg_csv = (json.loads(line) for line in out.splitlines())
    assert json.loads((tmp_path / "s.json").read_text()) == vcs_rows
    assert msg_json["rows"] == msg_csv["rows"] == len(vcs_rows)
    with (tmp_path / "s.csv").open(newline="") as fh:
        table = list(csv.DictReader(fh))
    assert [r["op"] for r in table] == [r["op"] for r in vcs_rows]
    assert [r["role"] for r in table] == [r["role"] for r in vcs_rows]
    for r, v in zip(table, vcs_rows):
        assert r["golden"] == ",".join(v["golden"])
        assert (r["cosine"] == "") == (v["cosine"] is None)
        if v["cosine"] is not None:
            assert float(r["cosine"]) == v["cosine"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]   # no temp files left


def test_fusion_switch_turns_off_the_passes_of_fused_roots(sample, capsys, tmp_path):
    root, manifest = sample
    target = tmp_path / "fusion_switch.cfg"
    rc, out, err = run(capsys, root, "-o", tmp_path, "-c",
                       f"vcs; export suspects --format fusion-switch -o {target}")
    assert rc == 0, err
    config = json.loads(target.read_text())
    kinds = {}
    for graph in read_fusion_result(root / manifest["paths"]["fusion_file"]):
        for p in graph.passes:
            kinds[p.name] = p.kind
    expect = {"GraphFusion": {}, "UBFusion": {}}
    for op in roots_of(manifest):
        for p in op["passes"]:
            section = "UBFusion" if kinds.get(p) == "ub" else "GraphFusion"
            expect[section][p] = "off"
    assert sum(map(len, expect.values())) > 0
    assert config == {"Switch": expect}


def test_keep_fp32_lists_the_framework_ops_of_the_roots(sample, capsys, tmp_path):
    root, manifest = sample
    target = tmp_path / "keep.txt"
    rc, out, err = run(capsys, root, "-o", tmp_path, "-c", f"vcs; export suspects --format keep-fp32 -o {target}")
    assert rc == 0, err
    expect = []
    for op in roots_of(manifest):
        for name in op["original_ops"] or [op["name"]]:
            if name not in expect:
                expect.append(name)
    assert target.read_text().splitlines() == expect


def test_export_compare_csv_and_json(sample, capsys, tmp_path):
    rc, out, err = run(capsys, sample[0], "-o", tmp_path, "-c",
                       f"vc; export compare -o {tmp_path}/all.csv; export compare -o {tmp_path}/all.json",
                       "--format", "json")
    assert rc == 0, err
    summary = json.loads(out.splitlines()[0])
    again = read_compare_csv(tmp_path / "all.csv")
    first = read_compare_csv(summary["csv"])
    assert len(again) == len(first) > 0
    assert all(rows_equal(a, b) for a, b in zip(again, first))   # the same result, written twice
    rows = json.loads((tmp_path / "all.json").read_text())
    assert [r["tensor"] for r in rows] == [r.tensor for r in first]
    for r, c in zip(rows, first):
        cos = c.metrics["CosineSimilarity"]
        if r["compared"] and r["cosine"] is not None:
            assert "%.6f" % r["cosine"] == "%.6f" % cos


def test_exports_run_their_analysis_first(sample, capsys, tmp_path):
    """export in a fresh session runs what it writes (vcs / ac / vc), as vcs runs vc and report
    runs ac and vcs (issue 30; it said 'run `vcs` first')."""
    for what, ran, same in (("suspects", "vcs", "vcs"), ("overflow", "ac", "ac"), ("compare", "vc", "vc")):
        rc, out, err = run(capsys, sample[0], "-o", tmp_path, "-c", f"export {what} -o {tmp_path}/{what}.json")
        assert rc == 0, err
        assert f"`{ran}` had not run, so export ran it first" in out
        rc, doc, err = run(capsys, sample[0], "-o", tmp_path / "again", "-c", f"{same}; export {what} -o "
                           f"{tmp_path}/{what}2.json")
        assert rc == 0, err
        assert json.loads((tmp_path / f"{what}.json").read_text()).__len__() == \
            json.loads((tmp_path / f"{what}2.json").read_text()).__len__() > 0


def test_exports_never_write_into_the_dump_folders(sample, capsys, tmp_path):
    golden = sample[0] / sample[1]["paths"]["golden_dir"]
    before = sorted(p.name for p in golden.iterdir())
    rc, _, err = run(capsys, sample[0], "-o", tmp_path, "-c", f"vcs; export suspects -o {golden}/s.csv")
    assert rc == 1 and "refusing to write inside the input folder" in err
    assert sorted(p.name for p in golden.iterdir()) == before


def test_fusion_switch_without_fused_roots_is_an_error(sample, capsys, tmp_path):
    # at a threshold of -1 only the NaN (overflow) ops fail: their root is not a fused op
    rc, _, err = run(capsys, sample[0], "-o", tmp_path, "-c",
                     f"vcs -c -1; export suspects --format fusion-switch -o {tmp_path}/f.cfg")
    assert rc == 1 and "no fused root op" in err
    assert not (tmp_path / "f.cfg").exists()
