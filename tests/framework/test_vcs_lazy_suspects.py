"""``vcs`` of a statistics compare on columns without an object per suspect (issue 31): the
suspects are a lazy list (analysis/root_cause/suspect_list) whose JSON document is written from
the columns -- the same text, byte for byte, as the object path's rows encoded by
``jsonable.to_json_text`` -- and the shell's table, JSON document and ``next``/``goto`` panels
are the object path's (``judged_run`` made to return the FrameworkRun), on the committed
statistics sample, on a generated pair with chains of failing entries and on names with
non-ASCII and C1 characters."""

from __future__ import annotations

import json

import pytest

from conftest import run_cli
from framework_dumps import sample
from tests.framework.test_framework_column_stats import _columns, _rank, _scaled_pair
from tests.framework.test_vcs_columns import _both_paths, _branching_dump
from precision_shell.jsonable import to_json_text
from precision_shell.model.runs import msprobe as msprobe_runs
from precision_shell.model.runs.stats_run import StatsRun


def _odd_names_dump(path, entries: int, off=(), scale: float = 1.0):
    """Chained statistics entries under modules whose names hold non-ASCII and C1 characters
    (construct.json), the outputs of the entries in ``off`` times ``scale``."""
    rank = path / "step0" / "rank0"
    rank.mkdir(parents=True)
    data, construct, previous = {}, {}, None
    for i in range(entries):
        hi = 1.0 + (i % 7) / 10

        def leaf(times=1.0):
            return {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [3], "Max": hi * times,
                    "Min": -hi / 2 * times, "Mean": hi / 5 * times, "Norm": hi * 3 * times, "requires_grad": False}
        out = leaf(scale if i in off else 1.0)
        name = f"Tensor.__add__.{i}.forward"
        data[name] = {"input_args": [previous or leaf(), leaf()], "input_kwargs": {}, "output": [out]}
        construct[name] = f"Module.blocké\x85{i // 4}.Block.forward.0"
        previous = out
    for block in sorted(set(construct.values())):
        construct[block] = "Module.encöder.Encoder.forward.0"
    construct["Module.encöder.Encoder.forward.0"] = None
    (rank / "dump.json").write_text(json.dumps({"task": "statistics", "level": "mix", "framework": "pytorch",
                                                "data": data}, indent=1, ensure_ascii=False))
    (rank / "construct.json").write_text(json.dumps(construct, ensure_ascii=False))
    (rank / "stack.json").write_text("{}")
    return path


def _pairs(tmp_path):
    yield "sample", sample() / "stats_target_bf16", sample() / "stats_golden_fp32"
    yield "chains", _branching_dump(tmp_path / "bt", 90), \
        _branching_dump(tmp_path / "bg", 90, off={3, 17, 40, 41, 42, 60}, scale=1.5)
    yield "names", _odd_names_dump(tmp_path / "nt", 40), \
        _odd_names_dump(tmp_path / "ng", 40, off={5, 6, 7, 30}, scale=2.0)
    target, golden = _scaled_pair(tmp_path / "scaled", copies=3)
    yield "scaled", target.location.path.rsplit("/", 1)[0], golden.location.path.rsplit("/", 1)[0]


@pytest.mark.parametrize("backward", [False, True])
def test_the_json_document_from_columns_is_the_rows_encoded(tmp_path, backward):
    for what, target_dir, golden_dir in _pairs(tmp_path):
        target, golden = _rank(target_dir), _rank(golden_dir)
        run, model, expected, found, _, _ = _both_paths(target, golden, backward)
        text = found.json_text()
        assert not found._made, what          # no suspect object made for the document
        assert text == to_json_text([s.to_json() for s in expected]), what
        rows = json.loads(text)
        assert [r["op"] for r in rows] == [s.op for s in expected] and len(rows) == len(found), what
        assert [r["role"] for r in rows] == found.roles == [s.role for s in expected], what
        assert found.ops == [s.op for s in expected], what
        assert [s.to_json() for s in found] == [s.to_json() for s in expected], what
        assert found[-1] is found[len(found) - 1] and found[1:3] == expected[1:3], what
        if what == "names":
            assert "\\u0085" in text and "é" in text and any(r["modules"] for r in rows)
        if what in ("chains", "names"):
            assert sum(r["role"] == "root" for r in rows) >= 2 and any(r["first"] for r in rows)
            assert sum(r["role"] == "propagated" for r in rows) >= 2


def test_an_empty_list_is_an_empty_document(tmp_path):
    target = _rank(_branching_dump(tmp_path / "t", 20))
    golden = _rank(_branching_dump(tmp_path / "g", 20))
    _, _, expected, found, _, _ = _both_paths(target, golden, False)
    assert expected == [] and len(found) == 0 and found.json_text() == "[]" == to_json_text([])


def test_the_shell_prints_what_the_object_path_prints(tmp_path, capsys, monkeypatch):
    made = []
    for what, target_dir, golden_dir in _pairs(tmp_path):
        args = [target_dir, "--golden", golden_dir]

        def shell(out, *commands, fmt="table"):
            rc, text, err = run_cli(capsys, *args, "-o", tmp_path / f"{what}-{out}", "--format", fmt,
                                    *[a for c in commands for a in ("-c", c)])
            assert rc == 0, (what, err)
            return text.replace(f"{what}-{out}", "OUT")

        def both(out):
            return (shell(out, "vcs -l 5"), shell(out, "vcs -l 0 --backward"), shell(out, "vcs", fmt="json"),
                    shell(out, "vcs --backward -l 3", fmt="json"), shell(out, "vcs -l 3", "next", "next", "goto 2"),
                    shell(out, "vcs --role root", "next"), shell(out, "vcs --sort -stat_error -l 4"))

        on_columns = both("columns")
        monkeypatch.setattr(msprobe_runs.StatsRun, "of", classmethod(lambda cls, rank, columns: None))
        on_objects = both("objects")
        monkeypatch.undo()
        for a, b in zip(on_columns, on_objects):
            assert a == b, what
        table, _, document, _, panels, _, _ = on_columns
        assert "root" in table and json.loads(document), what
        assert panels.count("statistics") >= 3 and "golden max" in panels, what
        made.append(what)
    assert made == ["sample", "chains", "names", "scaled"]


def test_the_columns_stand_for_each_generated_pair(tmp_path):
    for what, target_dir, _ in _pairs(tmp_path):
        target = _rank(target_dir)
        assert StatsRun.of(target, _columns(target)) is not None, what
