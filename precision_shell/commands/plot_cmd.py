"""``plot METRIC`` and the charts of ``vcs --plot`` / ``ac --plot``: the data of a result as a
:class:`Chart` (drawn by ``render.plot``)."""

from __future__ import annotations

import importlib.util
from typing import Any

from precision_shell.commands.registry import REGISTRY, arg, command
from precision_shell.commands.results import Chart
from precision_shell.errors import CommandError, UsageError
from precision_shell.model.session import Session


def require_plotext() -> None:
    if importlib.util.find_spec("plotext") is None:
        raise CommandError("charts need plotext: pip install 'plotext>=5.3,<6'")


def plot_metric_key(name: str) -> str:
    """A metric name as ``vcs --metric`` takes it (``cosine``, ``max_abs``, ``MaxAbsoluteError``)."""
    from precision_shell.analysis.inspect.metric_series import PLOT_METRICS
    from precision_shell.analysis.root_cause.graph import metric_key

    key = metric_key(name)
    if key not in PLOT_METRICS:
        raise UsageError(f"unknown metric {name!r} (use one of {', '.join(PLOT_METRICS)})")
    return key


def compare_chart(found: Any, result: Any, key: str) -> Chart:
    """``key`` of every compared op along execution order; roots and the first divergence marked."""
    from precision_shell.analysis.inspect.metric_series import metric_series

    require_plotext()
    threshold = found.criteria.threshold if found is not None else None
    return series_chart(metric_series(result, found, key), key, threshold, "op")


def framework_chart(session: Any, key: str) -> Chart:
    """The same for a framework (msprobe) session, after its ``vcs``."""
    from precision_shell.analysis.inspect.metric_series import FRAMEWORK_METRICS, framework_series

    require_plotext()
    if key not in FRAMEWORK_METRICS:
        raise UsageError(f"msprobe's compare has no {key}; use one of {', '.join(FRAMEWORK_METRICS)}")
    found = session.results["compare"]
    suspects = session.results.get("vcs") or []
    points = framework_series(session.run, found.rows, suspects, key)
    return series_chart(points, key, session.results.get("vcs_threshold"), "entry")


def series_chart(points: list, key: str, threshold: float | None, what: str) -> Chart:
    if not points:
        raise CommandError(f"nothing to plot: no {what} has a compared output (see `vc`)")
    roots = [p.order for p in points if p.role == "root"]
    first = next((p for p in points if p.first), None)
    notes = []
    if first is not None:
        notes.append(f"first divergence: {first.op} ({first.type}) at {first.order}, {key} {first.value:.6g}")
    threshold = threshold if key == "cosine" else None
    if threshold is not None:
        notes.append(f"horizontal line: the cosine threshold {threshold:g}")
    marks = {"root": roots}
    if first is not None:
        marks["first divergence"] = [first.order]
    many = {"op": "ops", "entry": "entries"}[what]
    title = (f"{key} of each {what}'s worst output along execution order ({len(points)} {many}, "
             f"{len(roots)} root{'s' * (len(roots) != 1)})")
    return Chart(title, "line", [p.order for p in points], [p.value for p in points],
                 [p.op for p in points], key, marks=marks, hline=threshold, notes=notes,
                 data={"metric": key, "threshold": threshold, "points": [p.to_json() for p in points]})


def overflow_chart(scan: Any) -> Chart:
    """nan/inf counts of each overflowing op's outputs along execution order, producers marked."""
    require_plotext()
    if not scan.findings:
        raise CommandError("nothing to plot: no overflowing op")
    counts = [sum(t.stats.nan + t.stats.pos_inf + t.stats.neg_inf for t in f.outputs) for f in scan.findings]
    producers = [f.order for f in scan.findings if f.role == "producer"]
    first = scan.first_producer
    notes = [f"first producer: {first.op} ({first.type}) at {first.order}"] if first is not None else []
    zero = sum(1 for c in counts if c == 0)
    if zero:
        notes.append(f"{zero} op{'s' * (zero != 1)} with no nan/inf in the dumped outputs "
                     "(an Opdebug record, a ±65504 saturation, or healed: finite outputs) drawn at 0")
    title = f"nan/inf count of the outputs of each op `ac` lists ({len(scan.findings)} ops)"
    rows = [{"order": f.order, "op": f.op, "type": f.type, "count": c, "role": f.role}
            for f, c in zip(scan.findings, counts)]
    return Chart(title, "bar", [f.order for f in scan.findings], [float(c) for c in counts],
                 [f.op for f in scan.findings], "nan/inf count", marks={"producer": producers},
                 xlabel="overflowing ops in execution order (# of `ac`)",
                 notes=notes, data={"points": rows}, interrupted=scan.cancelled)


@command("plot",
         summary="Chart of a compare metric (cosine, max_abs_error, ... any `vcs --metric` name) of "
                 "each op along execution order, roots and the first divergence marked; runs "
                 "`vcs` first when needed. `> FILE` gets the plain chart.",
         example="plot\nplot max_abs_error\nplot mean_relative_error > mre.txt",
         args=[arg("metric", nargs="?", default="cosine", complete="metric",
                   help="the metric (default cosine)")])
def plot(session: Session, args: Any) -> Chart:
    key = plot_metric_key(args.metric)
    if "vcs" not in session.results or "compare" not in session.results:
        cursor = session.results.get("cursor")
        vcs = REGISTRY.for_session(REGISTRY.lookup("vcs"), session)
        vcs.handler(session, vcs.parse([]))
        if cursor is not None:   # plotting does not move the finding cursor
            session.results["cursor"] = cursor
    if getattr(session, "kind", "graph") != "graph":
        return framework_chart(session, key)
    return compare_chart(session.results["vcs"], session.results["compare"], key)


# a framework (msprobe) session plots its own compare (framework_chart)
REGISTRY.share("framework", "plot")
