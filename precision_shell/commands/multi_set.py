"""``--ranks all|R,R`` and ``--steps all|S,S`` on ``vc``, ``vcs`` and ``ac`` (product.md §10).

Each selected (rank, step) dump set is compared or scanned by the same engine as a single set
(``compare_run.run_vc``, ``overflow.scan_overflow``), on the session's executor (a Dask cluster
with ``--scheduler``); the rows carry ``rank`` and ``step``. ``use`` still names the active set:
a level not given here keeps the active set's value. Rank = the dump tree's device folder, step =
its step folder (formats.md §5).
"""

from __future__ import annotations

import csv
import threading
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from precision_shell.atomic_write import write_atomic
from precision_shell.commands.results import Table
from precision_shell.commands.row_schema import conform
from precision_shell.errors import CommandError, UsageError
from precision_shell.formats.dump_names import escape_op_name
from precision_shell.model.findings import FindingCursor
from precision_shell.model.session import Session
from precision_shell.model.workspace import DumpSet, _natural


def _level(text: str) -> int | str:
    return int(text) if text.isdigit() else text


def _pick(text: str | None, available: list[str], current: str, what: str) -> list[str]:
    if text is None:
        return [current]
    if text.strip().lower() == "all":
        return available
    wanted = [w.strip() for w in text.split(",") if w.strip()]
    if not wanted:
        raise UsageError(f"--{what}s takes all or a list like 0,2")
    missing = [w for w in wanted if w not in available]
    if missing:
        raise CommandError(f"no {what} {', '.join(missing)} in the dump tree ({what}s: "
                           f"{', '.join(available) or 'none'}; see `info`)")
    return wanted


@dataclass
class Selection:
    sets: list[DumpSet]
    missing: list[str]          # "rank R step S: no dump folder" for selected pairs without one


def select_sets(session: Session, ranks: str | None, steps: str | None) -> Selection:
    """The dump sets of the active run and time at the selected ranks and steps."""
    active = session.active
    if active is None:
        raise CommandError("no NPU dump sets (see `info`)")
    sets = [s for s in session.workspace.dump_sets if s.run == active.run and s.time == active.time]
    devices = sorted({s.device for s in sets}, key=_natural)
    step_names = sorted({s.step for s in sets}, key=_natural)
    chosen, missing = [], []
    for step in _pick(steps, step_names, active.step, "step"):
        for device in _pick(ranks, devices, active.device, "rank"):
            here = [s for s in sets if (s.device, s.step) == (device, step)]
            if not here:
                missing.append(f"rank {device} step {step}: no dump folder in {active.run} time {active.time}")
                continue
            same_model = [s for s in here if s.model == active.model]
            chosen.append((same_model or here)[0])
    if not chosen:
        raise CommandError("no dump set at the selected ranks and steps: " + "; ".join(missing))
    return Selection(chosen, missing)


def selection_of(session: Session, args) -> Selection | None:
    """The --ranks/--steps selection, or None for the active set alone."""
    if getattr(args, "ranks", None) is None and getattr(args, "steps", None) is None:
        return None
    if getattr(args, "npu", None) or getattr(args, "against", None) or getattr(args, "golden", None) \
            or getattr(args, "file", None):
        raise UsageError("--ranks/--steps compare the workspace's dump tree with its golden run: "
                         "not with --npu, --golden, --against or -f")
    return select_sets(session, args.ranks, args.steps)


def compare_sets_table(session: Session, args):
    """``vc --ranks/--steps``: each set compared, one line each and the merged CSV."""
    from precision_shell.analysis.root_cause.graph import Criteria

    return _sets_table(session, args, Criteria(session.settings.threshold))


def vcs_sets_table(session: Session, args):
    """``vcs --ranks/--steps``: per set the first divergence, roots and failing ops."""
    from precision_shell.commands.compare_run import criteria_of

    criteria = criteria_of(session, args)
    if args.limit is not None and args.limit < 0:
        raise UsageError("-l must be 0 (all) or a positive number")
    if getattr(args, "plot", None) is not None:
        raise UsageError("vcs --plot draws one dump set: drop --ranks/--steps (see `use`)")
    return _sets_table(session, args, criteria)


