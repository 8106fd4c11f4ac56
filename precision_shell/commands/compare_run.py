"""What ``compare``/``vc``, ``vcs`` and the compare panel do (registered in compare_cmd, which
imports this module on first use: numpy and the compare engine stay out of start-up; ``cp`` is
in compare_tensors_run).

``vc`` runs the whole-network compare and writes the vendor-layout CSV; ``vcs`` turns the result
(or vendor CSVs) into the failing-op list with root causes and sets the finding cursor, so
``next`` walks it; ``export suspects|compare`` (compare_exports) writes it for the team.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from precision_shell.analysis.compare.engine import (
    CompareResult, default_workers, result_from_csv, run_compare, write_vendor_csv,
)
from precision_shell.analysis.compare.mapping import golden_plan_steps, plan_golden_compare, plan_npu_compare
from precision_shell.analysis.compare.coverage import Coverage
from precision_shell.analysis.root_cause.graph import (
    Criteria, Suspect, SuspectList, find_suspects, parse_condition,
)
from precision_shell.commands.finding_list import ListView, arrange, follow
from precision_shell.commands.results import Marked, Message, Sections, Table
from precision_shell.commands.stepping import golden_stats_rows
from precision_shell.errors import CommandError, UsageError
from precision_shell.model.dump_index import DumpIndex, scan_dump_dir
from precision_shell.model.golden_index import scan_golden_dir
from precision_shell.model.session import Session
from precision_shell.model.tensor_ref import golden_name_of, name_of

# Executor factory for ``vc``: None = the built-in process pool. A Dask client (``--scheduler``)
# or a test sets ``EXECUTOR_FACTORY = lambda workers: executor``.
EXECUTOR_FACTORY: Callable[[int], Any] | None = None


# ------------------------------------------------------------------------------------------------
# vc

def _other_run(session: Session, run: str) -> tuple[DumpIndex, str]:
    active = session.active
    sets = [s for s in session.workspace.dump_sets if s.run == run]
    if not sets:
        runs = ", ".join(session.workspace.runs) or "none"
        raise CommandError(f"no run {run!r} to compare against (runs: {runs})")
    if active is not None and active.run == run:
        raise CommandError(f"{run} is the active run; `use --run` another run or pick another --against")
    if active is not None:
        same = [s for s in sets if (s.device, s.step) == (active.device, active.step)]
        if not same:
            raise CommandError(f"run {run} has no dumps of device {active.device or '-'} step "
                               f"{active.step or '-'} (see `info`)")
        sets = same
    chosen = max(sets, key=lambda s: s.time)
    return scan_dump_dir(chosen.path), chosen.label


@dataclass
class PreparedCompare:
    """A planned ``vc``: what ``finish_vc`` runs (possibly in another thread)."""

    plan: Any
    path: Path
    workers: int
    executor: Any
    planning: Any = None        # the generator still filling ``plan`` (prepare_vc's ``overlap``)
    estimated_bytes: int = 0    # then the likely bytes of the compare (sizes its tasks)


def run_vc(session: Session, *, npu: str | None = None, golden: str | None = None,
           against: str | None = None, jobs: int | None = None, executor: Any = None,
           dump_set: Any = None, dumps: DumpIndex | None = None) -> CompareResult:
    """Plan, run, keep (``session.results["compare"]``) and write the CSV of a whole-network compare.
    ``dump_set``/``dumps``: one set of a ``--ranks``/``--steps`` selection instead of the active
    one (its CSV is named by rank and step; the session's result stays the active set's)."""
    prepared = prepare_vc(session, npu=npu, golden=golden, against=against, jobs=jobs,
                          executor=executor, dump_set=dump_set, dumps=dumps, overlap=True)
    return finish_vc(session, prepared, session.progress, keep=dump_set is None)


def prepare_vc(session: Session, *, npu: str | None = None, golden: str | None = None,
               against: str | None = None, jobs: int | None = None, executor: Any = None,
               dump_set: Any = None, dumps: DumpIndex | None = None, overlap: bool = False) -> PreparedCompare:
    """The plan of a ``vc``, its CSV's place (checked) and its executor; nothing runs yet.
    ``overlap``: NPU vs golden, the plan is filled while ``finish_vc`` compares (in this thread)."""
    if jobs is not None and jobs < 1:
        raise UsageError("-j must be 1 or more")
    if dump_set is not None:
        npu_label = dump_set.label
    elif npu:
        folder = Path(npu).expanduser()
        if not folder.is_dir():
            raise CommandError(f"{folder}: NPU dump folder does not exist")
        dumps, npu_label = scan_dump_dir(folder, recursive=True), str(folder)
    else:
        dumps = session.dumps
        npu_label = session.active.label if session.active else "npu"
    if dump_set is not None and dumps is None:
        dumps = scan_dump_dir(dump_set.path, cache=session.cache)
    if not dumps.op_files:
        raise CommandError("no NPU dump files to compare (see `info`; pass --npu DIR)")
    if against:
        other, label = _other_run(session, against)
        plan = plan_npu_compare(session.graph, dumps, other, left_label=npu_label, right_label=label)
    else:
        if golden and not Path(golden).expanduser().is_dir():
            raise CommandError(f"{golden}: golden folder does not exist")
        index = scan_golden_dir(Path(golden).expanduser()) if golden else session.golden
        if index.folder is None or not len(index):
            raise CommandError("no golden .npy files (tf/dump/*.npy): pass --golden DIR, or compare "
                               "two NPU runs with --against RUN")
        if overlap:
            plan, planning = golden_plan_steps(session.graph, dumps, index, npu_label=npu_label,
                                               golden_label=str(index.folder))
            estimated = dumps.total_bytes + index.total_bytes
        else:
            plan = plan_golden_compare(session.graph, dumps, index, npu_label=npu_label,
                                       golden_label=str(index.folder))
        if session.graph is None:
            plan.problems.append("no graph loaded: outputs are mapped by the dumps' original_op, "
                                 "inputs cannot be traced to their producers")
    # the CSV's place is checked before the compare runs: a refused output folder costs no wait
    stamp = time.strftime("%Y%m%d%H%M%S")   # (local time, as datetime.now() gave, without importing datetime)
    where = f"_rank{dump_set.device}_step{dump_set.step}" if dump_set is not None else ""
    path = session.output_path(None, f"compare/result_{stamp}{where}.csv")
    workers = jobs or default_workers()
    if executor is None and session.settings.scheduler:
        from precision_shell.analysis.compare.executors import executor_for

        executor = executor_for(session.settings.scheduler)
    if executor is None and EXECUTOR_FACTORY is not None and workers > 1:
        executor = EXECUTOR_FACTORY(workers)
    if executor is not None and jobs is None:
        workers = getattr(executor, "_max_workers", workers)
    if against or not overlap:
        return PreparedCompare(plan, path, workers, executor)
    return PreparedCompare(plan, path, workers, executor, planning, estimated)


def finish_vc(session: Session, prepared: PreparedCompare, progress: Any, keep: bool = True) -> CompareResult:
    """Run a prepared ``vc`` and write its CSV; ``keep``: it becomes the session's compare."""
    result = run_compare(prepared.plan, progress=progress, workers=prepared.workers,
                         executor=prepared.executor, planning=prepared.planning,
                         estimated_bytes=prepared.estimated_bytes)
    path = prepared.path
    if result.cancelled:   # Ctrl-C: the file's name says it is not the whole compare
        path = path.with_name(f"{path.stem}_partial{path.suffix}")
    write_vendor_csv(path, result)
    result.csv_path = path
    if not keep:
        return result
    session.results["compare"] = result
    session.results.pop("vcs", None)   # suspects of an older compare no longer apply
    return result


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'s' * (n != 1)}"


