"""``bisect {fusion|keep-fp32} --check CMD``: the smallest knob change that fixes the run, found by
rerunning the user's own check (product.md §14).

The search is ddmin (analysis.bisect) over the knob's candidates (bisect_candidates), run trial
by trial on disk (bisect_search, process_runner). The culprits become the finding list, so
``next`` walks them with their evidence; the final config is written beside the journal.
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from precision_shell.analysis.bisect import Candidate, Trial, config_name, config_text, fewest_trials, trial_bound
from precision_shell.atomic_write import write_atomic
from precision_shell.commands.bisect_search import (ENV_NAMES, PLACEHOLDERS, Search, SearchSettings,
                                                    TrialBudgetSpent, check_command)
from precision_shell.commands.finding_list import follow
from precision_shell.commands.process_policy import require_process_start
from precision_shell.commands.registry import arg, command
from precision_shell.commands.results import Message, Sections, Table
from precision_shell.commands.stepping import PANELS
from precision_shell.errors import CommandError, UsageError

CURSOR = "bisect"
VERB = {"fusion": "switched off", "keep-fp32": "kept in fp32"}


@dataclass
class Culprit:
    """One member of the verified culprit set: a finding ``next`` shows."""
    op: str                     # the candidate's name (a pass or an op)
    knob: str
    candidate: Candidate
    rank: int
    evidence: list[Trial]       # the trials that show it is needed (the set without it fails) and sufficient
    role: str = "culprit"


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _positive(kind):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = 0
        if not value > 0:
            raise argparse.ArgumentTypeError(f"expected a positive number, not {text!r}")
        return value
    return parse


@command("bisect",
         summary="Find the smallest set of fusion passes to switch off (or ops to keep in fp32) that "
                 "fixes the run, by rerunning your check command with one knob changed per trial (ddmin).",
         example='bisect fusion --check "python -m precision_shell.samples {trial}/ws --fusion-switch {switch} '
                 '&& pshell {trial}/ws -c \'vcs -c 0.98\' --fail-on-findings"\n'
                 'bisect keep-fp32 --check "./train_step.sh --keep-list {keep_fp32}" -j 2 --timeout 600\n'
                 'bisect fusion --check "..." --resume      # go on after Ctrl-C: finished trials are not rerun',
         args=[arg("knob", choices=("fusion", "keep-fp32"), help="what a trial changes"),
               arg("--check", required=True, metavar="CMD",
                   help="shell command judging a trial: exit 0 = fixed. {switch} / {keep_fp32}: the trial's "
                        "config file (also in $PSHELL_FUSION_SWITCH / $PSHELL_KEEP_FP32); {trial}: its folder"),
               arg("--candidates", default="suspects", metavar="suspects|all|FILE", complete="path",
                   help="suspects (default): fusion passes of fusion_result.json with the suspects' blamed "
                        "passes first / the last vcs's suspect ops, roots first; all: every pass / op; "
                        "FILE: one name per line"),
               arg("--pass-regex", metavar="R", help="a trial passes when R matches its stdout+stderr"),
               arg("--fail-regex", metavar="R", help="a trial fails when R matches its stdout+stderr"),
               arg("-j", "--jobs", type=_positive(int), default=1, metavar="N",
                   help="trials run at once (each in its own {trial} folder; default 1)"),
               arg("--out", metavar="DIR", complete="path",
                   help="search folder: trial folders, bisect.jsonl, the final config "
                        "(default <output folder>/bisect_<knob>)"),
               arg("--resume", action="store_true", help="go on with the journal in the search folder"),
               arg("--max-trials", type=_positive(int), metavar="N",
                   help="stop after N trials in all (the journal keeps them; --resume goes on)"),
               arg("--timeout", type=_positive(float), metavar="SECONDS",
                   help="per trial: kill its process group and count it failed"),
               arg("--dry-run", action="store_true",
                   help="show the candidates, the trial bound and the first trial's command; run nothing")])
def bisect(session: Any, args: Any) -> Any:
    if args.pass_regex and args.fail_regex:
        raise UsageError("bisect: --pass-regex and --fail-regex exclude each other")
    for flag, rx in (("--pass-regex", args.pass_regex), ("--fail-regex", args.fail_regex)):
        if rx is not None:
            try:
                re.compile(rx)
            except re.error as exc:
                raise UsageError(f"bisect: {flag} {rx!r}: {exc}") from None
    other = PLACEHOLDERS["keep-fp32" if args.knob == "fusion" else "fusion"]
    if other in args.check:
        raise UsageError(f"bisect {args.knob}: {other} is the other knob's file; use "
                         f"{PLACEHOLDERS[args.knob]} (and {{trial}})")
    if not args.check.strip():
        raise UsageError("bisect: --check needs a command")
    from precision_shell.commands.bisect_candidates import candidates_for   # numpy: not at start-up

    candidates = candidates_for(session, args.knob, args.candidates)
    n = len(candidates)
    if args.max_trials is not None and args.max_trials < fewest_trials(n):
        raise CommandError(f"bisect: {n} candidates need at least {fewest_trials(n)} trials (both sanity "
                           f"trials, ~log2 {n} halvings, verification); --max-trials is {args.max_trials}")
    if args.dry_run:
        return _dry_run(args, candidates)
    require_process_start("bisect")
    out = session.output_path(args.out, f"bisect_{args.knob.replace('-', '_')}", folder=True)
    settings = SearchSettings(args.knob, args.check, candidates, out, args.jobs, args.timeout, args.max_trials,
                              args.pass_regex, args.fail_regex)
    search = Search(settings, args.resume, _progress)
    _progress(f"bisect {args.knob}: {n} candidates, at most {trial_bound(n)} trials (ddmin); "
              f"trials in {out}")
    if args.candidates == "suspects" and session.results.get("vcs") is None:
        _progress(f"bisect {args.knob}: no `vcs` in this session, so the candidates are not ranked by blame "
                  f"(after `vcs` a top-ranked culprit takes fewer trials)")
    try:
        return _search(session, search, args)
    except KeyboardInterrupt:
        return Message([f"bisect: interrupted; {len(search.history)} finished trial(s) kept in "
                        f"{search.journal_path} (the running one was killed); add --resume to go on"],
                       data=_json(search, [], False, None), interrupted=True)
    except TrialBudgetSpent:
        raise CommandError(f"bisect: --max-trials {args.max_trials} reached before the search finished; "
                           f"{len(search.history)} trials kept in {search.journal_path}; "
                           f"--resume with a larger --max-trials goes on") from None


def _first_line(trial: Trial, search: Search) -> str:
    path = search.s.out / trial.folder / "stderr.txt"
    try:
        lines = [ln for ln in path.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
    except OSError:
        lines = []
    return repr(lines[-1][:120]) if lines else "no stderr"


def _search(session: Any, search: Search, args: Any) -> Sections:
    knob = args.knob
    every, empty = search.sanity()
    where = search.s.out
    if not every.passed:
        if every.exit_code in (126, 127):
            raise CommandError(f"bisect: the check command could not run ({every.reason}; trial "
                               f"{every.trial}: {_first_line(every, search)}); journal kept in {where}")
        raise CommandError(f"bisect: this knob cannot fix it: the check still fails with all {len(search.rank)} "
                           f"candidates {VERB[knob]} (trial {every.trial}: "
                           f"{every.reason or f'exit {every.exit_code}'}; see {where / every.folder})")
    if empty.passed:
        raise CommandError(f"bisect: not reproducible: the check passes with no candidate {VERB[knob]} "
                           f"(trial {empty.trial}; see {where / empty.folder})")
    culprits = search.minimise()
    verified = search.verify(culprits)
    config = where / config_name(knob)
    text = config_text(knob, [search.by_name[n] for n in culprits])
    write_atomic(config, lambda fh: fh.write(text))
    items = [Culprit(n, knob, search.by_name[n], search.rank[n], _evidence(search, culprits, n)) for n in culprits]
    replaced = follow(session, CURSOR, items, "the bisect culprits")
    return _result(search, items, verified, config, replaced)


def _evidence(search: Search, culprits: list[str], name: str) -> list[Trial]:
    """The trial of the set without ``name`` (it failed: ``name`` is needed) and the verification."""
    without = [n for n in culprits if n != name]
    found = [search.trial_of("ddmin", without), search.trial_of("verify", culprits)]
    return [t for t in found if t is not None]


def _reproduce(search: Search, trial: Trial) -> str:
    folder = (search.s.out / trial.folder).resolve()
    config = folder / config_name(search.s.knob)
    return (f"cd {shlex.quote(str(search.s.cwd))} && {ENV_NAMES[search.s.knob]}={shlex.quote(str(config))} "
            f"sh -c {shlex.quote(check_command(search.s, config, folder))}")


def _json(search: Search, culprits: list[str], verified: bool, config: Path | None) -> dict:
    return {"knob": search.s.knob, "candidates": [c.name for c in search.s.candidates],
            "trials": len(search.history), "new_trials": search.new_trials, "culprits": culprits,
            "verified": verified, "config": str(config) if config else None, "journal": str(search.journal_path),
            "history": [{"trial": t.trial, "phase": t.phase, "set": t.set, "passed": t.passed,
                         "seconds": t.seconds} for t in search.history]}


def _result(search: Search, items: list[Culprit], verified: Trial, config: Path, replaced: str | None) -> Sections:
    knob, names = search.s.knob, [c.op for c in items]
    table = Table(["#", "culprit", "rank", "config entries", "why a candidate"],
                  [[i + 1, c.op, c.rank + 1, ", ".join(c.candidate.entries), c.candidate.why]
                   for i, c in enumerate(items)])
    summary = [f"{len(names)} of {len(search.rank)} candidates {VERB[knob]} fix the run "
               f"({'1-minimal: each one is needed' if len(names) > 1 else 'one is enough'}); "
               f"{len(search.history)} trials ({search.new_trials} run now, {search.resumed} from the journal)",
               f"verified: trial {verified.trial} {'passed' if verified.passed else 'FAILED (the check is flaky?)'}"
               f" in {verified.seconds:.1f} s",
               f"config: {config}", f"journal: {search.journal_path}",
               f"reproduce: {_reproduce(search, verified)}", "`next` walks the culprits with their evidence"]
    if replaced:
        summary.append(replaced)
    data = _json(search, names, verified.passed, config)
    data["reproduce"] = _reproduce(search, verified)
    return Sections(f"bisect {knob}: {', '.join(names)}", [("culprits", table), ("summary", summary)], data=data)


def _dry_run(args: Any, candidates: list[Candidate]) -> Sections:
    n = len(candidates)
    table = Table(["rank", "candidate", "config entries", "why"],
                  [[i + 1, c.name, ", ".join(c.entries), c.why] for i, c in enumerate(candidates)])
    lines = [f"trials: at least {fewest_trials(n)}, at most {trial_bound(n)} (ddmin on {n} candidates)",
             f"trial 1 writes {config_name(args.knob)} with all {n} {VERB[args.knob]} and runs: {args.check}",
             "nothing was run (--dry-run)"]
    data = {"knob": args.knob, "candidates": [c.name for c in candidates], "trials": 0,
            "max_trials": trial_bound(n), "culprits": [], "verified": False, "config": None, "journal": None,
            "history": [], "dry_run": True}
    return Sections(f"bisect {args.knob} (dry run)", [("candidates", table), ("plan", lines)], data=data)


def culprit_panel(session: Any, item: Culprit, position: str) -> Sections:
    c = item.candidate
    rows = [("knob", f"{item.knob} ({VERB[item.knob]})"), ("rank", str(item.rank + 1)),
            ("config entries", ", ".join(c.entries)), ("why a candidate", c.why)]
    if item.knob == "fusion" and session.graph is not None:
        fused = [op.key for op in session.graph.in_exec_order() if item.op in op.passes]
        rows.append(("fused ops", ", ".join(fused) or "(none in the loaded graph)"))
    elif session.graph is not None and item.op in session.graph.ops:
        op = session.graph.ops[item.op]
        rows.append(("op", f"{op.key} ({op.type}); `ni {op.key}` for its panel"))
    evidence = [f"trial {t.trial} [{t.phase}] {', '.join(t.set) or '(nothing)'} {VERB[item.knob]}: "
                f"{'pass' if t.passed else 'fail'} ({t.seconds:.1f} s, {t.folder})" for t in item.evidence]
    return Sections(f"bisect culprit {position}: {item.op}", [("culprit", rows), ("evidence", evidence)],
                    data={"culprit": item.op, "knob": item.knob, "entries": list(c.entries), "why": c.why,
                          "evidence": [t.to_json() for t in item.evidence]})


PANELS[CURSOR] = culprit_panel
