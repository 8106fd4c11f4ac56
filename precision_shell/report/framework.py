"""The report of a framework session (msprobe dumps, pshell captures): the same page as graph
mode, from the framework commands' results -- ``info``, the ``vcs`` and ``ac`` tables, the chart
of each forward entry's output cosine and max abs error, and per root its compare panel (what
``next`` shows), its dataflow neighbourhood over the run model's edges and the value histograms
of its worst output against its golden."""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Any

from precision_shell import __version__
from precision_shell.errors import CommandError, PshellError
from precision_shell.report.gather import ExportFile, OpPoint, ReportData, _run
from precision_shell.report.roots import BINS, HOOD_DEPTH, RootDetail, ValueHistograms


def _number(value: Any, worst: float) -> float | None:
    """msprobe's cell as a float: a number as is, its NaN/N/A texts as ``worst``; None when
    it computed nothing (unsupported)."""
    from precision_shell.analysis.compare.msprobe.tensor_metrics import UNSUPPORTED

    if isinstance(value, float):
        return value
    return None if value == UNSUPPORTED else worst


def entry_points(session: Any, found: Any, suspects: list) -> list[OpPoint]:
    """Each forward entry with a compared output, in dump order: the lowest output cosine and
    the largest output max abs error (NaN when msprobe could not compute one for NaN/Inf)."""
    if found.mode != "tensor":
        return []
    run, by_name = session.run, {r.name: r for r in found.rows}
    marks = {s.op: s for s in suspects}
    points = []
    for op in run.ops:
        if op.kind != "forward":
            continue
        cos, err = [], []
        for t in op.outputs:
            r = by_name.get(t.compare_name)
            if r is None or r.metrics is None:
                continue
            c, e = _number(r.metrics.cosine, math.nan), _number(r.metrics.max_abs_err, math.nan)
            if c is not None:
                cos.append(c)
            if e is not None:
                err.append(e)
        if not cos:
            continue
        s = marks.get(op.name)
        points.append(OpPoint(op.order, op.name, op.type, math.nan if any(c != c for c in cos) else min(cos),
                              math.nan if not err or any(e != e for e in err) else max(err),
                              s.role if s is not None else None, bool(s is not None and s.first)))
    return points


def value_histograms(session: Any, found: Any, suspect: Any) -> ValueHistograms:
    import numpy as np

    from precision_shell.analysis.inspect.histogram import histogram

    from precision_shell.model.runs.msprobe import MsprobePairing

    run, golden_run = session.run, session.golden_run()
    tensor = run.tensor(suspect.tensor)
    golden = MsprobePairing.of(run, golden_run, found.pairing).golden_for(tensor)
    if golden is None:
        raise CommandError(f"{tensor.printed()} has no golden tensor")
    if not tensor.has_data or not golden.has_data:
        raise CommandError(f"{tensor.printed()}: statistics only, no values dumped")
    npu, gold = run.load(tensor.name), golden_run.load(golden.name)
    error = None
    if npu.shape == gold.shape:
        with np.errstate(invalid="ignore", over="ignore"):
            error = histogram(npu.astype(np.float64) - gold.astype(np.float64), BINS)
    return ValueHistograms(tensor.printed(), golden.printed(golden=True), histogram(npu, BINS),
                           histogram(gold, BINS), error)


def root_detail(session: Any, found: Any, suspect: Any, position: str, cosines: dict, roles: dict) -> RootDetail:
    from precision_shell.commands.stepping import PANELS
    from precision_shell.model.runs.graph_view import RunGraph
    from precision_shell.report.layout import neighbourhood_picture

    notes = ["no replay verdict: framework replay kernels are not written yet"]
    graph = neighbourhood_picture(RunGraph(session.run), suspect.op, HOOD_DEPTH, cosines, roles,
                                  session.results.get("vcs_threshold", session.settings.threshold))
    hists = None
    try:
        hists = value_histograms(session, found, suspect)
    except PshellError as exc:
        notes.append(f"no value histograms: {exc}")
    panel = PANELS["framework compare"](session, suspect, position)
    return RootDetail(suspect, panel, graph, hists, None, notes)


def _keep(session: Any, argv: list[str]) -> Any:
    """A command's table run again for the report, the finding cursor left where it was."""
    cursor = session.results.get("cursor")
    try:
        return _run(session, argv[0], argv[1:])
    finally:
        if cursor is not None:
            session.results["cursor"] = cursor


def gather_framework(session: Any, *, roots: int, notes: list[str]) -> ReportData:
    from precision_shell.commands.export import rows_text
    from precision_shell.commands.framework_exports import keep_fp32_names

    notes = list(notes)
    scan, suspects, found = (session.results.get(k) for k in ("overflow", "vcs", "compare"))
    if scan is None and suspects is None:
        raise CommandError("nothing to report: no overflow scan and no compare could run (see `info`)")
    threshold = session.results.get("vcs_threshold", session.settings.threshold)
    overflow = _keep(session, ["ac", "-l", "0"]) if scan is not None else None
    table = None
    if suspects is not None:
        table = _keep(session, ["vcs", "-l", "0", "-c", repr(threshold),
                                "--stat-tolerance", repr(session.results.get("vcs_tolerance", 0.1))])
        suspects = session.results["vcs"]
    suspects = suspects or []
    exports = []
    if suspects:
        exports = [ExportFile("suspects.csv", "text/csv", rows_text([s.to_flat_json() for s in suspects], "csv"),
                              "failing entries, one row each (export suspects)"),
                   ExportFile("suspects.json", "application/json",
                              rows_text([s.to_json() for s in suspects], "json"),
                              "failing entries (export suspects --format json)")]
        names = keep_fp32_names(suspects)
        if names:
            exports.append(ExportFile("suspects_keep_fp32.txt", "text/plain", "".join(n + "\n" for n in names),
                                      "root API/module names, to keep in fp32 (export suspects --format keep-fp32)"))
    all_roots = [s for s in suspects if s.role == "root"]
    points = entry_points(session, found, suspects) if found is not None else []
    if found is not None and found.mode != "tensor":
        notes.append(f"{found.mode} mode: no cosine to chart (the suspect table judges statistics)")
    cosines = {p.op: p.cosine for p in points}
    roles = {s.op: s.role for s in suspects}
    details = [root_detail(session, found, s, f"root {k} of {len(all_roots)}", cosines, roles)
               for k, s in enumerate(all_roots[:roots], 1)] if found is not None else []
    return ReportData(
        version=__version__,
        created=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        commands=list(getattr(session, "history", [])),
        summary=_run(session, "info", []),
        threshold=threshold if found is not None and found.mode == "tensor" else None,
        points=points, overflow=overflow, suspects=table,
        suspect_rows=[s.to_json() for s in suspects],
        roots=details, roots_total=len(all_roots), fusion=None, exports=exports, notes=notes,
        impact=session.results.get("impact"))