_MORE_IN_CSV = "CompareFailReason in the CSV"


@dataclass
class CoverageReport:
    """The coverage of a compare as ``vc``/``vcs`` show it: the summary line and its first files
    are warnings when something with a counterpart was not compared, notes otherwise."""

    coverage: Coverage
    notes: list[str]
    warnings: list[str]
    gate: str | None            # why a CI gate cannot trust the compare


def coverage_report(session: Session, result: CompareResult) -> CoverageReport:
    cov = result.coverage()
    lines = [cov.summary_line()] + cov.example_lines(_MORE_IN_CSV)
    gate = cov.gate(session.settings.min_coverage)
    if cov.hurt or gate:
        return CoverageReport(cov, [], lines, gate)
    return CoverageReport(cov, lines, [], gate)


def vc_summary(session: Session, result: CompareResult) -> Message:
    done, compared = result.count_done()
    criteria = Criteria(session.settings.threshold)
    failing = find_suspects(result, criteria, session.fusion)
    roots = [s for s in failing if s.role == "root"]
    what = "NPU vs golden" if result.mode == "golden" else f"{result.npu_label} vs {result.golden_label}"
    report = coverage_report(session, result)
    lines = [f"{what}: {_count(len(result.ops), 'op')} in {result.elapsed:.2f} s "
             f"({result.mb_per_s:.0f} MB/s, {_count(result.workers, 'worker')})"] + report.notes
    lines.append(f"failing (cosine <= {criteria.threshold:g} or NaN): {_count(len(failing), 'op')}, "
                 f"{_count(len(roots), 'root')}" + ("; `vcs` lists them" if failing else ""))
    lines.append(f"CSV: {result.csv_path}")
    # the cursor follows the newest compare: `next` walks its failing ops, not an older list's
    replaced = follow(session, "compare", failing, "the failing ops of this compare")
    if replaced:
        lines.append(replaced)
    data = {"mode": result.mode, "ops": len(result.ops), "tensors": len(result.rows),
            "compared": compared, "not_compared": done - compared,
            "failing_ops": len(failing), "roots": len(roots), "threshold": criteria.threshold,
            "csv": str(result.csv_path) if result.csv_path else None,
            "seconds": round(result.elapsed, 4), "mb_per_s": round(result.mb_per_s, 1),
            "workers": result.workers, "cancelled": result.cancelled, "problems": result.problems,
            "coverage": report.coverage.to_json(), "unjudged": report.gate}
    # an interrupted compare says so once: in result.problems, with how much was compared
    return Message(lines, data=data, interrupted=result.cancelled,
                   warnings=report.warnings + result.problems, unjudged=report.gate)


