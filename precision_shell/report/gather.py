"""What goes into a report, gathered from the session: pure data, no HTML.

Everything here reuses what the commands produce (``info``'s panel, the ``ac`` and ``vcs``
tables, ``fusion``'s sections, the compare panel ``next`` shows, the exporters' texts), so the
report says exactly what the terminal says. ``ensure_results`` runs ``ac`` and ``vcs`` through the
registry when they have not run yet.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from precision_shell import __version__
from precision_shell.commands.registry import REGISTRY
from precision_shell.commands.results import Sections, Table
from precision_shell.errors import CommandError, PshellError
from precision_shell.report.roots import RootDetail, root_detail

DEFAULT_ROOTS = 10


@dataclass
class OpPoint:
    """One compared op on the chart, in execution order."""

    order: int
    op: str
    type: str
    cosine: float               # the lowest output cosine (NaN when one output's is NaN)
    max_abs_error: float        # the largest output max absolute error
    role: str | None = None     # "root" | "propagated" when the op is in the suspect list
    first: bool = False         # the first divergence


@dataclass
class ExportFile:
    """An export embedded in the report as a download link."""

    name: str                   # file name the browser saves
    mime: str
    text: str
    what: str                   # what the file is for


@dataclass
class ReportData:
    version: str
    created: str                        # UTC, ISO 8601
    commands: list[str]                 # the session's statements, this report's last
    summary: Sections                   # `info`
    threshold: float | None             # the suspect list's cosine threshold
    points: list[OpPoint]
    overflow: Table | None              # `ac -l 0`
    suspects: Table | None              # `vcs -l 0`
    suspect_rows: list[dict]            # `vcs --format json` rows
    roots: list[RootDetail]             # the first N roots in execution order
    roots_total: int
    fusion: Sections | None
    exports: list[ExportFile]
    notes: list[str] = field(default_factory=list)   # what could not be computed, and why
    curve: Table | None = None          # the session's last `curve`: its findings and events
    impact: Table | None = None         # the session's last `impact`: a bar per root (json_rows)


def _run(session: Any, name: str, argv: list[str]) -> Any:
    """A command's result as the session's kind runs it (the framework variants on msprobe dumps)."""
    cmd = REGISTRY.for_session(REGISTRY.lookup(name), session)
    return cmd.handler(session, cmd.parse(argv))


def ensure_results(session: Any) -> list[str]:
    """Run ``ac`` and ``vcs`` when their results are missing; the reasons any could not run.
    The finding cursor the user was stepping through stays where it was."""
    notes = []
    cursor = session.results.get("cursor")
    for key, name, what in (("overflow", "ac", "overflow scan"), ("vcs", "vcs", "compare")):
        if key in session.results:
            continue
        try:
            _run(session, name, [])
            notes.append(f"`{name}` had not run, so the report ran it")
        except PshellError as exc:
            notes.append(f"no {what} (`{name}`): {exc}")
    if cursor is not None:
        session.results["cursor"] = cursor
    return notes


def op_points(result: Any, found: Any) -> list[OpPoint]:
    """The chart's points: every op with a compared output, in execution order."""
    from precision_shell.analysis.inspect.metric_series import metric_series

    errors = {p.order: p.value for p in metric_series(result, None, "max_abs_error")}
    return [OpPoint(p.order, p.op, p.type, p.value, errors[p.order], p.role, p.first)
            for p in metric_series(result, found, "cosine")]


def export_files(suspects: list) -> tuple[list[ExportFile], list[str]]:
    """The suspect exports (what ``export suspects --format F`` writes), and why any is missing."""
    from precision_shell.commands.compare_exports import fusion_switch_text, keep_fp32_text
    from precision_shell.commands.export import rows_text

    files = [ExportFile("suspects.csv", "text/csv", rows_text([s.to_flat_json() for s in suspects], "csv"),
                        "failing ops, one row each (export suspects)"),
             ExportFile("suspects.json", "application/json", rows_text([s.to_json() for s in suspects], "json"),
                        "failing ops with every metric (export suspects --format json)")]
    notes = []
    for name, make, what in (("suspects_fusion_switch.cfg", fusion_switch_text,
                              "fusion switch config turning off the passes behind fused roots "
                              "(--fusion_switch_file)"),
                             ("suspects_keep_fp32.txt", keep_fp32_text,
                              "framework op names of the roots, to keep in fp32")):
        try:
            text, _count = make(suspects)
        except CommandError as exc:
            notes.append(f"no {name}: {exc}")
            continue
        files.append(ExportFile(name, "text/plain", text, what))
    return files, notes


def gather(session: Any, *, roots: int = DEFAULT_ROOTS, notes: list[str] = ()) -> ReportData:
    """The report of what ``session`` has computed (call :func:`ensure_results` first)."""
    from precision_shell.analysis.inspect.node_panel import known_cosines, known_roles
    from precision_shell.commands.compare_run import coverage_report, suspects_table
    from precision_shell.commands.overflow_cmd import scan_table

    notes = list(notes)
    scan = session.results.get("overflow")
    found = session.results.get("vcs")
    result = session.results.get("compare")
    if scan is None and found is None:
        raise CommandError("nothing to report: no overflow scan and no compare could run "
                           "(needs NPU dumps, Opdebug files or a golden dump; see `info`)")
    suspects = found.suspects if found is not None else []
    try:
        fusion = _run(session, "fusion", [])
    except CommandError as exc:
        fusion = None
        notes.append(f"no fusion report: {exc}")
    exports, export_notes = export_files(suspects) if found is not None else ([], [])
    all_roots = [s for s in suspects if s.role == "root"]
    cosines, roles = known_cosines(session), known_roles(session)
    details = [root_detail(session, s, f"root {k} of {len(all_roots)}", cosines, roles, result)
               for k, s in enumerate(all_roots[:roots], 1)]
    return ReportData(
        version=__version__,
        created=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        commands=list(getattr(session, "history", [])),
        summary=_run(session, "info", []),
        threshold=found.criteria.threshold if found is not None else None,
        points=op_points(result, found) if result is not None else [],
        overflow=scan_table(scan, None) if scan is not None else None,
        suspects=suspects_table(found, None, result.problems, [], coverage_report(session, result))
        if found is not None and result is not None else None,
        suspect_rows=[s.to_json() for s in suspects],
        roots=details, roots_total=len(all_roots), fusion=fusion, exports=exports,
        notes=notes + export_notes, curve=curve_table(session.results.get("curve")),
        impact=session.results.get("impact"))


def curve_table(found: Any) -> Table | None:
    """The last `curve` of the session as one table: the findings, then every event."""
    if found is None:
        return None
    doc = found.to_json()
    title = (f"{doc['metric']} of {doc['target']}" + (f" vs {doc['golden']}" if doc["golden"] else "")
             + (f": {doc['verdict']}, mean relative error {doc['mean_relative_error']:.6g}"
                if doc["mean_relative_error"] is not None else ""))
    rows = [[k, doc[k]] for k in ("first_divergent_step", "first_nonfinite_step", "suggested_step",
                                  "suggested_dump_step")]
    rows += [[f"step {e['step']}", f"{e['kind']}: {e['detail']}"] for e in doc["events"]]
    return Table(["finding", "value"], rows, title=title, warnings=list(found.warnings))
