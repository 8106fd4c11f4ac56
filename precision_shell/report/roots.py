"""Per root op of the suspect list: its compare panel, its depth-2 neighbourhood laid out, and the
value histograms of its worst output (NPU, golden, NPU - golden)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from precision_shell.commands.results import Sections
from precision_shell.errors import PshellError
from precision_shell.report.layout import GraphPicture, neighbourhood_picture

HOOD_DEPTH = 2
BINS = 30


@dataclass
class ValueHistograms:
    npu_tensor: str             # "OP:output:I"
    golden_tensor: str          # "golden:NAME:I"
    npu: Any                    # analysis.inspect.histogram.Histogram
    golden: Any
    error: Any | None           # of NPU - golden; None when the shapes differ


@dataclass
class RootDetail:
    suspect: Any                # root_cause.Suspect
    panel: Sections             # what `next` shows for it
    graph: GraphPicture | None
    histograms: ValueHistograms | None
    verdict: Any | None         # analysis.replay.verdict.Verdict: why the op is wrong
    notes: list[str]            # why a part is missing


def value_histograms(session: Any, suspect: Any) -> ValueHistograms:
    """Histograms of the root's worst output and its golden tensor (raises PshellError)."""
    import numpy as np

    from precision_shell.analysis.inspect.histogram import histogram
    from precision_shell.errors import CommandError
    from precision_shell.model.tensor_ref import TensorRef
    from precision_shell.model.tensor_resolve import resolve_tensor

    worst = suspect.worst
    if not worst.golden_ref or ":" not in worst.golden_ref:
        raise CommandError(f"{worst.tensor} has no golden tensor")
    name, index = worst.golden_ref.rsplit(":", 1)
    npu_ref = resolve_tensor(session, TensorRef("npu", suspect.op, "output", worst.index))
    golden_ref = resolve_tensor(session, TensorRef("golden", name, None, int(index)))
    npu, golden = npu_ref.read(), golden_ref.read()
    error = None
    if npu.shape == golden.shape:
        with np.errstate(invalid="ignore", over="ignore"):
            error = histogram(npu.astype(np.float64) - golden.astype(np.float64), BINS)
    return ValueHistograms(npu_ref.label, golden_ref.label, histogram(npu, BINS),
                           histogram(golden, BINS), error)


def replay_verdict(session: Any, op_name: str) -> Any:
    """The root replayed under the default profiles (as ``vcs --replay`` does), kept in the
    session so its ``next`` panel shows it too; raises PshellError when it cannot be."""
    from precision_shell.commands.replay_run import REPLAYED, default_profiles, replay_op

    verdict = replay_op(session, session.resolve_op(op_name), default_profiles())[2]
    session.results.setdefault(REPLAYED, {})[op_name] = verdict
    return verdict


def root_detail(session: Any, suspect: Any, position: str, cosines: dict[str, float],
                roles: dict[str, str], result: Any) -> RootDetail:
    from precision_shell.commands.compare_run import compare_panel

    notes = []
    verdict = None
    if session.graph is not None and (result is None or result.mode != "npu"):
        try:
            verdict = replay_verdict(session, suspect.op)
        except PshellError as exc:
            notes.append(f"no replay verdict: {exc}")
    graph = None
    if session.graph is not None and session.graph.ops.get(suspect.op) is not None:
        graph = neighbourhood_picture(session.graph, suspect.op, HOOD_DEPTH, cosines, roles,
                                      session.settings.threshold)
    else:
        notes.append("no graph loaded: no neighbourhood to draw")
    hists = None
    if result is not None and result.mode == "npu":
        notes.append("value histograms need a golden compare (this one is NPU vs NPU)")
    else:
        try:
            hists = value_histograms(session, suspect)
        except PshellError as exc:
            notes.append(f"no value histograms: {exc}")
    return RootDetail(suspect, compare_panel(session, suspect, position), graph, hists, verdict, notes)
