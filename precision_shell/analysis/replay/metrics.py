"""Distances a replay is judged by (numpy only: pasted into the reproducer script too).

* ulps: |a - b| in units in the last place of format ``fmt`` at the larger magnitude (the
  subnormal quantum below the smallest normal); equal non-finite values are 0 apart, a NaN or
  infinity against anything else is infinitely far.
* relative RMS error: rms(x - golden) / rms(golden) over the finite golden elements.
* cosine: float64 cosine similarity (NaN when a vector is zero or non-finite).
"""

from __future__ import annotations

import numpy as np

_FORMAT_BITS = {"float64": (52, -1022), "float32": (23, -126), "float16": (10, -14),
                "bfloat16": (7, -126), "float8_e4m3fn": (3, -6), "float8_e5m2": (2, -14)}


# elements per step: temporaries stay small enough to be reused, not page-faulted in anew
CHUNK = 1 << 20


def _flat(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64).reshape(-1)


def ulps_chunk(a: np.ndarray, b: np.ndarray, mant: int, emin: int) -> float:
    differ = a != b   # replays mostly agree: measure only where they do not
    count = np.count_nonzero(differ)
    if count == 0:
        return 0.0
    if count < a.size // 4:   # else gathering costs more than measuring the equal ones too (0 apart)
        a, b = a[differ], b[differ]
    with np.errstate(all="ignore"):
        dist = a - b
        np.abs(dist, out=dist)
        if not np.isfinite(dist).all():
            same = (a == b) | (np.isnan(a) & np.isnan(b))
            if not (same | (np.isfinite(a) & np.isfinite(b))).all():
                return float("inf")
            dist[same] = 0.0
        big = np.abs(a)
        np.maximum(big, np.abs(b), out=big)
        # ulp = 2^(max(exponent, emin) - mant), built from the exponent field of the larger value
        exp = big.view(np.uint64) >> np.uint64(52)
        np.maximum(exp, np.uint64(emin + 1023), out=exp)
        exp -= np.uint64(mant)
        exp <<= np.uint64(52)
        dist /= exp.view(np.float64)
    return float(dist.max())


def ulps_format(fmt: str) -> tuple[int, int]:
    """(mantissa bits, min normal exponent) ulps of ``fmt`` are counted in."""
    return _FORMAT_BITS.get(fmt, _FORMAT_BITS["float64"])


def max_ulps(a: np.ndarray, b: np.ndarray, fmt: str) -> float:
    mant, emin = ulps_format(fmt)
    a, b = _flat(a), _flat(b)
    return max((ulps_chunk(a[i:i + CHUNK], b[i:i + CHUNK], mant, emin) for i in range(0, a.size, CHUNK)),
               default=0.0)


class GoldenChunk:
    """A slice of a golden (float64) with what every comparison against it shares: its finite
    elements and their squared sums, computed once however many replays meet it."""

    def __init__(self, g: np.ndarray):
        self.g = g
        with np.errstate(all="ignore"):
            self.keep = None if np.isfinite(g).all() else np.isfinite(g)
            self.kept = g if self.keep is None else g[self.keep]
            self.kept_gg = float(np.dot(self.kept, self.kept))
            self.gg = self.kept_gg if self.keep is None else float(np.dot(g, g))


class GoldenDistance:
    """Relative RMS error and cosine of one array vs a golden, fed a CHUNK-sized slice at a
    time (the same slices, summed in the same order, whether whole arrays or a streamed replay)."""

    def __init__(self):
        self.err2 = self.scale2 = 0.0
        self.count = 0
        self.xx = self.gg = self.xg = 0.0

    def add(self, xs: np.ndarray, golden: GoldenChunk, scratch: np.ndarray | None = None) -> None:
        """``scratch``: a float64 array at least as long as ``xs`` to compute in (no allocation)."""
        with np.errstate(all="ignore"):
            kept = xs if golden.keep is None else xs[golden.keep]
            diff = np.subtract(kept, golden.kept, out=None if scratch is None else scratch[:kept.size])
            self.err2 += float(np.dot(diff, diff))
            self.scale2 += golden.kept_gg
            self.count += golden.kept.size
            self.xx += float(np.dot(xs, xs))
            self.gg += golden.gg
            self.xg += float(np.dot(xs, golden.g))

    def rel_rmse(self) -> float:
        if self.count == 0:
            return float("nan")
        if not np.isfinite(self.err2):
            return float("inf")
        err, scale = np.sqrt(self.err2 / self.count), np.sqrt(self.scale2 / self.count)
        return float(err / scale) if scale > 0 else float(err)

    def cosine(self) -> float:
        if not (np.isfinite(self.xx) and np.isfinite(self.gg)) or self.xx == 0 or self.gg == 0:
            return float("nan")
        return float(self.xg / np.sqrt(self.xx * self.gg))


def golden_distance(x: np.ndarray, golden: np.ndarray) -> GoldenDistance:
    x, g = _flat(x), _flat(golden)
    distance = GoldenDistance()
    for i in range(0, x.size, CHUNK):
        distance.add(x[i:i + CHUNK], GoldenChunk(g[i:i + CHUNK]))
    return distance


def rel_rmse(x: np.ndarray, golden: np.ndarray) -> float:
    return golden_distance(x, golden).rel_rmse()


def cosine(x: np.ndarray, golden: np.ndarray) -> float:
    return golden_distance(x, golden).cosine()
