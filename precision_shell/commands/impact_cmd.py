"""``impact [OP ...] [--to OP] [--together] [--max-ops N]``: for each root (default: the roots of
the last ``vcs``), the share of the final error that goes away when that op's outputs are made
golden and everything downstream is recomputed (the analysis: :mod:`precision_shell.analysis.impact`).
Graph-mode sessions and framework sessions (msprobe, capture) alike, through the run model."""

from __future__ import annotations

from typing import Any

from precision_shell.commands.framework_inspect import FRAMEWORK, variant
from precision_shell.commands.registry import arg, command
from precision_shell.commands.results import Table
from precision_shell.errors import CommandError, FormatError

_HELP_JSON = ("JSON (--format json): a row per root, then `together`: {op, measured (tensor names), "
              "error_before, error_after (relative L2 vs golden), share_removed (1 - after/before; 1 when "
              "only before is non-finite, null when undefined), unrecomputable (ops without a kernel: path "
              "cut there), recomputed, note, self_check, self_check_reliable}.")
_ARGS = [arg("op", nargs="*", complete="op", metavar="OP",
             help="ops whose outputs are made golden, each on its own (default: the roots of the last `vcs`, "
                  "which runs first when there is none)"),
         arg("--to", metavar="OP", complete="op",
             help="measure this op's outputs (e.g. the loss) instead of the network outputs downstream"),
         arg("--together", action="store_true", help="also all the ops together (always with several)"),
         arg("--max-ops", type=int, default=10_000, metavar="N",
             help="refuse a downstream path longer than N ops (default 10000)")]


def _vcs_roots(session: Any, notes: list[str]) -> list[str]:
    """The roots of the last ``vcs``; without one, ``vcs`` runs first (as the session's kind runs it)."""
    from precision_shell.commands.registry import REGISTRY

    found = session.results.get("vcs")
    if found is None:
        cmd = REGISTRY.for_session(REGISTRY.lookup("vcs"), session)
        cmd.handler(session, cmd.parse([]))
        found = session.results.get("vcs")
        if found is None:
            raise CommandError("impact: name the ops; `vcs` found no roots to default to")
        notes.append("no `vcs` yet, so it ran first: its roots are the ops substituted")
    suspects = getattr(found, "suspects", found)
    return [s.op for s in suspects if s.role == "root"]


def _num(value: float | None, fmt: str = "{:.4g}") -> str:
    return "-" if value is None else fmt.format(value)


def _bar(share: float | None, width: int = 20) -> str:
    if share is None:
        return ""
    filled = round(max(0.0, min(1.0, share)) * width)
    return "█" * filled + "·" * (width - filled)


def run_impact(session: Any, args: Any, run: Any, pairing: Any, load_golden) -> Table:
    from precision_shell.analysis.impact import Impact, ImpactError, impact_rows, in_scope, reliable

    if args.max_ops < 1:
        raise CommandError("impact --max-ops: give a positive number of ops")
    if not any(t.has_data for op in run.ops for t in op.outputs):
        raise CommandError(f"impact recomputes values: {run.path} has statistics only (dump with msprobe "
                           "task 'tensor')")
    ran: list[str] = []
    given = list(args.op) or _vcs_roots(session, ran)
    problems: list[str] = []
    roots: list[str] = []
    left_out = 0
    for name in given:
        try:
            op = run.op(name)
        except CommandError as exc:
            problems.append(f"{name}: {exc}")
            continue
        if not in_scope(op):
            if args.op:
                problems.append(f"{op.name}: a {op.kind if op.kind != 'forward' else 'module'} entry; "
                                "impact substitutes kernels and forward API calls")
            else:
                left_out += 1
            continue
        if op.name not in roots:
            roots.append(op.name)
    to = run.op(args.to).name if args.to else None
    if not roots:
        raise CommandError("impact: no op to substitute" + (f" ({problems[0]})" if problems else ""))
    rows, check, interrupted = [], None, False
    with session.progress("recomputing", None) as bar:
        impact = Impact(run, pairing, load_golden, max_ops=args.max_ops, progress=lambda n: bar.advance(1))
        try:
            for row in impact_rows(impact, roots, to, args.together, problems):
                rows.append(row)
            if rows:
                check = impact.self_check([r for r in roots if any(r in x.roots for x in rows)], to)
                check.reliable = reliable(check, rows)
        except ImpactError as exc:
            problems.append(str(exc))
        except FormatError as exc:
            problems.append(f"impact: {exc}")
        except KeyboardInterrupt:
            interrupted = True
    table = _table(rows, check, impact.unrecomputable, problems, left_out, interrupted)
    table.notes += ran
    session.results["impact"] = table      # the report's bars
    return table


