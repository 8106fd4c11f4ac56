"""Completion of values the session has: ``use --run/--device/--step``, ``ls -t`` op types, metric
names for ``plot`` and ``vcs --plot``; each list computed from the workspace itself."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document

from precision_shell.analysis.inspect.metric_series import PLOT_METRICS
from precision_shell.model.framework_session import FrameworkSession
from precision_shell.model.session import Session
from precision_shell.model.tensor_resolve import resolve_tensor
from precision_shell.samples.writer import SampleOptions, write_workspace
from precision_shell.shell.completer import ShellCompleter


def complete(session, text: str) -> list:
    completer = ShellCompleter(session)
    return list(completer.get_completions(Document(text), CompleteEvent(completion_requested=True)))


@pytest.fixture(scope="module")
def multi(tmp_path_factory):
    root = tmp_path_factory.mktemp("values_ws")
    write_workspace(root, SampleOptions(seed=0), multi=(3, 2))
    return Session.open(root)


def test_use_offers_the_workspaces_devices_steps_and_runs(multi):
    sets = multi.workspace.dump_sets
    for flag, field in (("--device", "device"), ("--step", "step"), ("--run", "run")):
        got = complete(multi, f"use {flag} ")
        counts = Counter(getattr(s, field) for s in sets)
        assert sorted(c.text for c in got) == sorted(counts) and len(counts) >= 1
        for c in got:
            n = counts[c.text]
            assert c.display_meta_text == f"{n} dump set{'s' * (n != 1)}"
    devices = sorted({s.device for s in sets})
    assert len(devices) == 3
    assert [c.text for c in complete(multi, f"use --device {devices[1]}")] == [devices[1]]


def test_ls_t_offers_the_graphs_op_types_with_counts(sample_ws):
    root, manifest = sample_ws
    session = Session.open(root)
    counts = Counter(op["type"] for op in manifest["ops"])
    got = {c.text: c.display_meta_text for c in complete(session, "ls -t ")}
    graph_counts = Counter(op.type for op in session.graph.ops.values())
    assert got == {t: f"{n} op{'s' * (n != 1)}" for t, n in graph_counts.items()}
    assert set(counts) <= set(got)
    # typed letters narrow the list, those starting with them first
    narrowed = [c.text for c in complete(session, "ls -t Mat")]
    assert narrowed and all("mat" in t.lower() for t in narrowed)


def test_metric_names_for_plot_and_vcs_plot(sample_ws):
    session = Session.open(sample_ws[0])
    for line in ("plot ", "vcs --plot "):
        assert sorted(c.text for c in complete(session, line)) == sorted(PLOT_METRICS)
    assert [c.text for c in complete(session, "plot max_a")] == ["max_abs_error"]


def test_eval_completes_tensor_names_inside_backticks(sample_ws):
    session = Session.open(sample_ws[0])
    got = complete(session, 'eval "np.abs(`fc1/Mat')
    assert got and all(c.start_position == -len("fc1/Mat") for c in got)
    assert "fc1/MatMul:0" in [c.text for c in got]
    tensors = [c.text for c in complete(session, "eval `fc1/MatMul:")]
    op = session.graph.ops["fc1/MatMul"]
    assert [f"fc1/MatMul:{k}" for k in range(len(op.outputs))] == [t for t in tensors if ":in" not in t]
    # a closed backtick: the expression goes on, nothing to complete there
    assert complete(session, "eval `fc1/MatMul:0` - np.a") == []


FRAMEWORK = Path(__file__).resolve().parents[2] / "sample_data" / "framework"


@pytest.mark.skipif(not (FRAMEWORK / "target_bf16").is_dir(), reason="framework sample not present")
def test_framework_session_completes_entries_tensors_golden_and_use_values():
    session = FrameworkSession.open(FRAMEWORK / "target_bf16", golden=FRAMEWORK / "golden_fp32")
    run, golden = session.run, session.golden_run()
    softmax = next(op for op in run.ops if op.name.startswith("Functional.softmax") and op.kind == "forward")
    # an entry: its first output, with kind, dtype and shape beside it
    got = {c.text: c.display_meta_text for c in complete(session, "pt " + softmax.name[:-3])}
    out0 = softmax.outputs[0]
    assert got[out0.printed()] == f"forward bf16 [{','.join(map(str, out0.leaf.shape))}]"
    # after ENTRY: every tensor of the entry, as tables print them, each pasting into pt
    tensors = [c.text for c in complete(session, f"pt {softmax.name}:")]
    assert sorted(tensors) == sorted(t.printed() for t in softmax.tensors)
    by_printed = {t.printed(): t for t in softmax.tensors}
    for name in tensors:
        found = resolve_tensor(session, name)
        array = found.read()
        assert found.label == name
        assert array.shape == tuple(by_printed[name].leaf.shape)
    # golden tensors by the golden entry's own names
    gold = [c.text for c in complete(session, f"pt golden:{softmax.name}:")]
    assert set(gold) == {t.printed(golden=True) for t in golden.op(softmax.name).tensors}
    # use --step/--rank offer what the target has; ls -t the API types with their counts
    ranks = {r.location.rank for r in session.target.ranks}
    assert {c.text for c in complete(session, "use --rank ")} == ranks
    assert {c.text for c in complete(session, "use --step ")} == {str(s) for s in session.target.steps}
    types = Counter(f"{op.entry.prefix}.{op.entry.op}" for op in run.ops)
    got = {c.text: c.display_meta_text for c in complete(session, "ls -t Functional.lin")}
    assert got == {"Functional.linear": f"{types['Functional.linear']} entries"}