def _sets_table(session: Session, args, criteria):
    done, merged, warnings = compare_sets(session, selection_of(session, args), getattr(args, "jobs", None))
    return rank_table(session, done, criteria, merged, warnings)


def session_executor(session: Session):
    from precision_shell.analysis.compare.executors import executor_for

    return executor_for(session.settings.scheduler)


def graph_mismatch(session: Session, dump_set: DumpSet, dumps) -> str | None:
    """A set whose dumps name ops mostly absent from the loaded graph was dumped from another
    graph: its compare would be a list of 'no golden' rows, so say it in one line."""
    graph = session.graph
    keys = set(dumps.by_key)
    if graph is None or not keys:
        return None
    known = {escape_op_name(name) for name in graph.ops}
    matched = len(keys & known)
    if matched * 2 < len(keys):
        return (f"rank {dump_set.device} step {dump_set.step}: only {matched} of {len(keys)} dumped "
                f"ops are in the loaded graph (dumped from another graph?)")
    return None


# ------------------------------------------------------------------------------------------------
# vc / vcs

@dataclass
class SetResult:
    dump_set: DumpSet
    result: Any                  # CompareResult


_SETS_IN_FLIGHT = 2   # sets compared at once: the next one's tasks fill the last one's idle tail


class _StopAwareBar:
    """The progress of one set compared in a runner thread: Ctrl-C reaches only the main thread,
    which sets ``stop``; the set's engine then sees a KeyboardInterrupt at its next step and
    cancels its futures, keeping its finished rows (as a Ctrl-C of one ``vc``)."""

    def __init__(self, stop: threading.Event):
        self.stop = stop

    def __call__(self, label: str, total: int) -> "_StopAwareBar":
        return self

    def __enter__(self) -> "_StopAwareBar":
        return self

    def __exit__(self, *exc) -> bool:
        return False

    def advance(self, n: int = 1) -> None:
        if self.stop.is_set():
            raise KeyboardInterrupt


def compare_sets(session: Session, selection: Selection, jobs: int | None) -> tuple[list[SetResult], Path, list[str]]:
    """``vc`` of each set (one vendor CSV each) and the merged CSV with Rank and Step columns.
    Sets are planned one after the other here and run ``_SETS_IN_FLIGHT`` at a time on one
    executor, so the cluster (or pool) has the next set's tasks while a set finishes."""
    from precision_shell.analysis.compare.engine import INLINE_BELOW_BYTES, _pool, default_workers
    from precision_shell.commands.compare_run import coverage_report, finish_vc, prepare_vc
    from precision_shell.model.dump_index import scan_dump_dir

    listed = [(s, scan_dump_dir(s.path, cache=session.cache)) for s in selection.sets]
    executor, own_pool = session_executor(session), None
    workers = jobs or default_workers()
    if executor is None and workers > 1 and sum(d.total_bytes for _, d in listed) >= INLINE_BELOW_BYTES:
        # one pool for every set: its start (~0.1 s per worker) is paid once, not per set
        executor = own_pool = _pool(workers)
    results: dict[int, SetResult] = {}
    warnings = list(selection.missing)
    stop = threading.Event()
    running: dict[Future, tuple[int, DumpSet]] = {}
    runners = ThreadPoolExecutor(max_workers=_SETS_IN_FLIGHT, thread_name_prefix="pshell-set")

    def collect(done, advance: bool = True) -> None:
        for fut in done:
            pos, dump_set = running.pop(fut)
            where = f"rank {dump_set.device} step {dump_set.step}"
            try:
                result = fut.result()
            except CommandError as exc:
                warnings.append(f"{where}: {exc}")
                continue
            results[pos] = SetResult(dump_set, result)
            warnings.extend(f"{where}: {w}" for w in coverage_report(session, result).warnings + result.problems)
            if advance:
                bar.advance(1)

    try:
        with session.progress("comparing dump sets", len(listed)) as bar:
            try:
                for pos, (dump_set, dumps) in enumerate(listed):
                    problem = graph_mismatch(session, dump_set, dumps)
                    if problem:
                        warnings.append(problem)
                    try:
                        prepared = prepare_vc(session, jobs=jobs, executor=executor, dump_set=dump_set, dumps=dumps)
                    except CommandError as exc:
                        warnings.append(f"rank {dump_set.device} step {dump_set.step}: {exc}")
                        continue
                    while len(running) >= _SETS_IN_FLIGHT:
                        collect(wait(running, return_when=FIRST_COMPLETED)[0])
                    running[runners.submit(finish_vc, session, prepared, _StopAwareBar(stop), False)] = (pos, dump_set)
                while running:
                    collect(wait(running, return_when=FIRST_COMPLETED)[0])
            except KeyboardInterrupt:
                stop.set()
                collect(wait(running)[0], advance=False)
    finally:
        runners.shutdown(wait=True)
        if own_pool is not None:
            own_pool.shutdown(wait=True, cancel_futures=True)
    done = [results[pos] for pos in sorted(results)]
    if stop.is_set():
        compared = {id(item.dump_set) for item in done}
        warnings += [f"rank {s.device} step {s.step}: not compared (interrupted)"
                     for s, _ in listed if id(s) not in compared]
    if not done:
        raise CommandError("nothing compared: " + "; ".join(warnings))
    merged = merge_csvs(done[0].result.csv_path.with_name(
        done[0].result.csv_path.name.split("_rank")[0] + "_merged.csv"),
        [(item.dump_set.device, item.dump_set.step, item.result.csv_path) for item in done])
    session.results["compare_sets"] = done
    return done, merged, warnings


