"""``vcs``: failing ops in execution order, root vs propagated, first divergence, CI exit codes,
vendor CSV input, ``--metric`` conditions and the compare panel. The expected roots and the ops
they contaminate come from the sample generator's manifest."""

from __future__ import annotations

import csv
import json
import math
import shutil

import pytest

from precision_shell.analysis.compare.metrics import METRIC_COLUMNS
from precision_shell.analysis.root_cause.graph import parse_condition
from precision_shell.cli import main
from precision_shell.errors import UsageError
from precision_shell.formats.compare_csv import read_compare_csv
from precision_shell.samples.writer import SampleOptions, write_workspace


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    root = tmp_path_factory.mktemp("vcs_ws")
    return root, write_workspace(root, SampleOptions(seed=0))


def run(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def json_docs(out: str) -> list:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def order_of(manifest) -> dict[str, int]:
    return {op["name"]: op["order"] for op in manifest["ops"] if op.get("order") is not None}


def test_lossy_op_is_the_first_root_and_its_downstream_is_propagated(sample, capsys, tmp_path):
    root, manifest = sample
    rc, out, err = run(capsys, root, "-o", tmp_path, "-c", "vcs -c 0.98", "--format", "json")
    assert rc == 0, err
    rows = json_docs(out)[0]
    by_op = {r["op"]: r for r in rows}
    lossy, overflow = manifest["lossy"], manifest["overflow"]
    order = order_of(manifest)

    # roots: the lossy kernel and the fp16 overflow; whichever runs first is the first divergence
    roots = [r["op"] for r in rows if r["role"] == "root"]
    assert sorted(roots, key=order.get) == roots
    assert set(roots) == {lossy["op"], overflow["op"]}
    first = [r["op"] for r in rows if r["first"]]
    assert first == [min((lossy["op"], overflow["op"]), key=order.get)]
    assert by_op[lossy["op"]]["tensor"] == lossy["tensor"]
    assert abs(by_op[lossy["op"]]["cosine"] - lossy["cosine"]) <= 1.5e-6
    assert all(abs(i["cosine"] - c) <= 1.5e-6 for i, c in
               zip(by_op[lossy["op"]]["inputs"], lossy["input_cosines"]))

    # everything the generator says they contaminate is propagated; nothing else fails
    downstream = set(lossy["downstream_below_threshold"]) | set(overflow["downstream_non_finite"])
    assert {r["op"] for r in rows if r["role"] == "propagated"} == downstream
    assert [r["order"] for r in rows] == sorted(r["order"] for r in rows)
    assert [r["op"] for r in rows] == sorted(by_op, key=order.get)
    # NaN cosine (the overflow) is reported as null, not dropped
    assert by_op[overflow["op"]]["cosine"] is None
    # JSON keys product.md promises
    for key in ("order", "op", "type", "tensor", "golden", "cosine", "max_abs_error", "role", "first"):
        assert key in rows[0]


def test_fused_root_gets_fusion_blame(sample, capsys, tmp_path):
    root, manifest = sample
    rc, out, _ = run(capsys, root, "-o", tmp_path, "-c", "vcs")
    lossy = next(op for op in manifest["ops"] if op["name"] == manifest["lossy"]["op"])
    assert lossy["passes"]
    blame = [line for line in out.splitlines() if line.startswith("fusion blame:")]
    assert len(blame) == 1 and lossy["name"] in blame[0]
    assert all(p in blame[0] for p in lossy["passes"])
    assert "export suspects --format fusion-switch" in blame[0]
    assert "◀ first divergence" in out


def test_fail_on_findings_exits_3_when_ops_fail(sample, capsys, tmp_path):
    rc, _, _ = run(capsys, sample[0], "-o", tmp_path, "-c", "vcs -c 0.98", "--fail-on-findings")
    assert rc == 3
    rc, _, _ = run(capsys, sample[0], "-o", tmp_path, "-c", "vcs -c 0.98")
    assert rc == 0   # findings only change the exit code when asked


def test_fail_on_findings_exits_0_when_nothing_fails(sample, capsys, tmp_path):
    ws = tmp_path / "ws"
    shutil.copytree(sample[0] / "precision_data", ws / "precision_data")
    npu = ws / "precision_data" / "npu"
    shutil.copytree(npu / "debug_0" / "dump", npu / "debug_1" / "dump")
    rc, out, err = run(capsys, ws, "-o", tmp_path / "o", "-c", "vc --against debug_1; vcs",
                       "--fail-on-findings", "--format", "json")
    assert rc == 0, err
    assert json_docs(out)[1] == []


def test_vendor_csv_gives_the_same_list(sample, capsys, tmp_path):
    rc, out, _ = run(capsys, sample[0], "-o", tmp_path, "-c", "vc; vcs", "--format", "json")
    summary, live = json_docs(out)
    rc, out, err = run(capsys, sample[0], "-o", tmp_path, "-c", f"vcs -f {summary['csv']}",
                       "--format", "json")
    assert rc == 0, err
    from_csv = json_docs(out)[0]
    assert [(r["op"], r["role"], r["first"], r["tensor"]) for r in from_csv] == \
        [(r["op"], r["role"], r["first"], r["tensor"]) for r in live]
    for a, b in zip(from_csv, live):
        if b["cosine"] is not None:
            assert a["cosine"] == pytest.approx(b["cosine"], abs=5e-7)   # printed to 6 decimals


def test_old_layout_vendor_csv_is_read_by_header(sample, capsys, tmp_path):
    rc, out, _ = run(capsys, sample[0], "-o", tmp_path, "-c", "vc", "--format", "json")
    rows = read_compare_csv(json.loads(out)["csv"])
    old = tmp_path / "result_old.csv"
    cols = list(METRIC_COLUMNS[:5])   # old CANN: Index,LeftOp,RightOp,TensorIndex,<5 metrics>
    with old.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["Index", "LeftOp", "RightOp", "TensorIndex", *cols])
        for r in rows:
            w.writerow([r.index, r.npu_op, ",".join(r.golden_ops) or "*", r.tensor,
                        *("NaN" if r.metrics[c] is None else "%.6f" % r.metrics[c] for c in cols)])
    rc, out, err = run(capsys, sample[0], "-o", tmp_path, "-c", f"vcs -c 0.98 -f {old}",
                       "--format", "json")
    assert rc == 0, err
    got = json_docs(out)[0]
    # expected from the CSV rows themselves: outputs with cosine <= 0.98 or NaN, or a non-finite
    # max abs error (NaN/Inf on one side; a 1-element output keeps cosine 1), except rows without
    # a golden (the old layout has no CompareFailReason: an all-NaN row with GroundTruth "*"
    # says it). "*" rows with numbers (Cast/TransData without original names, formats.md A.8.5)
    # were compared and count.
    expect = []
    for r in rows:
        cos, mae = r.metrics["CosineSimilarity"], r.metrics["MaxAbsoluteError"]
        numbers = any(v is not None and not math.isnan(v) for v in (r.metrics[c] for c in cols))
        compared = numbers or bool(r.golden_ops)
        bad = cos is None or math.isnan(cos) or cos <= 0.98 or (mae is not None and not math.isfinite(mae))
        if r.kind == "output" and compared and bad:
            expect.append(r.npu_op) if r.npu_op not in expect else None
    assert [g["op"] for g in got] == expect


