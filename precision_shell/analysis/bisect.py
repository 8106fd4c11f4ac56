"""``bisect``'s search: delta debugging (ddmin) over compiler-knob candidates, and its journal.

A candidate is one thing the knob can change: a fusion pass (switched off) or an op (kept in
fp32). A trial applies the knob to a set of candidates and runs the user's check; the set is
*fixing* when the check passes. ddmin (Zeller & Hildebrandt 2002) narrows the full set, which
fixes the run, to a 1-minimal fixing set: removing any one culprit breaks the fix. Worst case
n^2 + 3n tests for n candidates; a single culprit takes about 2 log2 n.

The search is a generator of rounds (lists of sets to try, in pshell's ranking order) that gets
back the results of a prefix of each round: whoever runs the trials may stop a round at its first
fixing set (one at a time) or run several at once (``-j``); the first fixing set in round order
wins either way, so the answer does not depend on ``-j``. Nothing here runs a process or touches
a file: the journal is encoded and decoded as lines of text.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Generator, Iterable

JOURNAL_VERSION = 1
KNOBS = ("fusion", "keep-fp32")


@dataclass(frozen=True)
class Candidate:
    name: str                   # shown and journaled: a pass name or an NPU op name
    entries: tuple[str, ...]    # what the config lists for it (the pass; framework op names)
    kind: str = ""              # fusion: "graph" | "ub" (the config section)
    why: str = ""               # evidence: why it is a candidate, and its rank


@dataclass
class Trial:
    """One run of the check (a journal line)."""
    trial: int
    phase: str                  # "all" | "none" | "ddmin" | "verify"
    set: list[str]              # candidate names, in ranking order
    passed: bool
    seconds: float
    exit_code: int | None = None
    reason: str = ""            # why it failed beyond the exit code: timeout, signal, not found
    folder: str = ""

    def to_json(self) -> dict:
        return asdict(self)


Round = list[frozenset[str]]


def split(items: list[str], n: int) -> list[list[str]]:
    """``items`` cut into ``n`` contiguous chunks of (nearly) equal size, order kept."""
    out, start = [], 0
    for i in range(n):
        end = start + (len(items) - start) // (n - i)
        out.append(items[start:end])
        start = end
    return [c for c in out if c]


def ddmin(order: list[str]) -> Generator[Round, list[bool], list[str]]:
    """Yield rounds of sets to try; get back ``passed`` for a prefix of each round (at least up
    to its first fixing set, or all of it); return the 1-minimal fixing set, in ``order``.
    The full set is known to fix (the caller's sanity trial)."""
    current, n = list(order), 2
    while len(current) >= 2:
        chunks = split(current, n)
        found = yield [frozenset(c) for c in chunks]
        hit = _first(found)
        if hit is not None:
            current, n = chunks[hit], 2
            continue
        if len(chunks) > 2:       # with two chunks the complements are the chunks themselves
            complements = [[x for x in current if x not in set(c)] for c in chunks]
            found = yield [frozenset(c) for c in complements]
            hit = _first(found)
            if hit is not None:
                current, n = complements[hit], max(len(chunks) - 1, 2)
                continue
        if len(chunks) >= len(current):
            break
        n = min(2 * len(chunks), len(current))
    return current


def _first(found: list[bool]) -> int | None:
    return next((i for i, ok in enumerate(found) if ok), None)


def ddmin_bound(n: int) -> int:
    """Worst-case distinct ddmin tests for ``n`` candidates (Zeller & Hildebrandt: n^2 + 3n)."""
    return n * n + 3 * n


def trial_bound(n: int) -> int:
    """Every trial a search of ``n`` candidates may run: both sanity trials, ddmin, verification."""
    return 2 + ddmin_bound(n) + 1


def fewest_trials(n: int) -> int:
    """Trials even the luckiest search needs: sanity, about log2 n halvings, verification."""
    return 3 + (math.ceil(math.log2(n)) if n > 1 else 0)


# ---- configs -------------------------------------------------------------------------------------

def fusion_switch(chosen: Iterable[Candidate]) -> dict:
    """The vendor's fusion switch config turning the chosen passes off, by section."""
    graph: dict[str, str] = {}
    ub: dict[str, str] = {}
    for c in chosen:
        for entry in c.entries:
            (ub if c.kind == "ub" else graph)[entry] = "off"
    return {"Switch": {"GraphFusion": graph, "UBFusion": ub}}


def config_text(knob: str, chosen: Iterable[Candidate]) -> str:
    """The trial's config file: a fusion switch JSON or a keep-fp32 list (one name a line)."""
    chosen = list(chosen)
    if knob == "fusion":
        return json.dumps(fusion_switch(chosen), indent=4) + "\n"
    names: list[str] = []
    for c in chosen:
        names += [e for e in c.entries if e not in names]
    return "".join(n + "\n" for n in names)


def config_name(knob: str) -> str:
    return "fusion_switch.json" if knob == "fusion" else "keep_fp32.txt"


# ---- the journal ----------------------------------------------------------------------------------

@dataclass
class SearchKey:
    """What makes two searches the same one: a journal only resumes its own search."""
    knob: str
    check: str
    candidates: list[str]
    pass_regex: str | None = None
    fail_regex: str | None = None

    def header(self) -> str:
        return json.dumps({"bisect_journal": JOURNAL_VERSION, **asdict(self)}) + "\n"

    def difference(self, other: "SearchKey") -> str | None:
        """What differs from ``other`` in words, or None when it is the same search."""
        for name, what in (("knob", "knob"), ("check", "check command"), ("candidates", "candidate list"),
                           ("pass_regex", "--pass-regex"), ("fail_regex", "--fail-regex")):
            if getattr(self, name) != getattr(other, name):
                return what
        return None


@dataclass
class JournalContents:
    key: SearchKey
    trials: list[Trial] = field(default_factory=list)
    torn: int = 0               # lines cut short (a crash mid-write): ignored, rerun on resume


def trial_line(t: Trial) -> str:
    return json.dumps(t.to_json()) + "\n"


def parse_journal(text: str) -> JournalContents:
    """A journal's search key and finished trials; ValueError (one line) when it is none."""
    lines = text.splitlines()
    try:
        head = json.loads(lines[0]) if lines else None
    except ValueError:
        head = None
    if not isinstance(head, dict) or head.get("bisect_journal") != JOURNAL_VERSION:
        raise ValueError("not a bisect journal (its first line is not a version-1 header)")
    try:
        key = SearchKey(head["knob"], head["check"], list(head["candidates"]),
                        head.get("pass_regex"), head.get("fail_regex"))
    except (KeyError, TypeError):
        raise ValueError("bisect journal header without knob/check/candidates") from None
    out = JournalContents(key)
    for line in lines[1:]:
        try:
            row = json.loads(line)
            out.trials.append(Trial(int(row["trial"]), str(row["phase"]), [str(s) for s in row["set"]],
                                    bool(row["passed"]), float(row["seconds"]), row.get("exit_code"),
                                    str(row.get("reason", "")), str(row.get("folder", ""))))
        except (ValueError, KeyError, TypeError):
            out.torn += 1
    return out


def trial_key(phase: str, names: Iterable[str]) -> tuple[bool, frozenset[str]]:
    """Trials that answer the same question: verification is never answered from a search trial."""
    return phase == "verify", frozenset(names)
