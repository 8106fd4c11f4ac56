"""``vcs`` of a statistics compare on columns (model/runs/stats_run, analysis/root_cause/run_columns):
the columnar run model has the FrameworkRun's tensors, io and inferred edges, and the suspects
judged over index arrays are the object path's, JSON row for JSON row (unjudged outputs and
printed names too) -- on the committed mix-level sample, on scaled copies with odd statistics
(NaN, None, int and bool leaves, unpaired rows), on a branching chain whose downstream lists
are capped, and through the shell; dumps the columns cannot stand for (a capture sidecar, md5
leaves) take the FrameworkRun path."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from conftest import json_docs, run_cli
from framework_dumps import sample
from tests.framework.test_framework_column_stats import _chain_dump, _columns, _rank, _scaled_pair
from precision_shell.analysis.compare.msprobe.column_pairing import pair_columns
from precision_shell.analysis.root_cause.run import DOWNSTREAM_LISTED, find_framework_suspects
from precision_shell.analysis.root_cause.run_columns import find_suspects_on_columns
from precision_shell.model.framework_run import FrameworkRun
from precision_shell.model.runs.stats_run import IO_NAMES, StatsRun


def _sample_pair():
    return _rank(sample() / "stats_target_bf16" / "step0"), _rank(sample() / "stats_golden_fp32" / "step0")


def _both_paths(target, golden, backward, tolerance=0.1):
    columns = pair_columns(_columns(target), _columns(golden))
    run = StatsRun.of(target, columns.target)
    assert run is not None
    model = FrameworkRun(target)
    on_objects, on_arrays = [], []
    expected = find_framework_suspects(model, (), 0.9, backward, mode="statistics", tolerance=tolerance,
                                       unjudged=on_objects, columns=columns)
    found = find_suspects_on_columns(run, columns, backward, tolerance=tolerance, unjudged=on_arrays)
    return run, model, expected, found, on_objects, on_arrays


def _branching_dump(path, entries: int, off=(), scale: float = 1.0):
    """Statistics entries each reading the outputs of the two before it (two consumers per
    output, so downstream lists merge), every fifth output a bare leaf (path ``output``, not a
    list: the run's io is ``grad`` then), a module entry repeating each tenth API output; the
    outputs of the entries in ``off`` have their statistics times ``scale``."""
    rank = path / "step0" / "rank0"
    rank.mkdir(parents=True)
    rng = random.Random(5)

    def leaf(times=1.0):
        hi = (rng.random() + 0.1) * times
        return {"type": "torch.Tensor", "dtype": "torch.float16", "shape": [2, 3], "Max": hi, "Min": -hi / 3,
                "Mean": hi / 7, "Norm": hi * 2, "requires_grad": True}
    data, outs = {}, [leaf(), leaf()]
    for i in range(entries):
        out = leaf(scale if i in off else 1.0)
        data[f"Torch.mul.{i}.forward"] = {"input_args": [outs[-1], outs[-2]], "input_kwargs": {},
                                          "output": out if i % 5 == 4 else [out]}
        if i % 10 == 9:
            data[f"Module.block{i}.Block.forward.0"] = {"input_args": [outs[-1]], "input_kwargs": {}, "output": [out]}
        outs.append(out)
    (rank / "dump.json").write_text(json.dumps({"task": "statistics", "level": "mix", "framework": "pytorch",
                                                "data": data}, indent=1))
    return path


def _targets(tmp_path):
    yield "sample", _sample_pair()
    yield "scaled", _scaled_pair(tmp_path / "scaled", copies=4)
    yield "branching", (_rank(_branching_dump(tmp_path / "bt", 70)),
                        _rank(_branching_dump(tmp_path / "bg", 70, off={3, 17, 40, 41}, scale=1.5)))


def test_stats_run_has_the_framework_runs_tensors_and_inferred_edges(tmp_path):
    for what, (target, _) in _targets(tmp_path):
        columns = _columns(target)
        run, model = StatsRun.of(target, columns), FrameworkRun(target)
        rows = np.flatnonzero(run.io >= 0).tolist()
        names = run.tensor_names(rows)
        assert sorted(names) == sorted(t.name for t in model.tensors), what
        for name, row in zip(names, rows):
            t = model.tensor(name)
            assert IO_NAMES[run.io[row]] == t.io and columns.names[row] == t.compare_name, (what, name)
            assert run.printed(name) == t.printed(), (what, name)
        linked = np.flatnonzero(run.producer >= 0).tolist()
        edges = set(zip(run.tensor_names(run.producer[linked].tolist()), run.tensor_names(linked)))
        assert edges == {(e.src, e.dst) for e in model.edges}, what
        assert edges, what
        for entry, op in enumerate(model.ops):
            assert run.module_path(entry) == model.module_path(op.name), (what, op.name)


@pytest.mark.parametrize("backward", [False, True])
@pytest.mark.parametrize("tolerance", [0.1, 0.01])
def test_suspects_on_arrays_are_the_object_paths(tmp_path, backward, tolerance):
    for what, (target, golden) in _targets(tmp_path):
        run, model, expected, found, on_objects, on_arrays = _both_paths(target, golden, backward, tolerance)
        assert [s.to_json() for s in found] == [s.to_json() for s in expected], what
        assert [s.to_flat_json() for s in found] == [s.to_flat_json() for s in expected], what
        assert on_arrays == on_objects, what
        assert [run.printed(n) for n in on_arrays] == [model.tensor(n).printed() for n in on_objects]
        assert expected and any(s.role == "root" for s in expected), what
        if what == "scaled":     # NaN/None statistics: outputs judged through their producers
            assert on_objects


def test_downstream_lists_merge_branches_and_stop_at_the_cap(tmp_path):
    target = _rank(_branching_dump(tmp_path / "t", 60))
    golden = _rank(_branching_dump(tmp_path / "g", 60, off=range(60), scale=3.0))     # every output off
    run, model, expected, found, _, _ = _both_paths(target, golden, False)
    failing = {s.op for s in found}
    assert len(found) == len(model.ops)
    for s in found:
        every = [name for name in model.downstream(s.op) if name in failing]
        assert s.downstream == every[:DOWNSTREAM_LISTED]
    assert max(len(s.downstream) for s in found) == DOWNSTREAM_LISTED and found[-1].downstream == []
    assert [s.role for s in found][:1] == ["root"] and found[0].first


def test_columns_do_not_stand_for_a_sidecar_or_md5_dump(tmp_path):
    target = _rank(_chain_dump(tmp_path / "t", 5, 1.0))
    assert StatsRun.of(target, _columns(target)) is not None
    (tmp_path / "t" / "step0" / "rank0" / "pshell_meta.json").write_text(json.dumps({"pshell_meta": 1, "edges": {}}))
    assert StatsRun.of(_rank(tmp_path / "t"), _columns(target)) is None
    target.task = "md5"
    assert StatsRun.of(target, _columns(target)) is None


def test_vcs_in_the_shell_lists_what_the_object_path_lists(tmp_path, capsys, monkeypatch):
    target, golden = _scaled_pair(tmp_path, copies=3)
    args = [target.location.path.rsplit("/", 1)[0], "--golden", golden.location.path.rsplit("/", 1)[0]]

    def vcs(out, *command):
        rc, text, _ = run_cli(capsys, *args, "-o", tmp_path / out, "-c", "vcs --backward -l 0", *command)
        rc_json, doc, _ = run_cli(capsys, *args, "-o", tmp_path / out, "--format", "json", "-c", "vcs --backward")
        return rc, text.replace(out, "OUT"), rc_json, json_docs(doc)

    on_arrays = vcs("arrays")
    built = []
    real_of = StatsRun.of.__func__

    def of(cls, rank, columns):
        built.append(rank)
        return real_of(cls, rank, columns)
    monkeypatch.setattr(StatsRun, "of", classmethod(of))
    again = vcs("arrays2")
    assert built and again[1].replace("arrays2", "OUT") == on_arrays[1].replace("arrays", "OUT")
    monkeypatch.setattr(StatsRun, "of", classmethod(lambda cls, rank, columns: None))     # the FrameworkRun
    on_objects = vcs("objects")
    assert on_arrays[0] == on_objects[0] and on_arrays[2] == on_objects[2]
    assert on_arrays[1].replace("arrays", "OUT") == on_objects[1].replace("objects", "OUT")
    assert on_arrays[3] == on_objects[3] and len(on_arrays[3][0]) > 20
    assert "root" in on_arrays[1] and "first divergence" in on_arrays[1]


def test_a_long_json_list_is_encoded_in_chunks_as_one_document(monkeypatch):
    import math

    from precision_shell import jsonable as module

    rows = [{"order": i, "stat_error": [1.5 * i, math.nan, -math.inf], "op": "e\x85" if i % 7 else "e",
             "nested": {3: math.inf, "none": None}} for i in range(300)]
    monkeypatch.setattr(module, "_CHUNK", 64)
    chunked = module.to_json_text(rows)
    assert json.loads(chunked) == json.loads(json.dumps(module.jsonable(rows)))
    monkeypatch.setattr(module, "_CHUNK", 10_000)
    assert chunked == module.to_json_text(rows)
    assert json.loads(chunked)[299] == {"order": 299, "stat_error": [448.5, None, "-inf"], "op": "e\x85",
                                        "nested": {"3": "inf", "none": None}}
    assert "\\u0085" in chunked