def test_metric_condition_adds_failures(sample, capsys, tmp_path):
    rc, out, _ = run(capsys, sample[0], "-o", tmp_path, "-c",
                     'vc; vcs -c -1 --metric "max_abs_error>0.04"', "--format", "json")
    summary, got = json_docs(out)
    rows = read_compare_csv(summary["csv"])
    expect, nan_only = [], []
    for r in rows:
        mae, cos = r.metrics["MaxAbsoluteError"], r.metrics["CosineSimilarity"]
        if r.kind != "output" or r.fail_reason.startswith("There is no"):
            continue
        nan = (cos is not None and math.isnan(cos)) or not math.isfinite(mae)
        if (nan or mae > 0.04) and r.npu_op not in expect:
            expect.append(r.npu_op)
        if nan and r.npu_op not in nan_only:
            nan_only.append(r.npu_op)
    assert [g["op"] for g in got] == expect
    assert len(expect) > len(nan_only)   # the condition, not only NaN, made ops fail


@pytest.mark.parametrize("text", ["max_abs_error", "bogus>1", "cosine<abc", ""])
def test_bad_metric_conditions_are_usage_errors(text):
    with pytest.raises(UsageError):
        parse_condition(text)


def test_condition_names_accept_vendor_columns():
    c = parse_condition("MaxAbsoluteError >= 0.5")
    assert (c.key, c.op, c.value) == ("max_abs_error", ">=", 0.5)
    assert parse_condition("cos<0.9").key == "cosine"


def test_bad_vcs_flags_exit_2(sample, capsys, tmp_path):
    rc, _, err = run(capsys, sample[0], "-o", tmp_path, "-c", "vcs --metric nonsense")
    assert rc == 2 and "NAME<VALUE" in err
    rc, _, err = run(capsys, sample[0], "-o", tmp_path, "-c", "vcs -c 3")
    assert rc == 2


def test_limit_keeps_roots_and_says_how_many_more(sample, capsys, tmp_path):
    root, manifest = sample
    rc, out, _ = run(capsys, root, "-o", tmp_path, "-c", "vcs -l 2")
    lines = out.splitlines()
    assert manifest["lossy"]["op"] in out and manifest["overflow"]["op"] in out
    total = 2 + len(manifest["lossy"]["downstream_below_threshold"]) + \
        len(manifest["overflow"]["downstream_non_finite"])
    # the footer counts the hidden rows by role: only propagated ones, as roots are never cut
    assert f"... {total - 2} more not shown: {total - 2} propagated (roots and producers are never cut; " \
           f"-l 0 shows all)" in lines


def test_next_walks_the_compare_list_with_panels(sample, capsys, tmp_path):
    root, manifest = sample
    rc, out, err = run(capsys, root, "-o", tmp_path, "-c", "vcs; next; next", "--format", "json")
    assert rc == 0, err
    rows, first, second = json_docs(out)
    assert first["op"] == rows[0]["op"] and second["op"] == rows[1]["op"]
    assert {t["tensor"] for t in first["inputs"]} == \
        {f"{first['op']}:input:{i}" for i in range(len(first["inputs"]))}
    rc, out, _ = run(capsys, root, "-o", tmp_path, "-c", "vcs; next")
    assert f"[1/{len(rows)}] {rows[0]['op']}" in out and "FAIL" in out