def compare(session: Session, args) -> Message:
    result = run_vc(session, npu=args.npu, golden=args.golden, against=args.against, jobs=args.jobs)
    return vc_summary(session, result)


# ------------------------------------------------------------------------------------------------
# vcs

def _cos_text(t) -> str:
    if not t.compared:
        return "-"
    c = t.metrics.cosine
    return "nan" if c != c else f"{c:.6f}"


def _short_list(names: list[str], keep: int = 2) -> str:
    return ", ".join(names[:keep]) + (f" +{len(names) - keep}" if len(names) > keep else "")


def _metric(name: str) -> Callable[[Suspect], Any]:
    return lambda s: getattr(s.worst.metrics, name) if s.worst.compared else None


# --sort keys: execution order and every metric of the row's output (excess: replay_run)
SORT_KEYS: dict[str, Callable[[Suspect], Any]] = {"order": lambda s: s.order, **{
    key: _metric(key) for key in ("cosine", "max_abs_error", "mean_abs_error", "rmse", "max_relative_error",
                                  "mean_relative_error", "accumulated_relative_error",
                                  "relative_euclidean_distance", "kl_divergence",
                                  "one_thousandth_err_ratio", "five_thousandths_err_ratio")}}


def suspects_table(found: SuspectList, view: ListView | None, problems: list[str], info: list[str],
                   report: CoverageReport) -> Table:
    """The vcs list: ``view`` is the sorted, filtered and cut list (None: all, in order)."""
    suspects = found.suspects
    view = view or ListView(suspects, list(range(len(suspects))), None)
    rows, highlight = [], set()
    for pos in view.shown:
        s = view.items[pos]
        mark = "◀ first divergence" if s.first else ""
        inputs = ", ".join(f"in{t.index} {_cos_text(t)}" for t in s.inputs) or "-"
        fusion = f"{'+'.join(s.passes)}" if s.fused and s.passes else ""
        rows.append([pos + 1, s.order, s.op, s.type, Marked(s.role, mark), name_of(s.worst.tensor),
                     _cos_text(s.worst), s.worst.metrics.max_abs_error, inputs, _short_list(s.golden_ops), fusion])
        if s.first:
            highlight.add(len(rows) - 1)
    roots = [s for s in suspects if s.role == "root"]
    cond = "".join(f" or {c.text}" for c in found.criteria.conditions)
    notes = [f"failing = an output with cosine <= {found.criteria.threshold:g} or NaN, or NaN/Inf on one "
             f"side only{cond}; root = its inputs still match golden"]
    for s in roots:
        if s.fusion_blame:
            notes.append(f"fusion blame: {s.op} {s.fusion_blame}")
    notes += list(info) + report.notes
    hints = ["`next`/`goto #` step through the list with each op's full metric panel"] if view.items else []
    title = f"{_count(len(suspects), 'failing op')} ({_count(len(roots), 'root')}), {view.what} [{found.source}]"
    return Table(["#", "order", "op", "type", "role", "output", "cosine", "max_abs_err", "inputs (cosine)",
                  "golden", "fusion passes"], rows, title=title,
                 json_rows=[s.to_json() for s in view.items], notes=notes, total=len(view.items),
                 more=view.more, shown=view.shown, highlight=highlight, findings=len(suspects), hints=hints,
                 interrupted=found.source == "partial compare",
                 warnings=report.warnings + list(problems), unjudged=report.gate)


