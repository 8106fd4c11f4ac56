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


def _ulps_chunk(a: np.ndarray, b: np.ndarray, mant: int, emin: int) -> float:
    differ = a != b   # replays mostly agree: measure only where they do not
    if not differ.any():
        return 0.0
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


def max_ulps(a: np.ndarray, b: np.ndarray, fmt: str) -> float:
    mant, emin = _FORMAT_BITS.get(fmt, _FORMAT_BITS["float64"])
    a, b = _flat(a), _flat(b)
    return max((_ulps_chunk(a[i:i + CHUNK], b[i:i + CHUNK], mant, emin) for i in range(0, a.size, CHUNK)),
               default=0.0)


def rel_rmse(x: np.ndarray, golden: np.ndarray) -> float:
    x, g = _flat(x), _flat(golden)
    err2 = scale2 = 0.0
    count = 0
    with np.errstate(all="ignore"):
        for i in range(0, x.size, CHUNK):
            xs, gs = x[i:i + CHUNK], g[i:i + CHUNK]
            if not np.isfinite(gs).all():
                keep = np.isfinite(gs)
                xs, gs = xs[keep], gs[keep]
            diff = xs - gs
            err2 += float(np.dot(diff, diff))
            scale2 += float(np.dot(gs, gs))
            count += gs.size
    if count == 0:
        return float("nan")
    if not np.isfinite(err2):
        return float("inf")
    err, scale = np.sqrt(err2 / count), np.sqrt(scale2 / count)
    return float(err / scale) if scale > 0 else float(err)


def cosine(x: np.ndarray, golden: np.ndarray) -> float:
    x, g = _flat(x), _flat(golden)
    xx = gg = xg = 0.0
    with np.errstate(all="ignore"):
        for i in range(0, x.size, CHUNK):
            xs, gs = x[i:i + CHUNK], g[i:i + CHUNK]
            xx += float(np.dot(xs, xs))
            gg += float(np.dot(gs, gs))
            xg += float(np.dot(xs, gs))
    if not (np.isfinite(xx) and np.isfinite(gg)) or xx == 0 or gg == 0:
        return float("nan")
    return float(xg / np.sqrt(xx * gg))
