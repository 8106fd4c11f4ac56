"""What a training-log reader yields: named float64 series over integer steps, the loss-scale
records it saw, and one line per file saying what was read or skipped.

Steps that repeat or go back are resolved the way TensorBoard's data server does ("preemption",
tensorboard-data-server's reservoir): a point at step ``s`` drops every earlier point of the same
series at a step ``>= s``, so a restarted job's re-logged steps (and the later of two lines of
one step) win. Readers append points in file order and call :func:`preempt` once at the end.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np


def printable(name: str) -> str:
    """A name from a file, safe to print: control characters escaped, at most 80 characters."""
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in name)
    return text if len(text) <= 80 else text[:77] + "..."


def normal_name(name: str) -> str:
    """How names are matched: lower case, spaces and dashes as ``_`` (``loss-scale`` and
    Megatron's ``loss scale`` both read as ``loss_scale``)."""
    return re.sub(r"[\s\-]+", "_", name.strip().lower())


@dataclass
class Series:
    steps: np.ndarray      # int64, strictly increasing after preempt()
    values: np.ndarray     # float64

    def __len__(self) -> int:
        return len(self.steps)


def preempt(steps: np.ndarray, values: np.ndarray) -> tuple[Series, int]:
    """Keep point i when every later point has a larger step; returns the series and how many
    points were dropped."""
    steps = np.asarray(steps, dtype=np.int64)
    values = np.asarray(values, dtype=np.float64)
    if len(steps) == 0 or bool(np.all(steps[1:] > steps[:-1])):
        return Series(steps, values), 0
    later_min = np.minimum.accumulate(steps[::-1])[::-1]          # min over j >= i
    after = np.append(later_min[1:], np.iinfo(np.int64).max)      # min over j > i
    keep = steps < after
    return Series(steps[keep], values[keep]), int(len(steps) - keep.sum())


@dataclass
class ScaleDrop:
    step: int
    before: float
    after: float


@dataclass
class LogRead:
    """One TARGET or GOLDEN as read: ``metrics`` by tag/column name in first-seen order;
    ``skipped`` steps from explicit skip records; ``drops`` from explicit overflow lines
    (DeepSpeed); ``lines``: one per file read (what was found), ``warnings``: one per problem."""

    path: str
    kinds: list[str] = field(default_factory=list)
    metrics: dict[str, Series] = field(default_factory=dict)
    skipped: list[int] = field(default_factory=list)
    drops: list[ScaleDrop] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def describe(self, path: str, kind: str, metrics: dict[str, Series], extra: str = "") -> None:
        """The one line saying what ``path`` held."""
        if kind not in self.kinds:
            self.kinds.append(kind)
        if not metrics:
            self.lines.append(f"{path}: {kind}, no scalar series{extra}")
            return
        lo = min(int(s.steps[0]) for s in metrics.values() if len(s))
        hi = max(int(s.steps[-1]) for s in metrics.values() if len(s))
        names = ", ".join(printable(n) for n in list(metrics)[:6])
        more = f" (+{len(metrics) - 6} more)" if len(metrics) > 6 else ""
        points = max(len(s) for s in metrics.values())
        self.lines.append(f"{path}: {kind}, {len(metrics)} series ({names}{more}), "
                          f"steps {lo}..{hi} ({points} points){extra}")


class SeriesBuilder:
    """Points appended in file order per series name; :meth:`finish` applies :func:`preempt`."""

    def __init__(self) -> None:
        self.chunks: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
        self.pending: dict[str, tuple[list, list]] = {}

    def add(self, name: str, step: int, value: float) -> None:
        if name not in self.pending:
            self.chunks.setdefault(name, [])
            self.pending[name] = ([], [])
        steps, values = self.pending[name]
        steps.append(step)
        values.append(value)

    def _flush(self, name: str) -> None:
        steps, values = self.pending.pop(name, ([], []))
        if steps:
            self.chunks[name].append((np.array(steps, dtype=np.int64), np.array(values, dtype=np.float64)))

    def extend(self, name: str, steps, values) -> None:
        """Whole arrays at once (the C event scanner's output)."""
        self.chunks.setdefault(name, [])
        self._flush(name)
        self.chunks[name].append((np.asarray(steps, dtype=np.int64), np.asarray(values, dtype=np.float64)))

    def counts(self) -> dict[str, int]:
        return {name: sum(len(s) for s, _ in parts) + len(self.pending.get(name, ([], []))[0])
                for name, parts in self.chunks.items()}

    def finish(self) -> tuple[dict[str, Series], int]:
        out, dropped = {}, 0
        for name in list(self.chunks):
            self._flush(name)
            parts = self.chunks[name]
            steps = np.concatenate([s for s, _ in parts]) if parts else np.zeros(0, np.int64)
            values = np.concatenate([v for _, v in parts]) if parts else np.zeros(0)
            out[name], n = preempt(steps, values)
            dropped += n
        return out, dropped


def preempt_warning(path: str, dropped: int) -> str:
    return (f"{path}: steps repeat or go back at {dropped} point{'s' * (dropped != 1)} (a restarted "
            "run, or several ranks in one file): the later value of a step wins, as TensorBoard does")
