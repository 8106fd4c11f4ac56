"""What a compare or an overflow scan could judge: counts per reason, and the first files.

A CI gate (``--fail-on-findings``) must not pass when nothing was checked: a dump of random bytes
has no failing op because it has no op at all. So every compare and scan counts what it compared,
what it skipped (and why: no golden, shapes differ, ...) and what it could not read (and why:
the reader's reason without its particulars, so alike files count together), and names the first
few files with their full reasons. :meth:`Coverage.gate` says why a gate must fail.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from precision_shell.errors import FormatError

# Kinds of skipped pairs. The first three mean "this tensor has no counterpart to compare with",
# so they do not count against coverage; a shape mismatch does.
NO_GOLDEN, NO_DUMP, MISSING, SHAPE_DIFFERS = "no golden", "no dump", "missing in one run", "shape differs"
NO_COUNTERPART = frozenset({NO_GOLDEN, NO_DUMP, MISSING})
EXAMPLES = 5                 # files named below a summary line
_KIND_MAX = 60               # characters of a reason kind

_PARTICULARS = re.compile(r"\[[^\]]*\]|\([^)]*\)")
_NUMBER = re.compile(r"\d+")


def reason_kind(reason: str) -> str:
    """``reason`` (a FormatError's, without the path) reduced to what alike problems share: its
    first clause, bracketed details dropped, numbers as N; a clause ending in a bare 0 keeps it
    ("header length 0" is a problem of its own, not one of "header length N")."""
    head, _, rest = reason.partition(":")
    head = head.strip()
    if head.startswith("cannot") and len(head.split()) <= 2 and rest.strip():
        head = f"{head}: {rest.strip()}"   # "cannot read: Permission denied" needs its why
    head = re.split(r"[,;]", _PARTICULARS.sub("", head))[0]
    words = head.split()
    if not words:
        return "unknown"
    keep_zero = words[-1] == "0"
    text = _NUMBER.sub("N", " ".join(words[:-1] if keep_zero else words)) + (" 0" if keep_zero else "")
    text = text.strip()
    return text if len(text) <= _KIND_MAX else text[:_KIND_MAX - 1] + "…"


@dataclass
class ReasonTally:
    """Counts per reason kind, and the first (where, full reason) pairs, one per place."""

    counts: Counter = field(default_factory=Counter)
    examples: list[tuple[str, str]] = field(default_factory=list)

    def add(self, kind: str, where: str, reason: str) -> None:
        self.counts[kind] += 1
        self.example(where, reason)

    def example(self, where: str, reason: str) -> bool:
        """Keep ``where`` as an example unless full or already named; False once full."""
        if len(self.examples) >= EXAMPLES:
            return False
        if all(w != where for w, _ in self.examples):
            self.examples.append((where, reason))
        return True

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def text(self, sep: str = " ") -> str:
        """``2 (header length 0: 1, truncated: 1)``; ``sep`` goes between a kind and its count."""
        kinds = ", ".join(f"{kind}{sep}{n}" for kind, n in self.counts.most_common())
        return f"{self.total} ({kinds})" if kinds else "0"

    def to_json(self) -> dict:
        return dict(self.counts.most_common())


class UnreadableFiles:
    """Files a scan could not read, each counted once (a dump can fail in two places)."""

    def __init__(self) -> None:
        self.tally = ReasonTally()
        self._seen: set[str] = set()

    def add(self, exc: FormatError) -> None:
        where = exc.path or str(exc)
        if where not in self._seen:
            self._seen.add(where)
            self.tally.add(reason_kind(exc.reason), where, str(exc))


@dataclass
class Coverage:
    """What a whole-network compare did with each of its tensor pairs."""

    total: int = 0
    compared: int = 0
    skipped: ReasonTally = field(default_factory=ReasonTally)
    unreadable: ReasonTally = field(default_factory=ReasonTally)
    not_reached: int = 0     # interrupted before these rows ran

    @property
    def eligible(self) -> int:
        """Pairs that had both sides: compared, unreadable, or skipped for a reason that is not
        a missing counterpart (the denominator of the coverage)."""
        skipped = sum(n for kind, n in self.skipped.counts.items() if kind not in NO_COUNTERPART)
        return self.compared + self.unreadable.total + skipped

    @property
    def percent(self) -> float | None:
        return 100.0 * self.compared / self.eligible if self.eligible else None

    def summary_line(self) -> str:
        parts = [f"compared {self.compared} of {self.total} tensor{'s' * (self.total != 1)}"]
        if self.skipped.total:
            parts.append(f"skipped {self.skipped.text()}")
        if self.unreadable.total:
            parts.append(f"unreadable {self.unreadable.text(': ')}")
        if self.not_reached:
            parts.append(f"not reached {self.not_reached} (interrupted)")
        return "; ".join(parts)

    @property
    def examples(self) -> list[tuple[str, str]]:
        """Unreadable files first (they are what a gate fails on), then skipped tensors."""
        return (self.unreadable.examples + self.skipped.examples)[:EXAMPLES]

    def example_lines(self, where_more: str) -> list[str]:
        """Indented ``file: reason`` lines, and where to find the rest."""
        lines = [f"  {reason if where in reason else f'{where}: {reason}'}" for where, reason in self.examples]
        rest = self.unreadable.total + self.skipped.total - len(lines)
        if lines and rest > 0:
            lines.append(f"  ... {rest} more ({where_more})")
        return lines

    @property
    def hurt(self) -> bool:
        """Something with a counterpart was not compared (worth a warning, not just a note)."""
        return self.compared < self.eligible or self.compared == 0 or bool(self.not_reached)

    def gate(self, min_coverage: float) -> str | None:
        """Why a CI gate cannot trust this compare (None: it can)."""
        why = []
        if self.compared == 0:
            why.append("no tensor pair compared")
        if self.unreadable.total:
            why.append(f"unreadable {self.unreadable.text(': ')}")
        pct = self.percent
        if self.compared and pct is not None and pct < min_coverage:
            why.append(f"coverage {pct:.1f}% ({self.compared} of {self.eligible} tensors with a "
                       f"counterpart) is below --min-coverage {min_coverage:g}%")
        return "; ".join(why) or None

    def to_json(self) -> dict:
        pct = self.percent
        return {"total": self.total, "compared": self.compared, "eligible": self.eligible,
                "coverage_percent": round(pct, 3) if pct is not None else None,
                "skipped": self.skipped.to_json(), "unreadable": self.unreadable.to_json(),
                "not_reached": self.not_reached,
                "examples": [{"where": w, "reason": r} for w, r in self.examples]}
