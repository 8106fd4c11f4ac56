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


def max_ulps(a: np.ndarray, b: np.ndarray, fmt: str) -> float:
    mant, emin = _FORMAT_BITS.get(fmt, _FORMAT_BITS["float64"])
    a = np.asarray(a, dtype=np.float64).reshape(-1)
    b = np.asarray(b, dtype=np.float64).reshape(-1)
    if a.size == 0:
        return 0.0
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    finite = np.isfinite(a) & np.isfinite(b)
    if not (same | finite).all():
        return float("inf")
    with np.errstate(all="ignore"):
        big = np.maximum(np.abs(a), np.abs(b))
        _, exp = np.frexp(big)
        ulp = np.ldexp(1.0, np.maximum(exp - 1, emin) - mant)
        dist = np.where(same, 0.0, np.abs(a - b) / ulp)
    return float(dist.max())


def rel_rmse(x: np.ndarray, golden: np.ndarray) -> float:
    x = np.asarray(x, dtype=np.float64).reshape(-1)
    g = np.asarray(golden, dtype=np.float64).reshape(-1)
    keep = np.isfinite(g)
    if not keep.any():
        return float("nan")
    x, g = x[keep], g[keep]
    with np.errstate(all="ignore"):
        err = np.sqrt(np.mean((x - g) ** 2))
        scale = np.sqrt(np.mean(g ** 2))
    if not np.isfinite(err):
        return float("inf")
    return float(err / scale) if scale > 0 else float(err)


def cosine(x: np.ndarray, golden: np.ndarray) -> float:
    x = np.asarray(x, dtype=np.float64).reshape(-1)
    g = np.asarray(golden, dtype=np.float64).reshape(-1)
    with np.errstate(all="ignore"):
        nx, ng = np.linalg.norm(x), np.linalg.norm(g)
        if not (np.isfinite(nx) and np.isfinite(ng)) or nx == 0 or ng == 0:
            return float("nan")
        return float(np.dot(x, g) / (nx * ng))
