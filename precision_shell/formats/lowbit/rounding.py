"""Encoders: real values to the nearest value (and code) of a low-precision format.

Nearest by comparison with the exact midpoints of the format's sorted magnitudes (every midpoint
of two values of these formats is exact in float64), so no bit trick depends on the format's
layout: one code path for FP8, FP6, FP4 and HiFloat8. Ties go to the even code (OCP formats:
round-to-nearest-even, OCP MX v1.0 §6.3 and the OCP 8-bit FP spec) or away from zero
(HiFloat8: the paper's and en_dtypes' only rounding). Magnitudes beyond the largest finite value
saturate to it (``Rounded.saturated`` says which), as the MX and NVFP4 recipes clamp; NaN stays
NaN.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .catalog import LowbitFormat


@dataclass(frozen=True)
class Rounded:
    values: np.ndarray      # float64, the format's values
    codes: np.ndarray       # uint8, the codes of those values (NaN: a NaN code, or 0 without one)
    saturated: np.ndarray   # bool, |x| was above the largest finite value


@lru_cache(maxsize=None)
def _magnitudes(name: str, fmt: LowbitFormat) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Finite non-negative values ascending, their (positive) codes, the midpoints, the sign bit."""
    values = fmt.values.astype(np.float64)
    sign_bit = 1 << (fmt.bits - 1)
    positive = [c for c in range(1 << fmt.bits) if not c & sign_bit and np.isfinite(values[c])]
    if fmt.name == "float8_e8m0":       # unsigned: no sign bit
        positive = [c for c in range(256) if np.isfinite(values[c])]
        sign_bit = 0
    order = sorted(positive, key=lambda c: (values[c], c))
    mags, codes = [], []
    for c in order:
        if mags and values[c] == mags[-1]:
            continue
        mags.append(values[c])
        codes.append(c)
    mags_a = np.array(mags)
    return mags_a, np.array(codes, dtype=np.uint8), (mags_a[:-1] + mags_a[1:]) / 2, sign_bit


def round_to(x: np.ndarray, fmt: LowbitFormat) -> Rounded:
    """``x`` rounded to ``fmt`` (nearest; ties as the format's ``ties``; saturating)."""
    x = np.asarray(x, dtype=np.float64)
    mags, codes, mids, sign_bit = _magnitudes(fmt.name, fmt)
    a = np.abs(x)
    nan = np.isnan(a)
    a_safe = np.where(nan, 0.0, a)
    saturated = a_safe > mags[-1]
    below = np.searchsorted(mids, a_safe, side="left")     # mids[below-1] < a <= mids[below]
    below = np.minimum(below, mids.size)
    tie = np.zeros(a.shape, bool)
    inside = below < mids.size
    tie[inside] = a_safe[inside] == mids[below[inside]]
    pick = below.copy()
    if tie.any():
        up = below[tie] + 1
        if fmt.ties == "away":
            pick[tie] = up
        else:   # the even code of the two
            pick[tie] = np.where(codes[up] % 2 == 0, up, below[tie])
    values = np.copysign(mags[pick], x)
    out_codes = codes[pick].copy()
    negative = np.signbit(x) & (mags[pick] != 0)
    if sign_bit:
        out_codes[negative] |= np.uint8(sign_bit)
    if nan.any():
        values[nan] = np.nan
        nan_codes = fmt.nan_codes
        out_codes[nan] = nan_codes[0] if nan_codes else 0
    return Rounded(values, out_codes, saturated)
