"""``vc`` / ``vcs`` with ``--ranks all|R,R`` and ``--steps all|S,S`` on msprobe dumps: several
(step, rank) ``dump.json`` folders of the target at once, as graph mode does (:mod:`.multi_set`).

Each selected target folder is compared with its golden folder (same step and rank, else the
same rank name, else the golden's only rank: :meth:`FrameworkSession.golden_for`) exactly as a
single ``vc`` compares the active one; each writes its own CSV in msprobe's layout, and a merged
CSV adds Rank and Step columns. ``vcs`` gives per folder the first divergence, the roots, the
failing entries and the odd rank out (:func:`.multi_set.sets_table`). The active selection
(``use``), its compare result and ``next``'s list are left as they were; a folder that cannot be
compared (no golden rank) is one warning and the others go on.
"""

from __future__ import annotations

import os

from precision_shell.commands.framework_compare_run import run_compare
from precision_shell.commands.multi_set import RankLine, merge_csvs, sets_table
from precision_shell.commands.registry import arg
from precision_shell.commands.results import Message, Table
from precision_shell.commands.row_schema import conform
from precision_shell.errors import CommandError, UsageError

SET_ARGS = [arg("--ranks", metavar="all|R,R",
                help="these rank folders (rank0, 0, proc123) at once, each its own CSV plus a merged one "
                     "(default: the active one, see `use`)"),
            arg("--steps", metavar="all|S,S", help="these step folders (step numbers) at once")]


def wants_sets(args) -> bool:
    return getattr(args, "ranks", None) is not None or getattr(args, "steps", None) is not None


def _names(text: str, what: str) -> list[str]:
    names = [w.strip() for w in text.split(",") if w.strip()]
    if not names:
        raise UsageError(f"--{what} takes all or a list like 0,2")
    return names


def select_ranks(session, ranks: str | None, steps: str | None) -> list:
    """The target's rank folders at the selected steps and ranks, in step then rank order."""
    current = session.selected.location
    all_steps = session.target.steps
    if steps is None:
        chosen_steps = [current.step]
    elif steps.strip().lower() == "all":
        chosen_steps = all_steps
    else:
        known = {str(s): s for s in all_steps}
        wanted = _names(steps, "steps")
        missing = [w for w in wanted if w not in known]
        if missing:
            raise CommandError(f"no step {', '.join(missing)} in {session.target.root} (steps: "
                               f"{', '.join(map(str, all_steps))}; see `info`)")
        chosen_steps = [known[w] for w in wanted]
    names = session.target.rank_names
    if ranks is None:
        chosen = [current.rank]
    elif ranks.strip().lower() == "all":
        chosen = names
    else:
        chosen = []
        for w in _names(ranks, "ranks"):
            found = next((n for n in (w, f"rank{w}", f"proc{w}") if n in names), None)
            if found is None:
                raise CommandError(f"no rank {w} in {session.target.root} (ranks: {', '.join(names)}; see `info`)")
            chosen.append(found)
    picked = [r for step in chosen_steps for r in session.target.ranks
              if r.location.step == step and r.location.rank in chosen]
    if not picked:
        raise CommandError("no dump.json folder at the selected steps and ranks (see `info`)")
    return picked


def _where(rank) -> str:
    loc = rank.location
    return f"step {'-' if loc.step is None else loc.step} {loc.rank}"


def compare_ranks(session, ranks: list) -> tuple[list, str, list[str]]:
    """``vc`` of each folder: [(rank dump, FrameworkCompare)], the merged CSV, warnings."""
    done, warnings = [], []
    with session.progress("comparing dump folders", len(ranks)) as bar:
        for rank in ranks:
            try:
                found = run_compare(session, rank)
            except CommandError as exc:
                warnings.append(f"{_where(rank)}: {exc}")
                continue
            finally:
                bar.advance()
            done.append((rank, found))
            warnings += [f"{_where(rank)}: {p}" for p in found.problems]
    if not done:
        raise CommandError("nothing compared: " + "; ".join(warnings))
    first = done[0][1].csv_path
    merged = merge_csvs(first.with_name("compare_result_merged.csv"),
                        [(rank.location.rank, "-" if rank.location.step is None else str(rank.location.step),
                          found.csv_path) for rank, found in done])
    return done, str(merged), warnings


