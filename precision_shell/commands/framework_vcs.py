"""The framework-dump ``vcs``: failing entries of the compare as roots and propagated over the
dataflow graph (the judging: :mod:`.framework_suspects`, ``analysis/root_cause``), and the panel
``next``/``goto`` show for each (``vc`` and ``ac``: :mod:`.framework_analysis`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from precision_shell.commands.framework_compare_run import FrameworkCompare, run_compare
from precision_shell.commands.framework_inspect import FRAMEWORK, variant
from precision_shell.commands.framework_sets import SET_ARGS, suspects_table, wants_sets
from precision_shell.commands.inspect_cmd import check_limit
from precision_shell.commands.registry import arg
from precision_shell.commands.finding_list import arrange, column, follow, limit_arg, list_args
from precision_shell.commands.results import Marked, Sections, Table
from precision_shell.commands.stepping import PANELS
from precision_shell.errors import CommandError, UsageError
from precision_shell.formats.msprobe.layout import parse_entry_name

COMPARE_CURSOR = "framework compare"



def _count(n: int, what: str) -> str:
    plural = what[:-1] + "ies" if what.endswith("y") else what + "s"
    return f"{n:,} {what if n == 1 else plural}"


def _cos(value) -> str:
    return f"{value:.6f}" if isinstance(value, float) else str(value)


def _metrics_of(found: FrameworkCompare, run, names: list[str]):
    """The compare metrics of the first of ``names`` (pshell tensor names) that has a row."""
    from precision_shell.analysis.compare.msprobe.stats_table import rows_by_name

    by_name = rows_by_name(found.rows)     # statistics rows: built when looked up
    for name in names:
        r = by_name.get(run.tensor(name).compare_name)
        if r is not None and r.metrics is not None:
            return r.metrics
    return None


def _sort_keys(found: FrameworkCompare, session) -> dict[str, Callable[[Any], Any]]:
    """--sort keys of the framework vcs: order and msprobe's metrics of the row's failing output
    (the run model built only when a metric is sorted on)."""
    cache: dict[str, Any] = {}

    def metric(field_name: str) -> Callable[[Any], Any]:
        def value(s):
            if s.op not in cache:
                cache[s.op] = _metrics_of(found, session.run, s.failed_outputs)
            return getattr(cache[s.op], field_name, None)
        return value
    return {"order": lambda s: s.index, "cosine": lambda s: s.cosine, "stat_error": lambda s: s.stat_error,
            "euc_dist": metric("euc_dist"),
            "max_abs_err": metric("max_abs_err"), "max_relative_err": metric("max_relative_err"),
            "one_thousandth": metric("one_thousandth"), "five_thousandths": metric("five_thousandths")}


def _api_type(name: str) -> str:
    e = parse_entry_name(name)
    return f"{e.prefix}.{e.op}"


def _rel(value) -> str:
    return "-" if value is None else f"{value:.4g}"


def stat_tolerance(args) -> float:
    from precision_shell.analysis.root_cause.stat_verdict import DEFAULT_TOLERANCE

    value = getattr(args, "stat_tolerance", None)
    if value is None:
        return DEFAULT_TOLERANCE
    if not value >= 0:
        raise UsageError(f"--stat-tolerance is a relative error >= 0, got {value}")
    return value


def _printed(printed: Callable[[str], str], names: list[str]) -> str:
    return ", ".join(printed(n) for n in names)


def _printer(run) -> Callable[[str], str]:
    return lambda name: run.tensor(name).printed()


@dataclass
class SuspectTable(Table):
    """The framework ``vcs`` table: its JSON rows are made when first asked for (``--format
    json``, MCP, ``json_rows``), not for each of 100k failing entries when only the terminal's 20
    rows are shown."""
    suspects: list = field(default_factory=list)

    @property
    def json_rows(self) -> list[dict]:
        if self.__dict__.get("_json_rows") is None:
            self._json_rows = [s.to_json() for s in self.suspects]
        return self._json_rows

    @json_rows.setter
    def json_rows(self, rows: list[dict] | None) -> None:
        self._json_rows = rows

    def shown_json(self, first: int | None = None) -> list[dict]:
        """The JSON rows of the shown rows only (MCP's ``failing_ops`` answers a page of ~99k
        failing entries: that many objects and dicts made, not 99k)."""
        if self.shown is None or self.__dict__.get("_json_rows") is not None:
            return super().shown_json(first)
        return [self.suspects[pos].to_json() for pos in self.shown[:first]]

    def json_text(self) -> str:
        """The ``--format json`` document: written from the suspects' columns when they are a
        lazy list in dump order (no row object or dict per suspect), else from ``json_rows``."""
        from precision_shell.jsonable import to_json_text

        if self.__dict__.get("_json_rows") is None and hasattr(self.suspects, "json_text"):
            return self.suspects.json_text()
        return to_json_text(self.json_rows)


@variant(FRAMEWORK, "vcs", summary="Failing entries of the compare (output cosine <= COS, NaN fails "
                                   "too; on statistics dumps: Max, Min or Norm off by more than the "
                                   "--stat-tolerance) in execution order, each root or propagated over the "
                                   "dataflow graph; the first root is the first divergence.",
         example="vcs\nvcs -c 0.99 -l 0\nvcs --backward\nvcs --sort cosine --role root\nvcs --type linear\n"
                 "vcs --stat-tolerance 0.05\nvcs --plot max_abs_error\nvcs --ranks all --steps all\n"
                 "vcs --rank excess\nvcs --replay",
         args=[arg("-c", "--cosine", type=float, default=None, metavar="COS",
                   help="cosine threshold (default: the `config` threshold, 0.98)"),
               arg("--stat-tolerance", type=float, default=None, metavar="REL",
                   help="statistics dumps: an output fails when |t-g|/max(|g|,1e-12) of its Max, Min or "
                        "Norm exceeds REL, or it is non-finite where golden is finite (default 0.1)"),
               limit_arg(),
               arg("--backward", action="store_true",
                   help="backward and parameters_grad entries too (default: forward only)"),
               arg("--rank", choices=("order", "excess"), default="order",
                   help="excess: the same as --sort -excess (tensor dumps: the entry's error over that of "
                        "an ideal kernel in its dtypes, see `replay`)"),
               arg("--replay", action="store_true",
                   help="replay every root entry (see `replay`; tensor dumps) and add its verdict column "
                        "(JSON: verdict, replay_profile)"),
               arg("--plot", nargs="?", const="cosine", default=None, metavar="METRIC", complete="metric",
                   help="instead of the table, a chart of METRIC (default cosine) of each forward "
                        "entry along execution order, roots and the first divergence marked")] + SET_ARGS
         + list_args("order, stat_error (statistics dumps), excess (tensor dumps), or a metric of the row's "
                     "failing output: cosine, euc_dist, max_abs_err, max_relative_err, one_thousandth, "
                     "five_thousandths"))
def vcs(session, args) -> Table:
    from precision_shell.commands.framework_suspects import judge_compare

    threshold = session.settings.threshold if args.cosine is None else args.cosine
    if not -1.0 <= threshold <= 1.0:
        raise UsageError(f"-c is a cosine in [-1, 1], got {threshold}")
    tolerance = stat_tolerance(args)
    if wants_sets(args):
        if args.plot is not None:
            raise UsageError("vcs --plot draws one dump.json: drop --ranks/--steps (see `use`)")
        return suspects_table(session, args, threshold, tolerance)
    limit = check_limit(args.limit, session)
    found = session.results.get("compare")
    ran_vc = found is None
    if found is None:
        found = run_compare(session)
    if found.mode == "md5":
        raise CommandError("vcs needs values or statistics on both sides; this pair dumped md5 only: "
                           "`vc` lists the rows whose CRC differs")
    if found.mode == "statistics" and args.plot is not None:
        raise UsageError("vcs --plot draws a tensor metric; this pair compares statistics (see the table)")
    unjudged: list[str] = []
    suspects, run = judge_compare(session, session.selected, found, threshold, args.backward, tolerance, unjudged)
    printed = _printer(run)
    keys, excess = _sort_keys(found, session), None
    wants_excess = (args.sort or "").lstrip("-") == "excess" or args.rank == "excess"
    if (wants_excess or args.replay) and found.mode != "tensor":
        raise UsageError(f"vcs {'--replay' if args.replay else '--rank excess'} replays entries from their "
                         "dumped tensors; this pair compares statistics (rerun msprobe with task 'tensor')")
    if wants_excess:
        from precision_shell.commands.framework_replay import entry_case
        from precision_shell.commands.replay_run import excess_of

        excess = excess_of(session, suspects, lambda name: entry_case(session, name))
        keys["excess"] = lambda s: excess[s.op][2] if excess.get(s.op) else None
        args.sort = args.sort or "-excess"      # --rank excess: highest first
    view = arrange(suspects, args, keys=keys, type_of=lambda s: _api_type(s.op), limit=limit)
    session.results["vcs"] = suspects
    session.results["vcs_threshold"] = threshold     # the chart's line (plot_cmd)
    session.results["vcs_tolerance"] = tolerance
    stats_mode = found.mode == "statistics"
    if args.plot is not None:       # a chart, not a list: the cursor stays
        from precision_shell.commands.plot_cmd import framework_chart, plot_metric_key

        return framework_chart(session, plot_metric_key(args.plot))
    replaced = follow(session, COMPARE_CURSOR, view.items, "this list")
    rows, highlight = [], set()
    for pos in view.shown:
        s = view.items[pos]
        judged = [s.statistic, _rel(s.stat_error)] if stats_mode else [_cos(s.cosine)]
        rows.append([pos + 1, s.index, s.op, s.kind, Marked(s.role, "◀ first divergence" if s.first else ""),
                     *judged, _printed(printed, s.failed_outputs), _printed(printed, s.failed_inputs) or "-"])
        if s.first:
            highlight.add(len(rows) - 1)
    roles = column(suspects, "roles", "role")
    roots = roles.count("root")
    if stats_mode:
        notes = [f"statistics mode: failing = an output whose Max, Min or Norm is off by more than "
                 f"{tolerance:g} (|t-g|/max(|g|,1e-12)) or non-finite where golden is finite; "
                 f"root = every input still passes"]
        if unjudged:
            shown = ", ".join(printed(n) for n in unjudged[:3])
            notes.append(f"{_count(len(unjudged), 'output')} not comparable (no golden row, or Max/Min/Norm "
                         f"null on a side), judged by their producer: {shown}{' ...' if len(unjudged) > 3 else ''}")
    else:
        notes = [f"failing = an output with cosine <= {threshold:g} or NaN/Inf; root = every input still passes"]
    if "param_grad" in roles:
        notes.append("param_grad = a failing parameter gradient: it has no recorded inputs, so it is never "
                     "a root; the module's backward entries say where its error came from")
    if ran_vc:
        notes.append(f"no compare result yet, so `vc` ran first (CSV {found.csv_path})")
    if replaced:
        notes.append(replaced)
    hints = ["`next`/`goto #` step through the list with each entry's metric panel"] if view.items else []
    judged_headers = ["failed statistic", "rel. error"] if stats_mode else ["cosine"]
    table = SuspectTable(["#", "order", "entry", "kind", "role", *judged_headers, "failing outputs", "failing inputs"],
                 rows, title=f"{_count(len(suspects), 'failing entry')} "
                             f"({_count(roots, 'root')}), {view.what}",
                 suspects=view.items, shown=view.shown, notes=notes, total=len(view.items),
                 more=view.more, highlight=highlight, findings=len(suspects), hints=hints,
                 warnings=found.problems, unjudged=None if found.compared else "no tensor pair compared")
    if excess is not None:
        from precision_shell.commands.replay_run import add_excess_column

        add_excess_column(table, excess, column="entry")
    if args.replay:
        from precision_shell.commands.framework_replay import replay_entry
        from precision_shell.commands.replay_run import add_root_verdicts, default_profiles

        profiles = default_profiles()
        add_root_verdicts(session, table, [s.op for s in view.items if s.role == "root"],
                          lambda name: replay_entry(session, name, profiles)[2], column="entry")
    return table


def _golden_printed(session, compare_name: str) -> str:
    """The golden side of a compare row (msprobe's compare name) as ``pt`` takes it."""
    try:
        return session.golden_run().tensor(compare_name).printed(golden=True)
    except CommandError:        # a row msprobe pairs with no golden leaf of that name
        return compare_name


def _compare_panel(session, s, position: str) -> Sections:
    from precision_shell.commands.framework_suspects import judged_run_of

    found = session.results["compare"]
    run = judged_run_of(session, session.selected, found)
    op = run.op(s.op)
    printed = _printer(run)
    info = [("role", s.role + ("  (first divergence)" if s.first else "")), ("kind", s.kind),
            ("modules", " > ".join(s.modules) or "-"),
            ("failing", _printed(printed, s.failed_outputs)),
            ("failing inputs", _printed(printed, s.failed_inputs) or "none: the error starts here"),
            ("downstream", ", ".join(s.downstream[:6]) + (" ..." if len(s.downstream) > 6 else "") or "-")]
    if found.mode == "statistics":
        return Sections(title=f"[{position}] {s.op} ({s.kind})",
                        blocks=[("", info), ("statistics", _stats_table(session, s, op, found))], data=s.to_json())
    from precision_shell.analysis.compare.msprobe.stats_table import rows_by_name

    by_name = rows_by_name(found.rows)
    rows = []
    for t in op.tensors:
        r = by_name.get(t.compare_name)
        m = r.metrics if r is not None else None
        cells = [_cos(v) for v in m.cells()] if m is not None else ["-"] * 6
        golden = _golden_printed(session, r.pair.golden.name) if r is not None and r.pair.golden is not None \
            else "-"
        bad = t.name in s.failed_outputs or t.name in s.failed_inputs
        rows.append([t.printed(), golden, *cells, ("FAIL" if bad else "ok") if m is not None else "not compared"])
    metrics = Table(["tensor", "golden", "cosine", "euc_dist", "max_abs", "max_rel", "1‰ ratio", "5‰ ratio",
                     "verdict"], rows)
    return Sections(title=f"[{position}] {s.op} ({s.kind})", blocks=[("", info), ("metrics", metrics)],
                    data=s.to_json())


def _stats_table(session, s, op, found: FrameworkCompare) -> Table:
    """Each tensor's Max, Min and Norm beside the golden's, and the largest relative error of
    the three (what a statistics-mode verdict reads)."""
    from precision_shell.analysis.root_cause.stat_verdict import judge_stats

    tolerance = session.results.get("vcs_tolerance", 0.1)
    rows = []
    for t in op.tensors:
        golden = found.golden_stats(t.compare_name)
        verdict = judge_stats(t.stats, golden, tolerance)
        cells = []
        for attr in ("max", "min", "norm"):
            cells += [_stat(getattr(t.stats, attr, None)), _stat(getattr(golden, attr, None))]
        bad = t.name in s.failed_outputs or t.name in s.failed_inputs
        rows.append([t.printed(), *cells, _rel(verdict.rel_error), ",".join(verdict.failed) or
                     ("not comparable" if verdict.fails is None else ""), "FAIL" if bad else ""])
    return Table(["tensor", "max", "golden max", "min", "golden min", "norm", "golden norm", "rel. error",
                  "failed", ""], rows)


def _stat(value) -> str:
    return "-" if value is None else f"{value:.6g}"


PANELS[COMPARE_CURSOR] = _compare_panel
