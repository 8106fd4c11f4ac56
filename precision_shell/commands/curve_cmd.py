"""``curve TARGET [--golden GOLDEN] ...``: from the training logs to the step (product.md §13),
and with ``--then CMD`` from the step to the op (CMD on that dump step across ranks)."""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass, field
from typing import Any

from precision_shell.commands.registry import REGISTRY, arg, command
from precision_shell.commands.results import Chain, Sections, Table
from precision_shell.errors import CommandError, FormatError, UsageError

EVENT_LIMIT = 20


@dataclass
class CurveResult(Sections):
    """The curve panel; ``findings`` trips --fail-on-findings (a fail verdict or a NaN step)."""

    findings: int = 0
    warnings: list[str] = field(default_factory=list)
    interrupted: bool = False
    unjudged: str | None = None


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def session_dump_steps(session: Any) -> list[int]:
    """Step numbers with dumps in this session: a framework pair's steps, or the graph-mode
    step folders of the active run and time; none without dumps."""
    if session is None:
        return []
    steps: set = set()
    if getattr(session, "kind", "graph") == "framework":
        steps = {s for s in session.target.steps if s is not None}
    else:
        workspace, active = getattr(session, "workspace", None), getattr(session, "active", None)
        for s in getattr(workspace, "dump_sets", None) or []:
            if active is None or (s.run == active.run and s.time == active.time):
                steps.add(s.step)
    return sorted(int(s) for s in steps if str(s).lstrip("-").isdigit())


def _read(session: Any, path: str):
    """``read_log`` with a progress bar over the bytes (a 1 GB log takes a while)."""
    import os

    from precision_shell.formats.logs import read_log

    progress = getattr(session, "progress", None)
    if progress is None:
        return read_log(path)
    try:
        given = os.path.expanduser(path)
        size = (sum(os.path.getsize(os.path.join(given, n)) for n in os.listdir(given))
                if os.path.isdir(given) else os.path.getsize(given))
    except OSError:
        return read_log(path)
    with progress(f"reading {path}", max(size, 1)) as bar:
        return read_log(path, bar.advance)


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.6g}" if math.isfinite(value) else str(value)


def _panel(found, lines: list[str], limit: int) -> CurveResult:
    c = found.comparison
    rows = [("metric", found.metric), ("target", found.target_path)]
    if found.golden_path:
        rows.append(("golden", found.golden_path))
    rows.append(("steps", f"{found.steps} judged" + (f" (target {len(found.target)}, golden {len(found.golden)})"
                                                   if found.golden is not None else "")))
    if c is not None:
        rows += [("verdict", f"{found.verdict}: mean relative error {_fmt(c.mean_relative_error)} "
                             f"(tolerance {found.params.tolerance:g})"),
                 ("first divergent", _fmt(found.first_divergent_step) if found.first_divergent_step is not None
                  else f"none (window {found.params.window})")]
    rows.append(("first non-finite", str(found.first_nonfinite_step) if found.first_nonfinite_step is not None else "none"))
    rows.append(("spikes", f"{len(found.spikes)}" + (f" (first at step {found.spikes[0][0]})" if found.spikes else "")))
    scale = found.loss_scale
    if scale is not None:
        rows.append(("loss scale", f"{len(scale.drops)} drops, {len(scale.skipped_steps)} skipped steps, "
                                   f"min {_fmt(scale.min)}"))
    else:
        rows.append(("loss scale", "not in the log"))
    if found.dump_steps:
        rows.append(("dump steps", ", ".join(map(str, found.dump_steps[:12])) + (" ..." if len(found.dump_steps) > 12 else "")))
    rows.append(("suggested step", "none" if found.suggested_step is None else
                 f"{found.suggested_step}" + (f" -> dump step {found.suggested_dump_step}"
                                              if found.suggested_dump_step is not None else "")))
    shown = found.events if limit == 0 else found.events[:limit]
    events = Table(["step", "event", "detail"], [[e.step, e.kind, e.detail] for e in shown],
                   total=len(found.events))
    blocks: list = [("read", list(lines)), ("", rows), ("events", events)]
    if found.warnings:
        blocks.append(("warnings", list(found.warnings)))
    return CurveResult(f"curve: {found.metric}", blocks, data=found.to_json(),
                       findings=int(found.fails()), warnings=list(found.warnings))


