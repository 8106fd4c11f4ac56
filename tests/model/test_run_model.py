"""The run model (model/runs): the GE and msprobe adapters answer the same interface, on the
committed graph-mode sample (sample_data/convnet) and the real msprobe sample
(sample_data/framework); expected values come from the files themselves."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from precision_shell.formats.golden_npy import load_npy
from precision_shell.model.framework_session import FrameworkSession
from precision_shell.model.runs import Edge, Op, Pairing, Run, Stats, Tensor
from precision_shell.model.session import Session

ROOT = Path(__file__).resolve().parents[2] / "sample_data"
FRAMEWORK = ROOT / "framework"


@pytest.fixture(scope="module")
def ge_session():
    return Session.open(ROOT / "convnet")


@pytest.fixture(scope="module")
def fw_session():
    return FrameworkSession.open(FRAMEWORK / "target_bf16", golden=FRAMEWORK / "golden_fp32")


def test_both_adapters_are_runs(ge_session, fw_session):
    for run in (ge_session.run, fw_session.run):
        assert isinstance(run, Run)
        assert run.ops and all(isinstance(o, Op) for o in run.ops)
        assert [o.order for o in run.ops] == list(range(len(run.ops)))
        tensors = [t for o in run.ops for t in o.tensors]
        assert tensors and all(isinstance(t, Tensor) for t in tensors)
        for t in tensors[:50]:
            assert run.tensor(t.name) is t or run.tensor(t.name) == t
    assert ge_session.run.kind == "ge" and fw_session.run.kind == "msprobe"


def test_ge_ops_and_edges_are_the_graphs(ge_session):
    run, graph = ge_session.run, ge_session.graph
    assert [o.name for o in run.ops] == [n.key for n in graph.in_exec_order()]
    for node in graph.in_exec_order():
        expected = [(r.producer, r.producer_output, r.index) for r in node.inputs if r.producer is not None]
        got = [(e.src_op, int(e.src.rsplit(":", 1)[1]), int(e.dst.rsplit(":", 1)[1]))
               for e in run.producers(node.key)]
        assert got == expected
        assert all(e.exact for e in run.producers(node.key))
        assert run.op(node.key).type == node.type


def test_ge_load_and_pairing_read_the_files(ge_session):
    from precision_shell.formats.dump_file import read_logical_array

    run, pairing = ge_session.run, ge_session.pairing()
    assert isinstance(pairing, Pairing)
    checked = 0
    for op in run.ops:
        f = ge_session.dumps.latest_for_op(op.name)
        if f is None:
            assert all(not t.has_data for t in op.tensors)
            continue
        header = ge_session.dumps.header(f)
        for t in op.outputs:
            want = read_logical_array(header, header.outputs[int(t.index)])
            np.testing.assert_array_equal(run.load(t.name), want)
            golden = pairing.golden_for(t)
            if golden is not None:
                found = ge_session.golden.find(op.name, int(t.index))
                if found is not None:
                    assert golden.path == str(found.path)
                assert load_npy(Path(golden.path)).size == want.size
                checked += 1
    assert checked > 0


def test_framework_tensors_carry_dump_json(fw_session):
    run = fw_session.run
    doc = json.loads((FRAMEWORK / "target_bf16/step0/rank0/dump.json").read_text())["data"]
    assert [o.name for o in run.ops] == list(doc)
    op = next(o for o in run.ops if o.name.startswith("Functional.softmax"))
    leaf = doc[op.name]["input_args"][0]
    t = op.inputs[0]
    assert t.stats == Stats(leaf["Max"], leaf["Min"], leaf["Mean"], leaf["Norm"])
    assert t.shape == tuple(leaf["shape"]) and t.has_data and t.index == "0"
    assert op.type == "Functional.softmax" and op.kernel_key == "Functional.softmax"
    assert run.load(t.name).shape == tuple(leaf["shape"])
    assert "modules" in run.extras


def test_framework_edges_feed_the_same_values(fw_session):
    """Inferred edges link an input to an output with the same statistics: their files agree."""
    run = fw_session.run
    edges = [e for o in run.ops for e in run.producers(o.name)]
    assert edges and all(isinstance(e, Edge) and not e.exact for e in edges)
    for e in edges[:20]:
        np.testing.assert_array_equal(run.load(e.src), run.load(e.dst))
    first = edges[0]
    assert first.dst_op in run.downstream(first.src_op)


def test_stats_overflow_reads_max_and_min_only():
    assert Stats(8200.0, 8180.0, 8190.0, float("inf")).overflows() is False
    assert Stats(float("inf"), 1.0, None, None).overflows() is True
    assert Stats(None, None, 1.0, 2.0).overflows() is None


def test_the_overflow_analysis_runs_on_either_adapter(ge_session):
    """analysis/overflow/run_scan is written against the Run interface: on the GE adapter it
    names the sample's designed overflow producer and its downstream (the generator's manifest),
    judging each tensor from the dump files' values."""
    from precision_shell.analysis.overflow.run_scan import scan_framework_overflow

    manifest = json.loads((ROOT / "convnet" / "pshell_sample_manifest.json").read_text())["overflow"]
    scan = scan_framework_overflow(ge_session.run)
    assert [(f.op, f.role) for f in scan.findings] == \
        [(manifest["op"], "producer")] + [(op, "propagated") for op in manifest["downstream_non_finite"]]
    (bad,) = [c for c in scan.findings[0].outputs if c.bad]
    assert (bad.pos_inf, bad.neg_inf, bad.nan) == (manifest["pos_inf"], manifest["neg_inf"], manifest["nan"])
    assert bad.source == "values" and scan.problems == []


def test_msprobe_pairing_follows_msprobes_joined_rows(fw_session):
    from precision_shell.analysis.compare.msprobe.pairing import pair_dumps
    from precision_shell.model.runs.msprobe import MsprobePairing

    target, golden = fw_session.run, fw_session.golden_run()
    pairing = MsprobePairing.of(target, golden, pair_dumps(fw_session.selected, fw_session.require_golden()))
    assert isinstance(pairing, Pairing)
    checked = 0
    for op in target.ops:
        for t in op.tensors:
            g = pairing.golden_for(t)
            if g is None or not (t.has_data and g.has_data):
                continue
            # the sample's two runs share names: a tensor's golden is the same leaf of the golden dump
            assert (g.op, g.io, g.index) == (t.op, t.io, t.index) and g.shape == t.shape
            checked += 1
    assert checked == sum(1 for o in target.ops for t in o.tensors if t.has_data)
