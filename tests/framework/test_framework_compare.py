"""msprobe-exact compare of framework dumps: tensor metrics, statistics and md5 modes, the CSV in
msprobe's layout, and root cause over the run; checked against msprobe's own compare CSVs
committed with the sample, against numpy, and on hand-made edge cases."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest

from framework_dumps import sample
from precision_shell.analysis.compare.msprobe.engine import compare_pairs, is_failing, stat_diff
from precision_shell.analysis.compare.msprobe.tensor_metrics import (N_A, NAN, SHAPE_UNMATCHED, UNSUPPORTED,
                                                                TensorMetrics, tensor_metrics)
from precision_shell.analysis.compare.msprobe.csv_layout import header, table_rows, write_compare_csv
from precision_shell.analysis.compare.msprobe.pairing import pair_dumps
from precision_shell.analysis.root_cause.run import find_framework_suspects
from precision_shell.commands.framework_exports import keep_fp32_names
from precision_shell.formats.msprobe.dump import load_leaf, read_msprobe_dump
from precision_shell.model.framework_run import FrameworkRun

CASES = {"tensor": ("target_bf16", "golden_fp32", "compare/tensor/compare_result_rank0.csv"),
         "statistics": ("stats_target_bf16", "stats_golden_fp32", "compare/statistics/compare_result_proc0.csv"),
         "md5": ("md5_target_bf16", "md5_golden_fp32", "compare/md5/compare_result_proc0.csv")}
METRICS = ("Cosine", "EucDist", "MaxAbsErr", "MaxRelativeErr", "One Thousandth Err Ratio",
           "Five Thousandths Err Ratio")


def _rank(name):
    return read_msprobe_dump(sample() / name).ranks[0]


def _msprobe_csv(path) -> tuple[list[str], list[list[str]]]:
    with open(sample() / path, newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], rows[1:]


@pytest.fixture(scope="module")
def tensor_results():
    target, golden = _rank("target_bf16"), _rank("golden_fp32")
    return target, list(compare_pairs(pair_dumps(target, golden), "tensor"))


def _number(cell: str) -> float | str:
    try:
        return float(cell)
    except ValueError:
        return cell


def test_metrics_equal_msprobes_csv(tensor_results):
    target, results = tensor_results
    cols, table = _msprobe_csv(CASES["tensor"][2])
    assert len(results) == len(table) == 281
    compared = 0
    for result, row in zip(results, table):
        theirs = dict(zip(cols, row))
        assert result.name == theirs["NPU Name"]
        for col, ours in zip(METRICS, result.metrics.cells()):
            want = _number(theirs[col])
            if isinstance(want, float):
                assert isinstance(ours, float) and ours == pytest.approx(want, abs=1e-6), (result.name, col)
                compared += 1
            else:
                assert ours == want, (result.name, col)
    # 50 rows are int/None arguments ("unsupported" everywhere); 0-d tensors have max errors only
    assert compared == sum(1 for row in table for c in METRICS
                           if isinstance(_number(dict(zip(cols, row))[c]), float)) > 1300


@pytest.mark.parametrize("mode", sorted(CASES))
def test_table_equals_msprobes_csv_cell_for_cell(mode, tmp_path):
    t, g, path = CASES[mode]
    target = _rank(t)
    rows = table_rows(compare_pairs(pair_dumps(target, _rank(g)), mode), mode, target.stack,
                      dtype_is_error=True)
    cols, table = _msprobe_csv(path)
    assert header(mode) == cols
    out = tmp_path / "ours.csv"
    write_compare_csv(out, rows, mode)
    with open(out, newline="") as f:
        written = list(csv.reader(f))
    assert written[0] == cols
    euc = cols.index("EucDist") if mode == "tensor" else None
    for ours, theirs in zip(written[1:], table):
        if euc is not None:     # msprobe's norm sums in its BLAS's order: equal to ~1e-15
            mine, want = _number(ours.pop(euc)), _number(theirs.pop(euc))
            if isinstance(want, float):   # pytest >= 9.2 refuses approx() of a text cell ("N/A")
                assert mine == pytest.approx(want, rel=1e-12)
            else:
                assert mine == want
        assert ours == theirs
    assert len(written) - 1 == len(table)


def test_dtype_difference_alone_is_not_an_error_by_default(tensor_results):
    target, results = tensor_results
    rows = table_rows(results, "tensor", target.stack)
    assert not any("dtype" in r["Err_message"] for r in rows)
    assert {r["Result"] for r in rows} == {"pass"}


def _independent(n: np.ndarray, b: np.ndarray) -> list[float]:
    x, y = n.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    norms = np.linalg.norm(x) * np.linalg.norm(y)
    cos = float(x @ y / norms) if norms else 1.0      # two all-zero tensors are equal
    nf, bf = n.astype(np.float32).ravel(), b.astype(np.float32).ravel()
    eps = np.float32(np.finfo(np.float32).eps)
    bz = np.where(bf == 0, bf + eps, bf)
    nz = np.where(bf == 0, nf + eps, nf)
    rel = np.abs((nz - bz) / bz)
    return [cos, float(np.linalg.norm(x - y)), float(np.abs(x - y).max()), float(rel.max()),
            float((rel < 0.001).mean()), float((rel < 0.005).mean())]


def test_metrics_equal_an_independent_numpy_computation(tensor_results):
    _, results = tensor_results
    checked = 0
    for r in results:
        g = r.pair.golden
        if g is None or not r.pair.target.leaf.file or r.pair.target.leaf.dtype not in ("bfloat16", "float32"):
            continue
        n, b = load_leaf(r.pair.target.leaf), load_leaf(g.leaf)
        if n.size < 2 or not (np.isfinite(n.astype(np.float64)).all() and np.isfinite(b).all()):
            continue
        for ours, want in zip(r.metrics.cells(), _independent(n, b)):
            assert ours == pytest.approx(want, abs=1e-6, rel=1e-9), r.name
        checked += 1
    assert checked > 150


def test_tensor_metric_edge_cases():
    a = np.array([1.0, 2.0, 0.0, -4.0], dtype=np.float32)
    m = tensor_metrics(a, np.array([1.0, 2.0, 0.0, -4.0], dtype=np.float32))
    assert m.cells() == [1.0, 0.0, 0.0, 0.0, 1.0, 1.0]
    # a zero golden: both sides get float32 eps, so 1e-3 against 0 is a relative error of ~4.5e3
    m = tensor_metrics(np.array([1e-3, 1.0], np.float32), np.array([0.0, 1.0], np.float32))
    eps = np.finfo(np.float32).eps
    assert m.max_relative_err == pytest.approx(float((np.float32(1e-3) + eps - eps) / eps), rel=1e-6)
    assert m.one_thousandth == 0.5
    # NaN/Inf where both have them are zeroed; elsewhere every metric is N/A
    nan_both = np.array([np.nan, 1.0, np.inf, 2.0], np.float32)
    m = tensor_metrics(nan_both, np.array([np.nan, 1.0, np.inf, 2.5], np.float32))
    assert m.max_abs_err == 0.5 and m.one_thousandth == 0.75
    assert tensor_metrics(nan_both, a).cells() == [N_A] * 6
    # squeezed first: [1, 4] against [4] compares; [2, 2] against [4] does not
    assert tensor_metrics(a.reshape(1, 4), a).cosine == 1.0
    assert tensor_metrics(a.reshape(2, 2), a).cells() == [SHAPE_UNMATCHED] * 6
    # one element (squeezed to 0-d): no cosine, distance or ratios, but the max errors
    m = tensor_metrics(np.array([3.0], np.float32), np.array([2.0], np.float32))
    assert m.cells() == [UNSUPPORTED, UNSUPPORTED, 1.0, 0.5, UNSUPPORTED, UNSUPPORTED]
    assert tensor_metrics(np.zeros((0, 3), np.float32), np.zeros((0, 3), np.float32)).cells() == [UNSUPPORTED] * 6
    zeros = np.zeros(4, np.float32)
    assert tensor_metrics(zeros, zeros).cosine == 1.0
    assert tensor_metrics(zeros, a).cosine == NAN
    # below 0.9999 the cosine keeps 12 decimals, above it 6
    low = tensor_metrics(np.array([1.0, 0.0], np.float32), np.array([1.0, 1.0], np.float32)).cosine
    assert low == round(1 / math.sqrt(2), 12)
    # ints: relative error in float64
    m = tensor_metrics(np.array([1, 3], np.int64), np.array([1, 2], np.int64))
    assert m.max_relative_err == 0.5 and m.max_abs_err == 1.0
    # fp16 against fp32: computed, with msprobe's dtype message
    m = tensor_metrics(a.astype(np.float16), a)
    assert m.cosine == 1.0 and "Dtype of NPU and bench tensor do not match." in m.message


@pytest.mark.parametrize("npu, bench, expected", [
    ("4.09375", "4.1014933586120605", (repr(4.09375 - 4.1014933586120605),
                                       repr(abs((4.09375 - 4.1014933586120605) / 4.1014933586120605 * 100)) + "%")),
    ("1.5", "0.0", ("1.5", "inf")),
    ("37", "37", ("0", "0")),
    ("None", "None", ("0", "0")),
    ("inf", "3.0", ("inf", "inf")),
    ("3.0", "inf", ("-inf", "-inf")),
    ("nan", "3.0", ("Nan", "Nan")),
    ("N/A", "3.0", ("N/A", "N/A")),
    ("True", "False", ("Diff", "Diff")),
])
def test_statistics_diff_rules(npu, bench, expected):
    assert stat_diff(npu, bench) == expected


def test_md5_mode_compares_the_dumped_crc(tmp_path):
    target, golden = _rank("md5_target_bf16"), _rank("md5_golden_fp32")
    results = list(compare_pairs(pair_dumps(target, golden), "md5"))
    crc = {}
    for name in ("md5_target_bf16", "md5_golden_fp32"):
        doc = json.loads((sample() / json.loads((sample() / "truth.json").read_text())["runs"][name]["rank_dir"]
                          / "dump.json").read_text())
        crc[name] = {f"{e}.output.0": body["output"][0]["md5"] for e, body in doc["data"].items()
                     if isinstance(body.get("output"), list) and body["output"]
                     and isinstance(body["output"][0], dict) and "md5" in body["output"][0]}
    checked = 0
    for r in results:
        if r.name in crc["md5_target_bf16"] and r.pair.golden is not None:
            assert r.md5_equal == (crc["md5_target_bf16"][r.name] == crc["md5_golden_fp32"][r.pair.golden.name])
            checked += 1
    assert checked > 30


def test_statistics_mode_needs_no_files():
    results = list(compare_pairs(pair_dumps(_rank("stats_target_bf16"), _rank("stats_golden_fp32")), "statistics"))
    row = next(r for r in results if r.name == "Functional.softmax.0.forward.output.0")
    t, g = row.pair.target.leaf, row.pair.golden.leaf
    assert row.metrics is None and t.file is None
    assert row.stats.diffs[0] == repr(t.max - g.max)
    assert row.stats.relative[3] == repr(abs((t.norm - g.norm) / g.norm * 100)) + "%"


def test_root_cause_names_the_designed_root(tensor_results):
    target, results = tensor_results
    truth = json.loads((sample() / "truth.json").read_text())["precision_loss"]
    run = FrameworkRun(target)
    suspects = find_framework_suspects(run, results, truth["cosine_threshold"])
    roots = [s.op for s in suspects if s.role == "root"]
    first = [s for s in suspects if s.first]
    assert [s.op for s in first] == [truth["root"]]
    assert roots == [r for r in truth["roots"] if r.endswith("forward") or ".forward." in r]
    assert [s.op for s in suspects if s.role == "propagated"] == truth["propagated_forward"]
    assert first[0].cosine == pytest.approx(truth["root_output_cosine"], abs=1e-6)
    assert set(truth["propagated_forward"]) <= set(first[0].downstream)
    with_backward = find_framework_suspects(run, results, truth["cosine_threshold"], backward=True)
    backward = [s for s in with_backward if s.kind == "backward"]
    assert next(s.op for s in backward if s.role == "root") == truth["first_backward_root"]
    assert [s.op for s in backward if s.role == "propagated"] == truth["propagated_backward"]
    assert sorted(s.op for s in with_backward if s.kind == "parameters_grad") == \
        sorted(truth["failing_parameters_grad"])
    # a gradient has no recorded inputs: its own role, never a root, never a keep-fp32 name
    grads = [s for s in with_backward if s.kind == "parameters_grad"]
    assert {s.role for s in grads} == {"param_grad"} and not any(s.first for s in grads)
    assert [s.op for s in with_backward if s.role == "root"] == truth["roots"]
    assert keep_fp32_names(with_backward) == keep_fp32_names([s for s in with_backward if s not in grads])


def test_is_failing():
    def m(cos, max_abs=0.0):
        return TensorMetrics(cos, 0.0, max_abs, 0.0, 1.0, 1.0)
    assert is_failing(m(0.97), 0.98) and is_failing(m(0.98), 0.98) and not is_failing(m(0.99), 0.98)
    assert is_failing(m(NAN), 0.98) and is_failing(m(N_A), 0.98)
    assert is_failing(m(UNSUPPORTED, NAN), 0.98) and not is_failing(m(UNSUPPORTED, 1.0), 0.98)
    assert not is_failing(m(SHAPE_UNMATCHED), 0.98) and not is_failing(None, 0.98)


def test_chunked_pass_equals_one_chunk():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(1000).astype(np.float32)
    y = (x + rng.standard_normal(1000).astype(np.float32) * 1e-3).astype(np.float32)
    y[::50] = 0
    x[[3, 998]] = np.inf
    y[[3, 998]] = np.inf
    whole, chunked = tensor_metrics(x, y, chunk=1 << 20), tensor_metrics(x, y, chunk=7)
    for a, b in zip(whole.cells(), chunked.cells()):
        assert a == pytest.approx(b, rel=1e-12, abs=1e-12)
    y[999] = np.nan           # NaN only on one side, in the last chunk: every metric N/A
    assert tensor_metrics(x, y, chunk=7).cells() == [N_A] * 6


def test_root_cause_on_the_fp16_overflow_run():
    truth = json.loads((sample() / "truth.json").read_text())["overflow"]
    target = _rank(truth["run"])
    results = list(compare_pairs(pair_dumps(target, _rank("golden_fp32")), "tensor"))
    suspects = find_framework_suspects(FrameworkRun(target), results, 0.98)
    assert [s.op for s in suspects if s.first] == [truth["producer"]]
    assert [s.op for s in suspects if s.role == "root"] == truth["producers"]
    forward = [name for name in truth["propagated"] if ".forward" in name]
    assert [s.op for s in suspects if s.role == "propagated"] == forward
    assert suspects[0].cosine == N_A        # inf in the fp16 output only: msprobe's N/A
