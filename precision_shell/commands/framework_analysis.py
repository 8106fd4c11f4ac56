"""Framework-dump variants of ``vc`` and ``ac``, and the panel ``next`` shows for ``ac``'s
findings (``vcs`` and its panel: :mod:`.framework_vcs`; ``export``: :mod:`.framework_exports`).

``vc`` pairs the target with the golden as ``msprobe compare`` does and writes the CSV in
msprobe's layout (tensor, statistics or md5 mode, from what both sides dumped) into the output
folder; ``vcs`` turns the tensor compare into roots and propagated entries over the dataflow
graph; ``ac`` scans for NaN/Inf. The work is in ``analysis/framework_*``.
"""

from __future__ import annotations

from typing import Any, Callable

from precision_shell.commands.framework_compare_run import run_compare
from precision_shell.commands.framework_inspect import FRAMEWORK, variant
from precision_shell.commands.framework_sets import SET_ARGS, compare_table, overflow_row, overflow_table, wants_sets
from precision_shell.commands.framework_vcs import COMPARE_CURSOR, _api_type, _count    # and the compare panel
from precision_shell.commands.inspect_cmd import check_limit
from precision_shell.commands.registry import arg
from precision_shell.commands.finding_list import arrange, follow, limit_arg, list_args
from precision_shell.commands.results import Marked, Message, Sections, Table
from precision_shell.commands.stepping import PANELS

OVERFLOW_CURSOR = "framework overflow"



@variant(FRAMEWORK, "compare", summary="Compare the target dump with the golden as msprobe compare "
                                       "does (tensor, statistics or md5 mode); CSV in msprobe's layout.",
         example="vc\nvc --fuzzy\nvc; vcs\nvc --ranks all",
         args=[arg("-fm", "--fuzzy", action="store_true",
                   help="pair by names without call numbers, in dump order (msprobe -fm)")] + SET_ARGS)
def compare(session, args) -> Message:
    session.fuzzy = args.fuzzy
    if wants_sets(args):
        return compare_table(session, args)
    found = run_compare(session)
    columns = found.columns      # statistics mode: counted on the columns, no row objects
    if columns is not None:
        pairing_mode, paired, ops, golden_only = columns.mode, columns.paired, columns.entry_count, columns.golden_only
        problems = columns.entry_problems
    else:
        pairing = found.pairing
        pairing_mode, ops, golden_only = pairing.mode, len(pairing.entries), len(pairing.golden_only)
        paired = sum(1 for p in pairing.pairs if p.golden is not None)
        problems = [f"{e.entry}: {'; '.join(e.problems)}" for e in pairing.entries if e.problems]
    coverage = found.coverage
    lines = [f"{session.target.root} vs {session.golden_dump.root}: {found.mode} mode, "
             f"{_count(found.row_count, 'row')} ({paired:,} paired, {found.compared:,} compared) "
             f"in {found.seconds:.2f} s", coverage.summary_line()]
    data: dict[str, Any] = {"mode": found.mode, "pairing": pairing_mode, "ops": ops,
                            "tensors": found.row_count, "paired": paired, "compared": found.compared,
                            "golden_only": golden_only, "csv": str(found.csv_path),
                            "seconds": round(found.seconds, 4), "problems": found.problems,
                            "entry_problems": problems, "coverage": coverage.to_json()}
    if found.mode == "tensor":
        from precision_shell.analysis.compare.msprobe.engine import is_failing

        threshold = session.settings.threshold
        failing = {r.pair.target.entry.name: r.pair.target.entry.kind for r in found.rows   # by output
                   if r.pair.target.state in ("output", "parameters_grad") and is_failing(r.metrics, threshold)}
        forward = sum(1 for kind in failing.values() if kind == "forward")
        lines.append(f"failing (cosine <= {threshold:g} or NaN): {_count(len(failing), 'entry')}, {forward:,} "
                     f"forward" + ("; `vcs` lists their roots and propagated (`--backward`: all)"
                                   if failing else ""))
        data.update(failing_ops=len(failing), failing_forward=forward, threshold=threshold)
        from precision_shell.analysis.root_cause.run import find_framework_suspects

        # the cursor follows the newest compare: `next` walks its failing entries
        replaced = follow(session, COMPARE_CURSOR, find_framework_suspects(session.run, found.rows, threshold),
                          "the failing entries of this compare")
        if replaced:
            lines.append(replaced)
    elif found.mode == "statistics":
        lines.append("statistics mode: `vcs` judges each output's Max, Min and Norm against the golden's "
                     "(--stat-tolerance, default 0.1) for roots and propagated")
    elif found.mode == "md5":
        different = sum(1 for r in found.rows if r.md5_equal is False and r.pair.golden is not None)
        lines.append(f"md5: {_count(different, 'row')} differ")
        data["different"] = different
    if golden_only:
        lines.append(f"{_count(golden_only, 'golden row')} without a target row")
    if problems:
        lines.append(f"{_count(len(problems), 'entry')} with pairing problems (first: {problems[0]})")
    lines.append(f"CSV: {found.csv_path}")
    return Message(lines, data=data, warnings=found.problems,
                   unjudged=None if found.compared else "no tensor pair compared")