def _table(rows, check, unrecomputable, problems, left_out, interrupted) -> Table:
    def key(r):
        return (r.op == "together", -(r.share_removed if r.share_removed is not None else -1e300))
    rows = sorted(rows, key=key)
    lines = [[r.op, _num(r.error_before), _num(r.error_after), _num(r.share_removed, "{:.1%}"),
              _bar(r.share_removed), ", ".join(r.measured[:3]) + (" ..." if len(r.measured) > 3 else ""),
              ", ".join(r.unrecomputable) or "-"] for r in rows]
    check_error = None if check is None else check.error
    reliable = None if check is None else check.reliable
    json_rows = [{"op": r.op, "roots": r.roots, "measured": r.measured, "error_before": r.error_before,
                  "error_after": r.error_after, "share_removed": r.share_removed,
                  "unrecomputable": r.unrecomputable, "recomputed": r.recomputed, "note": r.note or None,
                  "self_check": check_error, "self_check_reliable": reliable} for r in rows]
    notes = ["error: relative L2 vs golden of the measured tensors; share removed = 1 - after/before"]
    notes += [f"{r.op}: {r.note}" for r in rows if r.note]
    for op, why in unrecomputable.items():
        notes.append(f"unrecomputable {op}: {why}")
    if check is not None:
        verdict = "faithful" if check.reliable else ("UNRELIABLE: the recomputation is as far from the NPU dumps "
                                                     "as the NPU from golden; measure a wider tensor (--to)")
        notes.append(f"self_check: recomputed with nothing substituted vs the NPU dumps: relative L2 "
                     f"{_num(check.error)} ({verdict})")
    if left_out:
        notes.append(f"{left_out} root(s) of the last vcs left out: module or backward entries")
    return Table(["op", "error before", "error after", "share removed", "bar", "measured", "unrecomputable"],
                 lines, title=f"impact: {len(rows)} row(s), by share removed", json_rows=json_rows,
                 notes=notes, warnings=problems, interrupted=interrupted,
                 highlight={0} if rows and rows[0].op != "together" else set())


@command("impact",
         summary="How much of the final error each root explains: its outputs made golden, every op "
                 "downstream recomputed with replay's kernels at the NPU's dtypes, the network outputs (or "
                 "--to OP) measured against golden before and after; per root and together, sorted by the "
                 "share removed; ops without a kernel named (path cut there); a self-check of the "
                 "recomputation. " + _HELP_JSON,
         example="vcs; impact\nimpact ln1/add_1/LayerNorm loss_scale/Mul\n"
                 "impact ln1/add_1/LayerNorm --to probs/Softmax\n"
                 "impact --format json",
         args=_ARGS)
def impact(session: Any, args: Any) -> Table:
    from precision_shell.formats.golden_npy import load_npy

    if session.golden.folder is None:
        raise CommandError("impact needs golden dumps: none found in this workspace")
    return run_impact(session, args, session.run, session.pairing(), lambda t: load_npy(t.path))


@variant(FRAMEWORK, "impact",
         example="vcs; impact\nimpact Functional.softmax.0.forward --to Functional.cross_entropy.0.forward")
def framework_impact(session: Any, args: Any) -> Table:
    from precision_shell.commands.framework_replay import golden_side

    pairing, golden_run = golden_side(session)
    if pairing is None:
        raise CommandError("impact needs a golden dump: start with `pshell TARGET --golden GOLDEN`")
    return run_impact(session, args, session.run, pairing, lambda t: golden_run.load(t.name))