def merge_csvs(path: Path, parts: list[tuple[str, str, Path]]) -> Path:
    """One CSV of the per-set CSVs ``(rank, step, csv path)``, with Rank and Step columns first
    (the framework ``--ranks`` compare writes its merged CSV with this too)."""
    def write(fh):
        out = csv.writer(fh, lineterminator="\n")
        header_written = False
        for rank, step, csv_path in parts:
            with open(csv_path, newline="", encoding="utf-8") as src:
                reader = csv.reader(src)
                header = next(reader, None)
                if header is None:
                    continue
                if not header_written:
                    out.writerow(["Rank", "Step"] + header)
                    header_written = True
                for row in reader:
                    out.writerow([rank, step] + row)
    write_atomic(path, write)
    return path


@dataclass
class RankLine:
    rank: str
    step: str
    first: str | None
    roots: list[str]            # the root ops' names, in execution order
    failing: int
    compared: int
    csv: str
    odd: bool = False

    def to_json(self) -> dict:
        return {"rank": _level(self.rank), "step": _level(self.step), "first_divergence": self.first,
                "roots": self.roots, "failing_ops": self.failing, "compared": self.compared,
                "odd": self.odd, "csv": self.csv}


def rank_table(session: Session, done: list[SetResult], criteria, merged: Path,
               warnings: list[str]) -> Table:
    """Per (rank, step): first divergence and root count; ranks whose first divergence is not
    the majority's (within their step) are flagged as the odd ones out. Sets the cursor on the
    merged failing-op list."""
    from precision_shell.analysis.root_cause.graph import find_suspects

    lines, merged_list = [], []
    for item in done:
        suspects = find_suspects(item.result, criteria, session.fusion)
        first = next((s.op for s in suspects if s.first), None)
        roots = [s.op for s in suspects if s.role == "root"]
        lines.append(RankLine(item.dump_set.device, item.dump_set.step, first, roots, len(suspects),
                              item.result.count_done()[1], str(item.result.csv_path)))
        merged_list += [(item.dump_set, s) for s in suspects]
    session.results["cursor"] = FindingCursor("compare_sets", merged_list)
    return sets_table(lines, criteria.threshold, merged, warnings, any(item.result.cancelled for item in done),
                      "`next` steps through the failing ops of every rank")


