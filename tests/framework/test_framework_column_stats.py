"""Statistics-mode compare on columns (formats/msprobe_columns, analysis/compare/msprobe/column_pairing,
column_table): the reader's columns say per row what the Leaf/Row objects say, the column pairing
pairs as pair_dumps does (exact and data_mapping, backward renumbering, dtype refusals, entry
problems, coverage), and the CSV is byte-identical to the row-object path -- on the committed
sample, on a scaled copy with every odd cell, and after the columns crossed a process boundary
as bytes (encode/decode)."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from framework_dumps import sample
from tests.framework.test_framework_stats_table import _scaled
from precision_shell.analysis.compare.msprobe.column_pairing import pair_columns
from precision_shell.analysis.compare.msprobe.column_table import write_column_csv
from precision_shell.analysis.compare.msprobe.coverage import framework_coverage
from precision_shell.analysis.compare.msprobe.csv_layout import _shape_cell
from precision_shell.analysis.compare.msprobe.engine import stat_cells
from precision_shell.analysis.compare.msprobe.pairing import pair_dumps, rows_of
from precision_shell.analysis.compare.msprobe.stats_table import StatisticsRows, write_statistics_csv
from precision_shell.formats.msprobe.columns import GRAD_TEXTS, decode, encode, stats_columns
from precision_shell.formats.msprobe.dump import read_msprobe_dump


def _rank(path):
    return read_msprobe_dump(path).ranks[0]


def _columns(rank, through_bytes=True):
    columns = stats_columns(rank.entries)
    return decode(b"".join(encode(columns))) if through_bytes else columns


def _scaled_pair(tmp_path, copies=12, seed=31):
    root = sample()
    rng = random.Random(seed)
    dirs = []
    for side, name in enumerate(("stats_target_bf16", "stats_golden_fp32")):
        doc = json.loads((root / name / "step0" / "proc0" / "dump.json").read_text())
        scaled = _scaled(doc, copies, rng, side)
        if side == 0:     # a backward entry renumbered, a bf16 leaf against an int golden
            scaled["data"]["Tensor.mul.7.backward"] = {"input": [None], "output": [
                {"type": "torch.Tensor", "dtype": "torch.bfloat16", "shape": [2], "Max": 1.0, "Min": 0.5,
                 "Mean": 0.75, "Norm": 1.25, "requires_grad": True}]}
        else:
            scaled["data"]["Tensor.mul.3.backward"] = {"input": [None], "output": [
                {"type": "torch.Tensor", "dtype": "torch.int64", "shape": [2], "Max": 1, "Min": 0,
                 "Mean": 0.5, "Norm": 1.0, "requires_grad": True}]}
        rank = tmp_path / name / "step0" / "rank0"
        rank.mkdir(parents=True)
        (rank / "dump.json").write_text(json.dumps(scaled, indent=1))
        dirs.append(rank.parent)
    return _rank(dirs[0]), _rank(dirs[1])


def test_columns_say_what_the_leaf_objects_say(tmp_path):
    target, _ = _scaled_pair(tmp_path, copies=3)
    columns, rows = _columns(target), rows_of(target)
    assert len(columns) == len(rows) > 300 and columns.cells      # odd rows took the Leaf branch
    for i, row in enumerate(rows):
        assert columns.names[i] == row.name
        assert columns.entry_names[columns.row_entry[i]] == row.entry.name
        assert columns.texts[columns.dtype_text[i]] == row.dtype
        assert columns.texts[columns.shape[i]] == _shape_cell(row)
        rg = row.leaf.requires_grad
        assert GRAD_TEXTS[columns.grad[i]] == ("N/A" if rg is None else str(rg))
        want = tuple(c[0] for c in stat_cells(row.leaf))
        got = columns.cells.get(i) or tuple(repr(v) for v in columns.stats[i].tolist())
        assert got == want


@pytest.mark.parametrize("chunk", [1, 7, 8192])
def test_sample_csv_is_byte_identical(tmp_path, chunk):
    root = sample()
    target, golden = _rank(root / "stats_target_bf16" / "step0"), _rank(root / "stats_golden_fp32" / "step0")
    old, new = tmp_path / "rows.csv", tmp_path / "columns.csv"
    write_statistics_csv(old, pair_dumps(target, golden), target.stack, True)
    advanced = []
    write_column_csv(new, pair_columns(_columns(target), _columns(golden)), target.stack, True,
                     advance=advanced.append, chunk=chunk)
    assert new.read_bytes() == old.read_bytes()
    assert sum(advanced) == old.read_bytes().count(b"\n") - 1 > 200


@pytest.mark.parametrize("chunk", [5, 1000])
@pytest.mark.parametrize("mapped", [False, True])
def test_scaled_copy_pairs_and_writes_as_the_row_path(tmp_path, chunk, mapped):
    target, golden = _scaled_pair(tmp_path)
    mapping = None
    if mapped:      # a few target rows renamed onto other golden rows; the rest as dumped
        names = [r.name for r in rows_of(target)]
        g_names = [r.name for r in rows_of(golden)]
        mapping = {names[i]: g_names[(i * 7) % len(g_names)] for i in range(0, len(names), 13)}
    pairing = pair_dumps(target, golden, mapping=mapping)
    columns = pair_columns(_columns(target), _columns(golden), mapping)
    # the pairing: golden rows, reasons, counts, entry problems
    want = [-1 if p.golden is None else p.golden.order for p in pairing.pairs]
    assert columns.golden_row.tolist() == want
    assert [columns.reason(i) for i in range(len(want)) if want[i] < 0] == \
        [p.reason for p in pairing.pairs if p.golden is None]
    assert any(r.startswith("dtype ") for r in columns.reasons.values()) != mapped
    assert columns.paired == sum(p.golden is not None for p in pairing.pairs)
    assert columns.golden_only == len(pairing.golden_only)
    assert columns.entry_count == len(pairing.entries)
    assert columns.entry_problems == [f"{e.entry}: {'; '.join(e.problems)}" for e in pairing.entries if e.problems]
    want_cov = framework_coverage(StatisticsRows(pairing), "statistics")
    got_cov = columns.coverage()
    assert (got_cov.total, got_cov.compared, got_cov.skipped.counts, got_cov.skipped.examples) == \
        (want_cov.total, want_cov.compared, want_cov.skipped.counts, want_cov.skipped.examples)
    # the CSV
    old, new = tmp_path / "rows.csv", tmp_path / "columns.csv"
    write_statistics_csv(old, pairing, target.stack, False)
    write_column_csv(new, columns, target.stack, False, chunk=chunk)
    assert new.read_bytes() == old.read_bytes()
    text = new.read_bytes().decode()
    for cell in (",Nan,", ", inf,", ",None,", "'=HYPERLINK", '"a, ""b""\r\nc"'):
        assert cell in text, cell


def test_columns_survive_bytes_with_odd_names():
    from precision_shell.formats.msprobe.columns import StatsColumns

    names = ["a\x00b", "\udc80x", "é.input.0"]
    columns = StatsColumns(["e\x00", "f"], names, np.array([0, 0, 1], np.int32), np.ones(3, np.int8),
                           np.zeros(3, np.int32), np.zeros(3, np.int32), np.zeros(3, np.int32),
                           np.array([0, 1, 2], np.int8), np.array([True, False, True]),
                           np.arange(12, dtype=float).reshape(3, 4), [""], {1: ("Nan", "None", "1", "x")})
    back = decode(b"".join(encode(columns)))
    assert back.names == names and back.entry_names == ["e\x00", "f"]
    assert back.cells == {1: ("Nan", "None", "1", "x")} and back.stats.tolist() == columns.stats.tolist()
    assert back.simple.tolist() == [True, False, True] and back.grad.tolist() == [0, 1, 2]
    with pytest.raises(ValueError):
        decode(b"".join(encode(columns))[:-3])


def _chain_dump(path, entries: int, scale: float):
    """A statistics dump of ``entries`` chained API entries (each output the next one's input)."""
    rank = path / "step0" / "rank0"
    rank.mkdir(parents=True)
    rng = random.Random(7)

    def leaf():
        hi = rng.random() * scale
        return {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [4], "Max": hi, "Min": -hi / 2,
                "Mean": hi / 5, "Norm": hi * 3, "requires_grad": False}
    data, previous = {}, leaf()
    for i in range(entries):
        out = leaf()
        data[f"Tensor.__add__.{i}.forward"] = {"input_args": [previous, leaf()], "input_kwargs": {}, "output": [out]}
        previous = out
    (rank / "dump.json").write_text(json.dumps({"task": "statistics", "level": "L1", "framework": "pytorch",
                                                "data": data}, indent=1))
    return path


def test_vcs_on_columns_judges_as_on_rows_and_lists_downstream_capped(tmp_path):
    from precision_shell.analysis.root_cause.run import DOWNSTREAM_LISTED, find_framework_suspects
    from precision_shell.model.framework_run import FrameworkRun

    target = _rank(_chain_dump(tmp_path / "t", 60, 1.0))
    golden = _rank(_chain_dump(tmp_path / "g", 60, 1.5))     # every statistic off by 50%: all fail
    run = FrameworkRun(target)
    on_rows = find_framework_suspects(run, StatisticsRows(pair_dumps(target, golden)), 0.9, mode="statistics")
    columns = pair_columns(_columns(target), _columns(golden))
    on_columns = find_framework_suspects(run, (), 0.9, mode="statistics", columns=columns)
    assert [s.to_json() for s in on_columns] == [s.to_json() for s in on_rows]
    assert len(on_rows) == 60 and all(s.statistic == "Max,Min,Norm" for s in on_rows)
    # every entry feeds the next: each lists the first failing entries after it, at most the cap
    failing = {s.op for s in on_rows}
    for s in on_rows:
        every = [name for name in run.downstream(s.op) if name in failing]
        assert s.downstream == every[:DOWNSTREAM_LISTED]
    assert len(on_rows[0].downstream) == DOWNSTREAM_LISTED and on_rows[-1].downstream == []


@pytest.mark.parametrize("tolerance", [0.1, 0.01])
def test_vcs_on_columns_judges_odd_statistics_as_on_rows(tmp_path, tolerance):
    from precision_shell.analysis.root_cause.run import find_framework_suspects
    from precision_shell.model.framework_run import FrameworkRun

    target, golden = _scaled_pair(tmp_path, copies=4)
    run = FrameworkRun(target)
    unjudged_rows, unjudged_columns = [], []
    on_rows = find_framework_suspects(run, StatisticsRows(pair_dumps(target, golden)), 0.9, True, mode="statistics",
                                      tolerance=tolerance, unjudged=unjudged_rows)
    on_columns = find_framework_suspects(run, (), 0.9, True, mode="statistics", tolerance=tolerance,
                                         unjudged=unjudged_columns,
                                         columns=pair_columns(_columns(target), _columns(golden)))
    assert [s.to_json() for s in on_columns] == [s.to_json() for s in on_rows]
    assert unjudged_columns == unjudged_rows and unjudged_rows     # NaN/None statistics: not comparable
    assert len(on_rows) > 20


def test_csv_halves_in_two_processes_equal_one_process_and_survive_a_dead_helper(tmp_path, monkeypatch):
    import os
    import signal

    from precision_shell.analysis.compare.msprobe import column_table

    target, golden = _scaled_pair(tmp_path, copies=3)
    columns = pair_columns(_columns(target), _columns(golden))
    one, two, dead = tmp_path / "one.csv", tmp_path / "two.csv", tmp_path / "dead.csv"
    write_column_csv(one, columns, target.stack, chunk=50, processes=1)
    started = []
    real_start = column_table._Helper.start.__func__

    def start(cls, *args):
        helper = real_start(cls, *args)
        started.append(helper)
        return helper
    monkeypatch.setattr(column_table._Helper, "start", classmethod(start))
    write_column_csv(two, columns, target.stack, chunk=50, processes=2)
    assert len(started) == 1 and started[0].pid is None and started[0].complete     # reaped
    assert two.read_bytes() == one.read_bytes()

    def killed(cls, *args):      # the helper dies before sending: this process writes its half
        helper = real_start(cls, *args)
        os.kill(helper.pid, signal.SIGKILL)
        started.append(helper)
        return helper
    monkeypatch.setattr(column_table._Helper, "start", classmethod(killed))
    write_column_csv(dead, columns, target.stack, chunk=50, processes=2)
    assert not started[-1].complete and started[-1].pid is None
    assert dead.read_bytes() == one.read_bytes()


def test_ctrl_c_while_writing_stops_the_helper_and_leaves_no_file(tmp_path, monkeypatch):
    from precision_shell.analysis.compare.msprobe import column_table

    target, golden = _scaled_pair(tmp_path, copies=3)
    columns = pair_columns(_columns(target), _columns(golden))
    started = []
    real_start = column_table._Helper.start.__func__
    monkeypatch.setattr(column_table._Helper, "start",
                        classmethod(lambda cls, *a: started.append(real_start(cls, *a)) or started[-1]))

    def interrupt(rows):
        raise KeyboardInterrupt
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(KeyboardInterrupt):
        write_column_csv(out / "c.csv", columns, target.stack, advance=interrupt, chunk=50)
    assert started and started[0].pid is None       # killed and reaped
    assert list(out.iterdir()) == []                # no CSV, no temporary file
