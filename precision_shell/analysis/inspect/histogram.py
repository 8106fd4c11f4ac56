"""A value histogram of one tensor, as text for the terminal (``pt --hist``).

Only finite values go into the bins; nan and +/-inf are counted beside them, because one inf
would otherwise stretch the bin range until every finite value lands in a single bin. The array
is binned in chunks so a memory-mapped tensor of any size needs only chunk-sized temporaries.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

_CHUNK = 1 << 20


@dataclass
class Histogram:
    edges: list[float]          # len(counts) + 1 bin edges
    counts: list[int]
    nan: int
    pos_inf: int
    neg_inf: int
    total: int                  # all elements, finite or not

    def to_json(self) -> dict:
        return {"edges": self.edges, "counts": self.counts, "nan": self.nan,
                "pos_inf": self.pos_inf, "neg_inf": self.neg_inf, "total": self.total}


def _as_float(chunk: np.ndarray) -> np.ndarray:
    # bool/int/bfloat16 chunks binned as float64 so edges and comparisons are exact enough
    return chunk.astype(np.float64, copy=False)


def histogram(array: np.ndarray, bins: int = 20, *, chunk: int = _CHUNK) -> Histogram:
    """Counts of the finite values of ``array`` in ``bins`` equal-width bins."""
    if bins < 1:
        raise ValueError("bins must be at least 1")
    flat = array.reshape(-1)
    nan = pos_inf = neg_inf = 0
    lo, hi = math.inf, -math.inf
    # pass 1: the finite range and the non-finite counts
    for start in range(0, flat.size, chunk):
        part = _as_float(flat[start:start + chunk])
        finite = np.isfinite(part)
        if not finite.all():
            nan += int(np.isnan(part).sum())
            pos_inf += int(np.isposinf(part).sum())
            neg_inf += int(np.isneginf(part).sum())
            part = part[finite]
        if part.size:
            lo, hi = min(lo, float(part.min())), max(hi, float(part.max()))
    if lo > hi:      # nothing finite: no bins to show
        return Histogram([], [], nan, pos_inf, neg_inf, int(flat.size))
    if lo == hi:     # a constant tensor: one bin around the value
        lo, hi = lo - 0.5, hi + 0.5
        bins = 1
    elif array.dtype.kind in "biu":
        # integers: never more bins than distinct values can fill, one value per bin
        bins = max(1, min(bins, int(hi - lo) + 1))
    counts = np.zeros(bins, dtype=np.int64)
    # pass 2: the counts, with fixed edges so chunk results add up
    for start in range(0, flat.size, chunk):
        part = _as_float(flat[start:start + chunk])
        part = part[np.isfinite(part)]
        counts += np.histogram(part, bins=bins, range=(lo, hi))[0]
    edges = np.linspace(lo, hi, bins + 1)
    return Histogram([float(e) for e in edges], [int(c) for c in counts], nan, pos_inf, neg_inf,
                     int(flat.size))


def _fmt(value: float) -> str:
    return f"{value:.4g}"


def histogram_lines(hist: Histogram, width: int = 40) -> list[str]:
    """One line per bin: ``[lo, hi)  count  ####``, bars scaled to the largest bin."""
    lines: list[str] = []
    if hist.counts:
        peak = max(hist.counts) or 1
        labels = [f"[{_fmt(hist.edges[i])}, {_fmt(hist.edges[i + 1])}{']' if i == len(hist.counts) - 1 else ')'}"
                  for i in range(len(hist.counts))]
        label_width = max(len(s) for s in labels)
        count_width = max(len(str(c)) for c in hist.counts)
        for label, count in zip(labels, hist.counts):
            # a bin with any elements gets at least one mark, so rare values stay visible
            bar = "#" * (max(1, round(count / peak * width)) if count else 0)
            lines.append(f"{label.ljust(label_width)}  {str(count).rjust(count_width)}  {bar}")
    else:
        lines.append("(no finite values)")
    extra = [f"{n} {what}" for n, what in ((hist.nan, "nan"), (hist.pos_inf, "+inf"),
                                           (hist.neg_inf, "-inf")) if n]
    if extra:
        lines.append("not binned: " + ", ".join(extra))
    return lines