def compare_table(session, args) -> Message:
    done, merged, warnings = compare_ranks(session, select_ranks(session, args.ranks, args.steps))
    lines = [f"{_where(rank)}: {found.mode} mode, {found.row_count:,} rows ({found.compared:,} compared), "
             f"CSV {found.csv_path}" for rank, found in done]
    lines.append(f"merged CSV: {merged}")
    data = {"sets": [{"step": rank.location.step, "rank": rank.location.rank, "mode": found.mode,
                      "tensors": found.row_count, "compared": found.compared, "csv": str(found.csv_path)}
                     for rank, found in done], "merged_csv": merged}
    return Message(lines, data=data, warnings=warnings)


def suspects_table(session, args, threshold: float, tolerance: float) -> Table:
    from precision_shell.commands.finding_list import column
    from precision_shell.commands.framework_suspects import judge_compare

    done, merged, warnings = compare_ranks(session, select_ranks(session, args.ranks, args.steps))
    lines = []
    for rank, found in done:
        if found.mode == "md5":
            warnings.append(f"{_where(rank)}: md5 mode: no values or statistics to find roots with")
            continue
        suspects, _ = judge_compare(session, rank, found, threshold, args.backward, tolerance)
        roles, ops = column(suspects, "roles", "role"), column(suspects, "ops", "op")    # no suspect objects
        roots = [op for op, role in zip(ops, roles) if role == "root"]
        lines.append(RankLine(rank.location.rank, "-" if rank.location.step is None else str(rank.location.step),
                              roots[0] if roots else None, roots, len(suspects), found.compared,
                              str(found.csv_path)))
    if not lines:
        raise CommandError("vcs needs tensor or statistics dumps on both sides: " + "; ".join(warnings))
    return sets_table(lines, threshold, merged, warnings, False,
                      "`use --rank R` then `vcs` steps through one rank's failing entries")


def overflow_row(f, rank, run) -> dict:
    """An ``ac`` finding as the overflow row schema has it (commands/row_schema): with its
    folder's rank and step, the API type and where its verdict came from."""
    loc = rank.location
    row = f.to_json()
    row.update(rank=loc.rank, step=loc.step, type=run.op(f.op).type, dump=os.path.join(run.path, "dump.json"),
               source=next((c.source for c in f.outputs if c.bad), None))
    return conform([row], "overflow")[0]


def overflow_table(session, args, limit: int) -> Table:
    """``ac --ranks/--steps``: each selected folder scanned as ``ac`` scans one, the findings
    in step, rank and dump order, each row with its rank and step; a step x rank grid of counts."""
    from collections import Counter

    from precision_shell.analysis.overflow.run_scan import scan_framework_overflow

    ranks = select_ranks(session, args.ranks, args.steps)
    rows, json_rows, warnings, firsts = [], [], [], []
    counts: Counter = Counter()
    for rank in ranks:
        loc = rank.location
        step = "-" if loc.step is None else str(loc.step)
        run = session.run_of(rank)
        scan = scan_framework_overflow(run, session.progress)
        warnings += [f"{_where(rank)}: {p}" for p in scan.problems]
        counts[(step, loc.rank)] = len(scan.findings)
        if scan.first_producer is not None:
            firsts.append(f"step {step} {loc.rank}: {scan.first_producer.op}")
        for f in scan.findings:
            row = overflow_row(f, rank, run)
            row["order"] = len(json_rows) + 1      # in the whole list; the entry's dump order is in `ni`
            json_rows.append(row)
            rows.append([len(json_rows), step, loc.rank, f.op, f.kind, f.role + ("  ◀ first producer" if f.first else ""),
                         ", ".join(run.tensor(c.tensor).printed() for c in f.outputs if c.bad)])
    names = list(dict.fromkeys(r.location.rank for r in ranks))
    steps = list(dict.fromkeys("-" if r.location.step is None else str(r.location.step) for r in ranks))
    grid = ["overflowing entries, step x rank:", "step  " + " ".join(f"{n:>6}" for n in names)]
    grid += [f"{s:<5} " + " ".join(f"{counts.get((s, n), 0):>6}" for n in names) for s in steps]
    notes = [("first producer per folder: " + "; ".join(firsts)) if firsts else "no folder overflows", *grid]
    shown = rows if limit == 0 else rows[:limit]
    return Table(["#", "step", "rank", "entry", "kind", "role", "bad outputs"], shown,
                 title=f"{len(json_rows)} overflowing entries in {len(ranks)} dump folders, in step, rank "
                       f"and dump order", json_rows=json_rows, notes=notes, total=len(rows),
                 findings=len(json_rows), warnings=warnings)