def sets_table(lines: list[RankLine], threshold: float, merged: Path, warnings: list[str], interrupted: bool,
               stepping: str) -> Table:
    """The per-set table of ``vcs --ranks`` (graph and framework dumps alike): ranks whose first
    divergence is not the majority's (within their step, of 3 or more) are the odd ones out."""
    odd_names = []
    for step in {line.step for line in lines}:
        same = [line for line in lines if line.step == step]
        counts = Counter(line.first for line in same)
        majority, votes = counts.most_common(1)[0]
        if len(same) >= 3 and votes * 2 > len(same):
            for line in same:
                line.odd = line.first != majority
                if line.odd:
                    odd_names.append(f"rank {line.rank} (step {line.step}: first divergence "
                                     f"{line.first or 'none'}, the others {majority})")
    rows = [[line.rank, line.step, line.first or "-", len(line.roots), line.failing, line.compared,
             "◀ odd rank out" if line.odd else ""] for line in lines]
    notes = [f"odd rank out: {', '.join(odd_names)}" if odd_names else "every rank diverges first at the same op",
             f"merged CSV: {merged}", stepping]
    return Table(["rank", "step", "first divergence", "roots", "failing", "compared", "odd"], rows,
                 title=f"{len(lines)} dump sets, threshold {threshold:g}",
                 json_rows=[line.to_json() for line in lines], notes=notes,
                 highlight={i for i, line in enumerate(lines) if line.odd},
                 findings=sum(line.failing for line in lines), warnings=warnings, interrupted=interrupted)


# ------------------------------------------------------------------------------------------------
# ac

def scan_sets(session: Session, selection: Selection, *, values_only: bool) -> tuple[list, list[str], bool]:
    """``ac`` of each set; every finding carries its rank and step. Returns (findings in time
    order, warnings, cancelled)."""
    from precision_shell.analysis.overflow.scan import scan_overflow
    from precision_shell.model.dump_index import scan_dump_dir

    executor = session_executor(session)
    findings, warnings, cancelled = [], list(selection.missing), False
    for dump_set in selection.sets:
        dumps = scan_dump_dir(dump_set.path, cache=session.cache)
        scan = scan_overflow(session, values=bool(dumps.op_files), opdebug=not values_only,
                             dump_set=dump_set, dumps=dumps, executor=executor)
        findings += scan.findings
        where = f"rank {dump_set.device} step {dump_set.step}"
        warnings += [f"{where}: {p}" for p in scan.problems]
        if scan.unreadable.total:
            warnings.append(f"{where}: unreadable files: {scan.unreadable.text(': ')}")
            warnings += [f"  {reason}" for _, reason in scan.unreadable.examples]
        if scan.cancelled:
            cancelled = True
            break
    findings.sort(key=lambda f: (f.timestamp, _natural(f.step), _natural(f.rank), f.graph_order))
    return findings, warnings, cancelled


def timeline_table(session: Session, selection: Selection, findings: list, warnings: list[str],
                   cancelled: bool, limit: int) -> Table:
    """The overflow timeline of every selected set, first overflow first, and a step x rank grid."""
    session.results["cursor"] = FindingCursor("overflow", findings)
    shown = findings if limit == 0 else findings[:limit]
    rows = [[pos, f.step, f.rank, f.op, f.type, f.source, f.role, f.timestamp]
            for pos, f in enumerate(shown, 1)]
    ranks = sorted({s.device for s in selection.sets}, key=_natural)
    steps = sorted({s.step for s in selection.sets}, key=_natural)
    counts = Counter((f.step, f.rank) for f in findings)
    grid = ["overflowing ops, step x rank:", "step  " + " ".join(f"{r:>4}" for r in ranks)]
    grid += [f"{s:<5} " + " ".join(f"{counts.get((s, r), 0):>4}" for r in ranks) for s in steps]
    notes = []
    if findings:
        first = findings[0]
        notes.append(f"first overflow: step {first.step}, rank {first.rank}, {first.op} ({first.source})")
    notes += grid
    if cancelled:
        notes.append("interrupted: the timeline covers what was scanned")
    json_rows = []
    first = next((f for f in findings if f.role == "producer"), None)
    for pos, f in enumerate(findings, 1):
        row = f.to_json(f is first)
        row["order"] = pos
        json_rows.append(row)
    json_rows = conform(json_rows, "overflow")
    return Table(["#", "step", "rank", "op", "type", "source", "role", "timestamp"], rows,
                 title=f"{len(findings)} overflowing ops in {len(selection.sets)} dump sets, in time order",
                 json_rows=json_rows, notes=notes, total=len(findings), highlight={0} if rows else set(),
                 findings=len(findings), interrupted=cancelled, warnings=warnings)