def _vcs_source(session: Session, files: list[str] | None) -> CompareResult:
    if files:
        result = result_from_csv([Path(f).expanduser() for f in files])
        session.results["compare"] = result
        return result
    result = session.results.get("compare")
    if result is not None:
        return result
    csvs = session.workspace.compare_csvs
    if (session.golden.folder is None or not len(session.golden)) and csvs:
        newest = max(p.parent for p in csvs)
        result = result_from_csv(sorted(p for p in csvs if p.parent == newest))
        session.results["compare"] = result
        return result
    return run_vc(session)


def criteria_of(session: Session, args) -> Criteria:
    """``vcs``'s failing rule from its -c and --metric (UsageError for a cosine outside [-1, 1])."""
    threshold = session.settings.threshold if args.cosine is None else args.cosine
    if not -1.0 <= threshold <= 1.0:
        raise UsageError(f"-c is a cosine in [-1, 1], got {threshold}")
    return Criteria(threshold, tuple(parse_condition(t) for t in args.metric or ()))


def vcs(session: Session, args) -> Table:
    criteria = criteria_of(session, args)
    limit = session.settings.limit if args.limit is None else args.limit
    if limit < 0:
        raise UsageError("-l must be 0 (all) or a positive number")
    ran_vc = not args.file and "compare" not in session.results
    result = _vcs_source(session, args.file)
    info = [f"no compare result yet, so `vc` ran first ({len(result.rows)} tensors in "
            f"{result.elapsed:.2f} s; CSV {result.csv_path})"] if ran_vc and result.mode != "csv" else []
    source = "vendor CSV" if result.mode == "csv" else ("partial compare" if result.cancelled else "compare")
    found = SuspectList(find_suspects(result, criteria, session.fusion), criteria, source)
    keys, excess = dict(SORT_KEYS), None
    if (args.sort or "").lstrip("-") == "excess" or getattr(args, "rank", "order") == "excess":
        from precision_shell.commands.replay_run import excess_of

        excess = excess_of(session, found.suspects)
        keys["excess"] = lambda s: excess[s.op][2] if excess.get(s.op) else None
        args.sort = args.sort or "-excess"      # --rank excess: highest first
    view = arrange(found.suspects, args, keys=keys, type_of=lambda s: s.type, limit=limit)
    session.results["vcs"] = found
    if getattr(args, "plot", None) is not None:   # a chart, not a list: the cursor stays
        from precision_shell.commands.plot_cmd import compare_chart, plot_metric_key

        return compare_chart(found, result, plot_metric_key(args.plot))
    replaced = follow(session, "compare", view.items, "this list")
    table = suspects_table(found, view, result.problems, info, coverage_report(session, result))
    if replaced:
        table.notes.append(replaced)
    if excess is not None:
        from precision_shell.commands.replay_run import add_excess_column

        add_excess_column(table, excess)
    if getattr(args, "replay", False):
        from precision_shell.commands.replay_run import add_root_verdicts

        add_root_verdicts(session, table, [s.op for s in found.suspects if s.role == "root"])
    return table