# --- ac ------------------------------------------------------------------------------------------

def _check_text(run, c) -> str:
    # the name, then what is wrong: a name followed by ":" would not paste back
    name = run.tensor(c.tensor).printed()
    if c.nan is None:
        return f"{name}  nan/inf ({c.source})"
    parts = [f"{n} {w}" for n, w in ((c.nan, "nan"), (c.pos_inf, "+inf"), (c.neg_inf, "-inf")) if n]
    return f"{name}  {', '.join(parts)}"


def _check_count(*fields: str) -> Callable[[Any], Any]:
    """A count over the finding's bad outputs; None when they were judged from statistics."""
    def count(f):
        values = [getattr(c, name) for c in f.outputs if c.bad for name in fields]
        return None if any(v is None for v in values) else sum(values)
    return count


_OVERFLOW_KEYS = {"order": lambda f: f.index, "nan": _check_count("nan"), "inf": _check_count("pos_inf", "neg_inf"),
                  "pos_inf": _check_count("pos_inf"), "neg_inf": _check_count("neg_inf")}


@variant(FRAMEWORK, "overflow", summary="NaN/Inf scan of the target's entries (values, or statistics "
                                        "when only statistics were dumped); producer or propagated.",
         example="ac\nac -l 0\nac; next\nac --sort -nan --type linear\nac --ranks all --steps all",
         args=[limit_arg("producers"),
               arg("--all", action="store_true", help="show every finding (same as -l 0)")] + SET_ARGS
         + list_args("order, or a count over the bad outputs: nan, inf, pos_inf, neg_inf"))
def overflow(session, args) -> Table:
    from precision_shell.analysis.overflow.run_scan import scan_framework_overflow

    limit = 0 if args.all else check_limit(args.limit, session)
    if wants_sets(args):
        return overflow_table(session, args, limit)
    run = session.run
    scan = scan_framework_overflow(run, session.progress)
    view = arrange(scan.findings, args, keys=_OVERFLOW_KEYS, type_of=lambda f: _api_type(f.op), limit=limit)
    session.results["overflow"] = scan
    replaced = follow(session, OVERFLOW_CURSOR, view.items, "this list")
    rows, highlight = [], set()
    for pos in view.shown:
        f = view.items[pos]
        rows.append([pos + 1, f.index, f.op, f.kind, Marked(f.role, "◀ first producer" if f.first else ""),
                     " | ".join(_check_text(run, c) for c in f.outputs if c.bad)])
        if f.first:
            highlight.add(len(rows) - 1)
    notes = [replaced] if replaced else []
    hints = ["`next`/`goto #` step through the list with each entry's tensors"] if view.items else []
    title = (f"{_count(len(scan.findings), 'overflowing entry')} "
             f"({scan.from_values:,} tensors judged from their values, "
             f"{scan.tensors - scan.from_values:,} from their statistics), {view.what}")
    return Table(["#", "order", "entry", "kind", "role", "outputs"], rows, title=title,
                 json_rows=[overflow_row(f, session.selected, run) for f in view.items], notes=notes,
                 total=len(view.items), more=view.more, highlight=highlight, findings=len(scan.findings),
                 warnings=scan.problems,
                 hints=hints,
                 unjudged=f"{_count(len(scan.problems), 'file')} unreadable" if scan.problems else None)


def _overflow_panel(session, f, position: str) -> Sections:
    info = [("role", f.role + ("  (first producer)" if f.first else "")), ("kind", f.kind),
            ("modules", " > ".join(f.modules) or "-")]
    rows = [[session.run.tensor(c.tensor).printed(), "-" if c.nan is None else c.nan, "-" if c.pos_inf is None else c.pos_inf,
             "-" if c.neg_inf is None else c.neg_inf, "BAD" if c.bad else "", c.source]
            for c in f.inputs + f.outputs]
    return Sections(title=f"[{position}] {f.op} ({f.kind})",
                    blocks=[("", info), ("tensors", Table(["tensor", "nan", "+inf", "-inf", "", "from"], rows))],
                    data=f.to_json())


PANELS[OVERFLOW_CURSOR] = _overflow_panel
