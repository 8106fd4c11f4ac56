"""``overflow``/``ac``: the overflow scan as a table, and its per-op panel for ``next``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from precision_shell.commands.finding_list import ListView, arrange, follow, limit_arg, list_args
from precision_shell.commands.inspect_cmd import check_limit
from precision_shell.commands.registry import arg, command
from precision_shell.commands.results import Marked, Sections, Table
from precision_shell.commands.row_schema import conform
from precision_shell.commands.stepping import PANELS, golden_stats_rows
from precision_shell.errors import CommandError, UsageError
from precision_shell.model.tensor_ref import tensor_name
from precision_shell.model.session import Session

if TYPE_CHECKING:
    from precision_shell.analysis.overflow.scan import OverflowFinding, OverflowScan


def _num(v: float) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _tensor_summary(op: str, t) -> str:
    s = t.stats
    parts = [f"{n:,} {label}" for n, label in ((s.nan, "nan"), (s.pos_inf, "+inf"), (s.neg_inf, "-inf"),
                                              (s.fp16_saturated, f"±{s.saturated_at:g}")) if n]
    finite = s.count - s.nan - s.pos_inf - s.neg_inf
    value_range = f"finite range [{_num(s.min)}, {_num(s.max)}]" if finite else "no finite value"
    # the name, then what is wrong: a name followed by ":" would not paste back
    return f"{tensor_name(op, t.kind, t.index)}  " + (", ".join(parts) if parts else "finite") + f"; {value_range}"


def _count_of(*fields: str):
    return lambda f: sum(getattr(t.stats, name) for t in f.outputs for name in fields)


# --sort keys: execution order and the outputs' counts of non-finite and saturated values
SORT_KEYS = {"order": lambda f: f.order, "nan": _count_of("nan"), "inf": _count_of("pos_inf", "neg_inf"),
             "pos_inf": _count_of("pos_inf"), "neg_inf": _count_of("neg_inf"),
             "saturated": _count_of("fp16_saturated")}


def scan_table(scan: OverflowScan, view: ListView | None) -> Table:
    """The ac list: ``view`` is the sorted, filtered and cut list (None: all, in order)."""
    view = view or ListView(scan.findings, list(range(len(scan.findings))), None)
    rows, highlight = [], set()
    first = scan.first_producer
    for pos in view.shown:
        f = view.items[pos]
        outs = " | ".join(_tensor_summary(f.op, t) for t in f.outputs if t.bad) or \
            " | ".join(_tensor_summary(f.op, t) for t in f.outputs[:1])
        mark = "◀ first producer" if f is first else ""
        rows.append([pos + 1, f.order, f.op, f.type, f.source, ", ".join(f.status_words) or "-",
                     Marked(f.role, mark), outs])
        if f is first:
            highlight.add(len(rows) - 1)
    notes: list[str] = []
    what = []
    if scan.opdebug_files:
        what.append(f"{scan.opdebug_files} Opdebug file{'s' * (scan.opdebug_files != 1)}")
    if scan.value_scan:
        what.append(f"{scan.scanned_files} dump files scanned for nan/inf")
    bad = scan.unreadable
    warnings = [f"unreadable files: {bad.text(': ')}"] if bad.total else []
    warnings += [f"  {reason}" for _, reason in bad.examples]
    if bad.total > len(bad.examples):
        warnings.append(f"  ... {bad.total - len(bad.examples)} more")
    warnings += scan.problems
    if scan.cancelled:
        notes.append("interrupted: the value scan stopped early; the list covers what was scanned")
    hints = ["`next`/`goto #` step through the list with the full panel of each op"] if view.items else []
    healed = sum(1 for f in scan.findings if f.role == "healed")
    over = len(scan.findings) - healed
    title = f"{over} overflowing op{'s' * (over != 1)}"
    if healed:   # their outputs are finite: not overflowing, yet where the nan/inf went
        title += f" and {healed} healing one{'s' * (healed != 1)} (nan/inf inputs, finite outputs)"
    title += f" ({', '.join(what)}), {view.what}"
    return Table(["#", "order", "op", "type", "source", "status", "role", "outputs"], rows,
                 title=title, json_rows=conform([f.to_json(f is first) for f in view.items], "overflow"), notes=notes,
                 total=len(view.items), more=view.more, highlight=highlight, findings=len(scan.findings),
                 hints=hints,
                 interrupted=scan.cancelled, warnings=warnings,
                 unjudged=f"unreadable files: {bad.text(': ')}" if bad.total else None)


@command("overflow", aliases=("ac",),
         summary="Overflow scan: Opdebug records + nan/inf values, ops in execution order, "
                 "each a producer, propagated, or healed (nan/inf inputs, finite outputs).",
         example="ac\nac -l 0\nac --values-only\nac --plot\nac; next; next\nac --sort -inf --type Mul\n"
                 "ac --role producer\nac --ranks all --steps all",
         args=[limit_arg("producers"),
               arg("--all", action="store_true", help="show every finding (same as -l 0)"),
               arg("--plot", action="store_true",
                   help="instead of the table, a chart of each op's nan/inf count along execution order"),
               arg("--values-only", action="store_true",
                   help="only the value scan (ignore Opdebug records)"),
               arg("--ranks", metavar="all|R,R",
                   help="scan these ranks (device folders) at once: one timeline in time order, "
                        "the first overflowing (step, rank, op), a step x rank grid"),
               arg("--steps", metavar="all|S,S", help="scan these steps (step folders) at once")]
         + list_args("order, or a count over the outputs: nan, inf, pos_inf, neg_inf, saturated (±65504)"))
def overflow(session: Session, args) -> Table:
    if args.ranks is not None or args.steps is not None:
        if args.plot:
            raise UsageError("ac --plot draws one dump set: drop --ranks/--steps (see `use`)")
        from precision_shell.commands.multi_set import scan_sets, select_sets, timeline_table

        limit = 0 if args.all else check_limit(args.limit, session)
        selection = select_sets(session, args.ranks, args.steps)
        findings, warnings, cancelled = scan_sets(session, selection, values_only=args.values_only)
        session.results.pop("overflow", None)   # `export overflow` is of one set
        return timeline_table(session, selection, findings, warnings, cancelled, limit)
    has_opdebug = bool(session.overflow_opdebug(session.active) or session.dumps.opdebug)
    has_dumps = bool(session.dumps.op_files)
    if args.values_only and not has_dumps:
        raise CommandError("no NPU dumps in the active dump set to scan for nan/inf (see `info`)")
    if not has_dumps and not has_opdebug:
        raise CommandError("nothing to scan: no NPU dumps and no Opdebug files "
                           "(dump with overflow detection into precision_data/overflow/, or pass --npu/--overflow)")
    from precision_shell.analysis.overflow.scan import scan_overflow  # numpy: on first use

    from precision_shell.commands.multi_set import session_executor

    scan = scan_overflow(session, values=has_dumps, opdebug=not args.values_only,
                         executor=session_executor(session))
    limit = 0 if args.all else check_limit(args.limit, session)
    view = arrange(scan.findings, args, keys=SORT_KEYS, type_of=lambda f: f.type, limit=limit)
    session.results["overflow"] = scan
    if args.plot:                   # a chart, not a list: the cursor stays
        from precision_shell.commands.plot_cmd import overflow_chart

        return overflow_chart(scan)
    replaced = follow(session, "overflow", view.items, "this list")
    table = scan_table(scan, view)
    if replaced:
        table.notes.append(replaced)
    elsewhere = len(session.overflow_dumps.opdebug) - len(session.overflow_opdebug(session.active))
    if elsewhere:   # records of other devices/steps are not this set's, but not hidden either
        table.notes.append(f"{elsewhere} Opdebug file{'s' * (elsewhere != 1)} of other devices or steps "
                           f"not counted here: `ac --ranks all --steps all` scans them all")
    return table


def overflow_panel(session: Session, finding: OverflowFinding, position: str) -> Sections:
    info = [("role", finding.role), ("source", finding.source),
            ("status", ", ".join(finding.status_words) or "-"),
            ("timestamp", str(finding.timestamp)), ("dump", str(finding.dump_path or "-"))]
    for rec in finding.records:
        info.append(("record", f"{rec.unit} task {rec.task_id} stream {rec.stream_id} "
                               f"status {rec.status} ({rec.path})"))
    rows = []
    for t in finding.inputs + finding.outputs:
        s = t.stats
        rows.append([tensor_name(finding.op, t.kind, t.index), t.dtype, str(t.shape), s.nan, s.pos_inf, s.neg_inf,
                     s.fp16_saturated, _num(s.min), _num(s.max), _num(s.mean)])
    tensors = Table(["tensor", "dtype", "shape", "nan", "+inf", "-inf", "±65504", "min", "max", "mean"], rows)
    blocks = [("", info), ("tensors", tensors)]
    golden = golden_stats_rows(session, finding.op)
    if golden is not None:
        blocks.append(("golden", golden))
    return Sections(title=f"[{position}] {finding.op} ({finding.type})", blocks=blocks,
                    data=finding.to_json())


PANELS["overflow"] = overflow_panel