# ------------------------------------------------------------------------------------------------
# the panel `next` shows

def metric_text(v: float) -> str:
    return "nan" if v != v else (f"{v:.6f}" if abs(v) < 1e6 else f"{v:.4g}")


def compare_panel(session: Session, s: Suspect, position: str) -> Sections:
    op = session.graph.ops.get(s.op) if session.graph is not None else None
    info = [("role", s.role + ("  (first divergence)" if s.first else "")),
            ("failing", ", ".join(map(name_of, s.failed_outputs))),
            ("failing inputs", ", ".join(map(name_of, s.failed_inputs)) or "none: the error starts here"
             if s.role == "root" else ", ".join(map(name_of, s.failed_inputs))),
            ("golden ops", ", ".join(s.golden_ops) or "-")]
    if s.passes:
        kinds = ", ".join(f"{p} ({s.pass_kinds.get(p, '?')})" for p in s.passes)
        info.append(("fusion passes", kinds))
    if op is not None:
        info += [("kernel", op.kernel or "-"), ("engine", op.engine or "-")]
    if s.fusion_blame:
        info.append(("fusion blame", s.fusion_blame))
    replayed = session.results.get("replay", {}).get(s.op)
    if replayed is not None:
        info.append(("replay", f"{replayed.verdict}{f' ({replayed.profile})' if replayed.profile else ''}: "
                               f"{replayed.advice}"))
    rows = []
    for t in s.inputs + s.outputs:
        m = t.metrics
        failed = t.tensor in s.failed_outputs or t.tensor in s.failed_inputs
        vals = [metric_text(m.cosine), metric_text(m.max_abs_error), metric_text(m.mean_abs_error), metric_text(m.rmse),
                metric_text(m.mean_relative_error), metric_text(m.kl_divergence)] if t.compared else ["-"] * 6
        verdict = ("FAIL" if failed else "ok") if t.compared else f"not compared: {t.reason or '?'}"
        rows.append([name_of(t.tensor), golden_name_of(t.golden_ref), *vals, verdict])
    metrics = Table(["tensor", "golden", "cosine", "max_abs", "mean_abs", "rmse", "mean_rel", "kl",
                     "verdict"], rows)
    blocks: list[tuple[str, Any]] = [("", info), ("metrics", metrics)]
    golden = golden_stats_rows(session, s.op)
    if golden is not None:
        blocks.append(("golden", golden))
    return Sections(title=f"[{position}] {s.op} ({s.type})", blocks=blocks, data=s.to_json())


def compare_set_panel(session: Session, item, position: str) -> Sections:
    dump_set, suspect = item
    panel = compare_panel(session, suspect, position)
    panel.title = f"{panel.title}  rank {dump_set.device} step {dump_set.step}"
    panel.data = {"rank": dump_set.device, "step": dump_set.step, **panel.data}
    return panel
