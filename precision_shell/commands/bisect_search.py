"""Running a ``bisect`` search: trials on disk, the journal, the ddmin rounds.

Every trial has its own folder ``trial-NNN/`` under the search's output folder holding its config,
``stdout.txt``, ``stderr.txt`` and ``trial.json`` (command, exit code, seconds, verdict); its line
is appended to ``bisect.jsonl`` (and flushed to disk) the moment it finishes, so Ctrl-C or a crash
loses at most the trials that were running. A trial already in the journal is never run again:
``--resume`` replays the search from it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from precision_shell.analysis.bisect import (Candidate, JournalContents, SearchKey, Trial, config_name,
                                             config_text, ddmin, parse_journal, trial_key, trial_line)
from precision_shell.commands.process_runner import OUTPUT_CAP, ProcessOutcome, ProcessSpec, run_processes
from precision_shell.errors import CommandError

JOURNAL = "bisect.jsonl"
ENV_NAMES = {"fusion": "PSHELL_FUSION_SWITCH", "keep-fp32": "PSHELL_KEEP_FP32"}
PLACEHOLDERS = {"fusion": "{switch}", "keep-fp32": "{keep_fp32}"}


class TrialBudgetSpent(Exception):
    """``--max-trials`` reached before the search could finish."""


@dataclass
class SearchSettings:
    knob: str
    check: str
    candidates: list[Candidate]
    out: Path
    jobs: int = 1
    timeout: float | None = None
    max_trials: int | None = None
    pass_regex: str | None = None
    fail_regex: str | None = None
    cwd: Path = field(default_factory=Path.cwd)

    @property
    def key(self) -> SearchKey:
        return SearchKey(self.knob, self.check, [c.name for c in self.candidates], self.pass_regex, self.fail_regex)


def check_command(settings: SearchSettings, config: Path, folder: Path) -> str:
    """CMD with ``{switch}``/``{keep_fp32}`` and ``{trial}`` replaced by shell-quoted paths."""
    text = settings.check.replace(PLACEHOLDERS[settings.knob], shlex.quote(str(config)))
    return text.replace("{trial}", shlex.quote(str(folder)))


class Search:
    def __init__(self, settings: SearchSettings, resume: bool, progress: Callable[[str], None]):
        self.s = settings
        self.progress = progress
        self.rank = {c.name: i for i, c in enumerate(settings.candidates)}
        self.by_name = {c.name: c for c in settings.candidates}
        self.journal_path = settings.out / JOURNAL
        self.done: dict[tuple, Trial] = {}
        self.history: list[Trial] = []
        self.new_trials = 0
        self.resumed = 0
        self._open_journal(resume)
        used = [t.trial for t in self.history] + [int(p.name[6:]) for p in settings.out.glob("trial-*")
                                                 if p.name[6:].isdigit()]
        self.next_number = max(used, default=0) + 1

    # ---- the journal -----------------------------------------------------------------------------
    def _open_journal(self, resume: bool) -> None:
        path = self.journal_path
        if path.exists() and not resume:
            raise CommandError(f"{path} holds a bisect journal already: add --resume to go on with it, "
                               f"or choose another --out")
        if path.exists():
            try:
                old: JournalContents = parse_journal(path.read_text(encoding="utf-8", errors="replace"))
            except ValueError as exc:
                raise CommandError(f"{path}: {exc}; not resumed") from None
            differs = self.s.key.difference(old.key)
            if differs:
                raise CommandError(f"{path}: the journal of another search (its {differs} differs); "
                                   f"not resumed: use another --out")
            for t in old.trials:
                self.done[trial_key(t.phase, t.set)] = t
                self.history.append(t)
            self.resumed = len(old.trials)
            if not path.read_bytes().endswith(b"\n"):     # a line torn by a crash: start a new one
                with open(path, "a", encoding="utf-8") as fh:
                    fh.write("\n")
            if old.trials:
                self.progress(f"bisect: resuming: {len(old.trials)} trial(s) from {path}")
            return
        path.write_text(self.s.key.header(), encoding="utf-8")

    def _append(self, trial: Trial) -> None:
        with open(self.journal_path, "a", encoding="utf-8") as fh:
            fh.write(trial_line(trial))
            fh.flush()
            os.fsync(fh.fileno())

    # ---- trials ------------------------------------------------------------------------------------
    def ordered(self, names) -> list[str]:
        return sorted(names, key=self.rank.__getitem__)

    def describe(self, names: list[str]) -> str:
        verb = "off" if self.s.knob == "fusion" else "in fp32"
        return f"{len(names)} of {len(self.rank)} {verb}"

    def _prepare(self, phase: str, names: list[str]) -> tuple[Trial, ProcessSpec]:
        number, self.next_number = self.next_number, self.next_number + 1
        folder = (self.s.out / f"trial-{number:03d}").resolve()
        folder.mkdir(parents=True, exist_ok=True)
        config = folder / config_name(self.s.knob)
        config.write_text(config_text(self.s.knob, [self.by_name[n] for n in names]), encoding="utf-8")
        env = dict(os.environ)
        env[ENV_NAMES[self.s.knob]] = str(config)
        env["PSHELL_BISECT_TRIAL"] = str(folder)
        command = check_command(self.s, config, folder)
        trial = Trial(number, phase, names, False, 0.0, folder=folder.name)
        return trial, ProcessSpec(command, folder, env, self.s.timeout)

    def _verdict(self, trial: Trial, spec: ProcessSpec, outcome: ProcessOutcome) -> None:
        trial.seconds, trial.exit_code, trial.reason = outcome.seconds, outcome.exit_code, outcome.reason()
        killed = outcome.timed_out or outcome.signal is not None
        if killed or not (self.s.pass_regex or self.s.fail_regex):
            trial.passed = outcome.ok
        else:
            text = "".join((spec.folder / f).read_text(encoding="utf-8", errors="replace")
                           for f in ("stdout.txt", "stderr.txt"))
            if self.s.pass_regex:
                trial.passed = re.search(self.s.pass_regex, text, re.MULTILINE) is not None
            else:
                trial.passed = re.search(self.s.fail_regex, text, re.MULTILINE) is None
        if outcome.cut:
            trial.reason = "; ".join(filter(None, [trial.reason, f"{' and '.join(outcome.cut)} cut at {OUTPUT_CAP >> 20} MiB"]))
        record = {**trial.to_json(), "command": spec.command, "cut": outcome.cut, "signal": outcome.signal,
                  "timed_out": outcome.timed_out}
        (spec.folder / "trial.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")

    def run_round(self, phase: str | list[str], sets: list[list[str]], stop_at_pass: bool) -> list[bool]:
        """``passed`` for a prefix of ``sets`` (through the first fixing set when ``stop_at_pass``):
        journaled trials answer from the journal, the others run, ``jobs`` at a time. ``phase``:
        one for the whole round or one per set."""
        phases = [phase] * len(sets) if isinstance(phase, str) else list(phase)
        results: dict[int, bool] = {}
        todo: list[int] = []
        for i, names in enumerate(sets):
            known = self.done.get(trial_key(phases[i], names))
            if known is not None:
                results[i] = known.passed
                if known.passed and stop_at_pass:
                    break
            else:
                todo.append(i)
        first_pass = min((i for i, ok in results.items() if ok), default=len(sets)) if stop_at_pass else len(sets)
        todo = [i for i in todo if i < first_pass]
        budget_cut = False
        if self.s.max_trials is not None:
            room = max(0, self.s.max_trials - len(self.history))
            budget_cut = len(todo) > room
            todo = todo[:room]
        prepared: dict[int, tuple[Trial, ProcessSpec]] = {}

        def start(k: int) -> ProcessSpec:
            prepared[k] = self._prepare(phases[todo[k]], sets[todo[k]])
            return prepared[k][1]

        def finished(k: int, outcome: ProcessOutcome) -> bool:
            trial, spec = prepared[k]
            self._verdict(trial, spec, outcome)
            self._append(trial)
            self.done[trial_key(trial.phase, trial.set)] = trial
            self.history.append(trial)
            self.new_trials += 1
            results[todo[k]] = trial.passed
            why = f" ({trial.reason})" if trial.reason else (f" (exit {trial.exit_code})" if not trial.passed else "")
            self.progress(f"bisect: trial {trial.trial} [{trial.phase}] {self.describe(trial.set)}: "
                          f"{'pass' if trial.passed else 'fail'}{why}, {trial.seconds:.1f} s")
            return stop_at_pass and trial.passed

        run_processes(len(todo), start, self.s.jobs, finished)
        found = []
        for i in range(len(sets)):
            if i not in results:
                break
            found.append(results[i])
        if budget_cut and not (stop_at_pass and any(found)):
            raise TrialBudgetSpent()
        return found

    def trial_of(self, phase: str, names: list[str]) -> Trial | None:
        return self.done.get(trial_key(phase, names))

    # ---- the search --------------------------------------------------------------------------------
    def sanity(self) -> tuple[Trial, Trial]:
        every = [c.name for c in self.s.candidates]
        self.run_round(["all", "none"], [every, []], False)     # independent: both at once with -j 2
        return self.trial_of("all", every), self.trial_of("none", [])

    def minimise(self) -> list[str]:
        """ddmin to a 1-minimal fixing set (ranking order)."""
        steps = ddmin([c.name for c in self.s.candidates])
        try:
            sets = next(steps)
            while True:
                found = self.run_round("ddmin", [self.ordered(s) for s in sets], True)
                sets = steps.send(found)
        except StopIteration as done:
            return self.ordered(done.value)

    def verify(self, names: list[str]) -> Trial:
        self.run_round("verify", [names], False)
        return self.trial_of("verify", names)