def _then(session: Any, text: str, found) -> Any:
    """CMD on the suggested dump step across ranks (``--steps S --ranks all``)."""
    if session is None or not found.dump_steps:
        raise CommandError("--then: no dumps in this session (open the workspace or framework pair "
                           "whose steps the log numbers: pshell WS -c \"curve ... --then ac\")")
    if found.suggested_dump_step is None:
        raise CommandError(f"--then: the suggested step {found.suggested_step} is not dumped; "
                           f"dumped steps: {', '.join(map(str, found.dump_steps[:10]))}")
    words = shlex.split(text)
    if not words:
        raise UsageError("--then needs a command, e.g. --then ac")
    cmd = REGISTRY.for_session(REGISTRY.lookup(words[0]), session)
    flags = cmd.flags()
    if "--steps" not in flags or "--ranks" not in flags:
        raise UsageError(f"--then {cmd.name}: it takes no --steps/--ranks (use ac, vc or vcs)")
    argv = words[1:] + ["--steps", str(found.suggested_dump_step), "--ranks", "all"]
    return cmd.handler(session, cmd.parse(argv))


@command("curve",
         summary="Training logs to the step: read TARGET (and GOLDEN) logs (TensorBoard event files "
                 "or folders, Megatron/DeepSpeed/MindFormers text logs, CSV/JSONL with a step "
                 "column), judge the curve (mean relative error vs --tolerance, first divergent "
                 "step over --window steps, first NaN/Inf step, spikes, loss-scale drops and skipped "
                 "steps) and name the step to dump; in a workspace, the dumped step to open, and "
                 "--then CMD runs CMD on it across ranks. Works without a workspace.",
         example='curve runs/npu --golden runs/gpu\n'
                 'curve npu_train.log --golden gpu_train.log --metric "lm loss" --tolerance 0.02\n'
                 'curve logs/npu --golden logs/gpu --then ac        (in the dumps\' workspace)\n'
                 'curve train.log --plot\n'
                 '(batch: pshell -c "curve A --golden B" --format json --fail-on-findings)',
         needs_session=False,
         args=[arg("target", metavar="TARGET", complete="path",
                   help="the run to judge: an event file, a folder of event files, a text log, CSV or JSONL"),
               arg("--golden", metavar="GOLDEN", complete="path", help="the reference run's log (same kinds)"),
               arg("--metric", default="loss",
                   help="the curve: an exact tag/column, else the first containing it (default loss)"),
               arg("--tolerance", type=float, default=0.02,
                   help="mean relative error allowed (default 0.02: Ascend's 'under 2 %%')"),
               arg("--window", type=_positive_int, default=10,
                   help="steps per window for the divergence and spike rules (default 10)"),
               arg("--spike", type=float, default=0.5,
                   help="a spike exceeds (1 + SPIKE) x the median of the previous window (default 0.5)"),
               arg("--step-offset", type=int, default=0, metavar="K", signed=True,
                   help="dump step = log step + K (when log and dump numbering differ)"),
               arg("--plot", action="store_true", help="chart target/golden, relative error, loss scale"),
               arg("--then", metavar="CMD", help="run CMD (ac, vc, vcs) on the suggested dump step across ranks"),
               arg("-l", "--limit", type=int, default=EVENT_LIMIT, help=f"events shown (default {EVENT_LIMIT}, 0: all)")])
def curve(session: Any, args: Any) -> Any:
    from precision_shell.analysis.curve.findings import CurveParams, analyse, link_dumps, pick

    if not (args.tolerance >= 0) or not math.isfinite(args.tolerance):
        raise UsageError("--tolerance must be a number >= 0")
    if not (args.spike >= 0) or not math.isfinite(args.spike):
        raise UsageError("--spike must be a number >= 0")
    params = CurveParams(args.metric, args.tolerance, args.window, args.spike, args.step_offset)
    target = _read(session, args.target)
    golden, golden_problem = None, None
    if args.golden:
        try:
            golden = _read(session, args.golden)
        except FormatError as exc:
            golden_problem = f"{exc} (golden not read: single-run findings only)"
    if pick(target, args.metric) is None:
        from precision_shell.formats.logs import printable

        names = ", ".join(printable(n) for n in list(target.metrics)[:8]) or "none"
        raise CommandError(f"{args.target}: no series matching {printable(args.metric)!r} "
                           f"(it has: {names}); pick one with --metric")
    found = analyse(target, golden, params)
    if golden_problem:
        found.warnings.insert(0, golden_problem)
    missing = link_dumps(found, session_dump_steps(session))
    if missing and found.dump_steps:
        found.warnings.append(missing)
    elif found.suggested_step is not None and not found.dump_steps:
        found.warnings.append(f"dump step {found.suggested_step + params.step_offset} to look inside "
                              "(no dumps in this session)")
    if session is not None and hasattr(session, "results"):
        session.results["curve"] = found
    lines = target.lines + (golden.lines if golden else [])
    result: Any = _panel(found, lines, args.limit)
    if args.plot:
        from precision_shell.commands.curve_plot import curve_charts

        result = curve_charts(found, result)
    if args.then:
        try:
            return Chain([result, _then(session, args.then, found)])
        except CommandError as exc:   # the curve still shows; the gate knows CMD did not run
            result.warnings.append(str(exc))
            result.unjudged = str(exc)
    return result
