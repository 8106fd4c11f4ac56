"""Statistics-mode compare written column-wise in chunks (analysis/compare/msprobe/stats_table) gives the
same CSV, byte for byte, as the row-at-a-time path (compare_pairs + iter_table_rows), and msprobe's
own CSV: on the committed sample, on a scaled copy of it with every odd cell msprobe's rules know
(NaN, Inf, None, 0.0 vs -0.0, a zero golden, equal values, integer/bool tensors, plain values,
unpaired rows, formula-like names), at chunk sizes that cut everywhere."""

from __future__ import annotations

import copy
import csv
import json
import random

import pytest

from framework_dumps import sample
from precision_shell.analysis.compare.msprobe.engine import compare_pairs
from precision_shell.analysis.compare.msprobe.csv_layout import iter_table_rows, write_compare_csv
from precision_shell.analysis.compare.msprobe.pairing import pair_dumps
from precision_shell.analysis.compare.msprobe.stats_table import StatisticsRows, rows_by_name, write_statistics_csv
from precision_shell.formats.msprobe.dump import read_msprobe_dump


def _rank(path):
    return read_msprobe_dump(path).ranks[0]


def _both_csvs(target_dir, golden_dir, tmp_path, chunk, dtype_is_error):
    target, golden = _rank(target_dir), _rank(golden_dir)
    pairing = pair_dumps(target, golden)
    old, new = tmp_path / "rows.csv", tmp_path / f"columns_{chunk}.csv"
    write_compare_csv(old, iter_table_rows(compare_pairs(pairing, "statistics"), "statistics", target.stack,
                                           dtype_is_error), "statistics")
    advanced = []
    write_statistics_csv(new, pairing, target.stack, dtype_is_error, advance=advanced.append, chunk=chunk)
    assert sum(advanced) == len(pairing.pairs)
    return old.read_bytes(), new.read_bytes(), pairing


@pytest.mark.parametrize("chunk", [1, 7, 8192])
@pytest.mark.parametrize("dtype_is_error", [False, True])
def test_sample_csv_is_byte_identical_to_the_row_path(tmp_path, chunk, dtype_is_error):
    root = sample()
    old, new, pairing = _both_csvs(root / "stats_target_bf16" / "step0", root / "stats_golden_fp32" / "step0",
                                   tmp_path, chunk, dtype_is_error)
    assert new == old
    assert new.count(b"\n") == len(pairing.pairs) + 1 > 200


def test_sample_csv_equals_msprobes_csv_cell_for_cell(tmp_path):
    root = sample()
    target, golden = _rank(root / "stats_target_bf16" / "step0"), _rank(root / "stats_golden_fp32" / "step0")
    out = tmp_path / "ours.csv"
    write_statistics_csv(out, pair_dumps(target, golden), target.stack, dtype_is_error=True)
    with open(out, newline="") as f:
        ours = list(csv.reader(f))
    with open(root / "compare" / "statistics" / "compare_result_proc0.csv", newline="") as f:
        theirs = list(csv.reader(f))
    assert ours == theirs


_ODD_STATS = [float("nan"), float("inf"), float("-inf"), None, 0.0, -0.0, 1e308, -1e308, 5e-324]


def _scaled(doc: dict, copies: int, rng: random.Random, side: int) -> dict:
    """``copies`` renumbered copies of every entry; some statistics replaced by odd values, some
    values nudged (the golden side differently), a few leaves made int/bool or plain values."""
    data = {}
    for k in range(copies):
        for name, body in doc["data"].items():
            parts = name.split(".")
            at = next(i for i in range(len(parts) - 1, -1, -1) if parts[i].isdigit())
            parts[at] = str(int(parts[at]) + 1000 * k)
            body = copy.deepcopy(body)
            for node in _tensor_nodes(body):
                for key in ("Max", "Min", "Mean", "Norm"):
                    roll = rng.random()
                    if roll < 0.04:
                        node[key] = rng.choice(_ODD_STATS)
                    elif roll < 0.5 and isinstance(node.get(key), float) and side:
                        node[key] = node[key] * (1 + rng.choice([0, 1e-3, -0.2, 3.0]))
                if rng.random() < 0.02:
                    node["dtype"] = rng.choice(["torch.int32", "torch.bool", "torch.uint8"])
                if rng.random() < 0.01:
                    node["requires_grad"] = not node.get("requires_grad")
            data[".".join(parts)] = body
    # a target-only entry (unpaired rows) and a name a spreadsheet would run
    if not side:
        data["Functional.dropout.0.forward"] = copy.deepcopy(next(iter(doc["data"].values())))
    data["=HYPERLINK.0.forward"] = {"input_args": [{"type": "str", "value": "=cmd|' /c calc'!A0"},
                                                   {"type": "str", "value": 'a, "b"\r\nc' * (side + 1)}],
                                    "input_kwargs": {}, "output": [{"type": "float", "value": 1.5 + side}]}
    return {**doc, "data": data}


def _tensor_nodes(body):
    if isinstance(body, dict):
        if "Max" in body:
            yield body
        for value in body.values():
            yield from _tensor_nodes(value)
    elif isinstance(body, list):
        for value in body:
            yield from _tensor_nodes(value)


@pytest.mark.parametrize("chunk", [5, 1000])
def test_scaled_copy_with_odd_cells_is_byte_identical(tmp_path, chunk):
    root = sample()
    rng = random.Random(31)
    dirs = []
    for side, name in enumerate(("stats_target_bf16", "stats_golden_fp32")):
        doc = json.loads((root / name / "step0" / "proc0" / "dump.json").read_text())
        rank = tmp_path / name / "step0" / "rank0"
        rank.mkdir(parents=True)
        (rank / "dump.json").write_text(json.dumps(_scaled(doc, 12, rng, side), indent=1))
        dirs.append(rank.parent)
    old, new, pairing = _both_csvs(*dirs, tmp_path, chunk, dtype_is_error=False)
    assert new == old
    text = new.decode()
    # the odd cells are there (so the slow per-cell rules ran), and the formula was neutralised
    assert len(pairing.pairs) > 3000 and any(p.golden is None for p in pairing.pairs)
    for cell in (",Nan,", ", inf,", ", -inf,", ",None,", ",0,0,", "'=cmd", "'=HYPERLINK", '"a, ""b""\r\nc"'):
        assert cell in text, cell


def test_statistics_rows_equal_compare_pairs():
    root = sample()
    target, golden = _rank(root / "stats_target_bf16" / "step0"), _rank(root / "stats_golden_fp32" / "step0")
    pairing = pair_dumps(target, golden)
    want = list(compare_pairs(pairing, "statistics"))
    rows = StatisticsRows(pairing)
    assert len(rows) == len(want)

    def fields(r):
        return r.name, r.pair, r.summary, r.stats, r.metrics, r.md5_equal, r.errors
    assert [fields(r) for r in rows] == [fields(r) for r in want]
    assert fields(rows[5]) == fields(want[5]) and [fields(r) for r in rows[3:6]] == [fields(r) for r in want[3:6]]
    assert [fields(r) for r in rows.where(lambda p: p.golden is None)] == \
        [fields(r) for r in want if r.pair.golden is None]
    by_name, want_by_name = rows_by_name(rows), {r.name: r for r in want}
    assert not isinstance(by_name, dict) and len(want_by_name) > 200
    for name, r in want_by_name.items():
        assert fields(by_name.get(name)) == fields(r)
    assert by_name.get("Functional.nothing.0.forward.input.0") is None
