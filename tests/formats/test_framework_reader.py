"""Opening a framework pair fast: the golden read in a forked child (its summary at start-up, its
entries when first used) and entries whose leaves are built on first use, with their problems
reported when the file is read."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from framework_dumps import sample, write_dump
from precision_shell.formats.msprobe.dump import read_msprobe_dump
from precision_shell.model.framework_reader import start_reading
from precision_shell.model.framework_session import FrameworkSession

TRUTH = json.loads((Path(__file__).parents[2] / "sample_data" / "framework" / "truth.json").read_text())


def _leaf_view(rank) -> list:
    return [(e.name, e.kind, e.op, e.counter, [(x.path, x.dtype, x.shape, x.max, x.norm, x.file, x.requires_grad)
                                             for x in e.leaves]) for e in rank.entries]


def test_golden_is_summarised_by_a_child_and_read_in_full_on_first_use(tmp_path):
    golden = sample() / "golden_fp32" / "step0"
    session = FrameworkSession.open(sample() / "target_bf16" / "step0", golden=golden, output=tmp_path / "out")
    rank = session.golden_rank
    direct = read_msprobe_dump(golden).ranks[0]
    # start-up has the golden's header and entry count, not its entries
    assert rank.deferred == TRUTH["runs"]["golden_fp32"]["entries"] == rank.entry_count
    assert rank.entries == [] and (rank.task, rank.framework, rank.location) == (direct.task, direct.framework,
                                                                                direct.location)
    full = session.require_golden()
    assert full.deferred is None and session.golden_rank is full
    assert _leaf_view(full) == _leaf_view(direct)


def test_a_golden_that_is_no_dump_is_one_load_error_from_the_child(tmp_path):
    (tmp_path / "empty").mkdir()
    session = FrameworkSession.open(sample() / "target_bf16" / "step0", golden=tmp_path / "empty",
                                    output=tmp_path / "out")
    assert session.golden_dump is None
    assert session.load_errors == [f"golden: {tmp_path / 'empty'}: no msprobe dump here "
                                   f"(no dump.json, step*/ or rank*/proc*/ folder)"]


def test_golden_warnings_come_back_from_the_child(tmp_path):
    golden = tmp_path / "golden" / "step0" / "rank0"
    write_dump(golden, {"Functional.relu.0.forward": {"input_args": [np.ones(3, np.float32)],
                                                     "output": [np.ones(3, np.float32)]}})
    (golden / "dump_tensor_data" / "Functional.relu.0.forward.output.0.npy").unlink()
    expected = read_msprobe_dump(tmp_path / "golden").warnings
    pending = start_reading(tmp_path / "golden")
    assert pending.pid is not None          # fork is available on the test machines
    dump = pending.result()
    assert dump.warnings == expected and len(expected) == 1 and "but absent" in expected[0]
    assert [r.deferred for r in dump.ranks] == [1]


def test_leaf_problems_are_reported_when_read_and_leaves_built_when_used(tmp_path):
    rank_dir = tmp_path / "d" / "step0" / "rank0"
    shutil.copytree(sample() / "target_bf16" / "step0" / "rank0", rank_dir)
    doc = json.loads((rank_dir / "dump.json").read_text())
    name, body = next(iter(doc["data"].items()))
    body["input_args"][0]["shape"] = [2, -1]
    body["input_args"][0]["dtype"] = "torch.float77"
    (rank_dir / "dump.json").write_text(json.dumps(doc))
    rank = read_msprobe_dump(tmp_path / "d").ranks[0]
    entry = rank.entries[0]
    assert entry._leaves is None              # not built by reading
    assert [w.split(": ", 1)[1] for w in rank.warnings] == [
        f"{name} input.0: bad shape [2, -1]", f"{name} input.0: unknown dtype 'torch.float77'"]
    # the counts start-up shows, without building: every data_name in the file
    assert sum(e.file_count for e in rank.entries) == _data_names(doc["data"]) == \
        TRUTH["runs"]["target_bf16"]["tensor_files"]
    first = entry.leaves[0]
    assert (first.shape, first.dtype, first.dtype_raw) == ((), None, "torch.float77")
    assert sum(e.file_count for e in rank.entries) == sum(1 for e in rank.entries for x in e.leaves if x.file)


def _data_names(node) -> int:
    if isinstance(node, dict):
        return ("data_name" in node) + sum(_data_names(v) for v in node.values())
    return sum(_data_names(v) for v in node) if isinstance(node, list) else 0


def test_the_child_sends_the_golden_statistics_columns_and_ends_without_being_asked(tmp_path):
    import os
    import time

    from precision_shell.formats.msprobe.columns import stats_columns

    golden = sample() / "stats_golden_fp32" / "step0"
    pending = start_reading(golden)
    dump = pending.result()
    assert pending.memfd is not None        # Linux: the columns wait in an in-memory file
    for _ in range(200):                    # the child writes them there and exits on its own
        pid, _status = os.waitpid(pending.pid, os.WNOHANG)
        if pid:
            pending.pid = None
            break
        time.sleep(0.05)
    assert pending.pid is None
    got = pending.columns(0)
    want = stats_columns(read_msprobe_dump(golden).ranks[0].entries)
    assert dump.ranks[0].task == "statistics" and len(got) == len(want) > 200
    assert got.names == want.names and got.cells == want.cells and got.texts == want.texts
    assert np.array_equal(got.stats, want.stats, equal_nan=True) and (got.grad == want.grad).all()
    assert pending.columns(1) is None and pending.memfd is None


def test_a_tensor_golden_sends_no_columns_and_vc_makes_them_here(tmp_path):
    session = FrameworkSession.open(sample() / "stats_target_bf16" / "step0",
                                    golden=sample() / "golden_fp32" / "step0", output=tmp_path / "out")
    assert session._golden_read.columns(0) is None          # a tensor-task golden: none made
    columns = session.golden_columns()
    assert len(columns) == len(stats_columns_of(session.require_golden()))


def stats_columns_of(rank):
    from precision_shell.formats.msprobe.columns import stats_columns

    return stats_columns(rank.entries)
