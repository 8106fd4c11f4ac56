"""Rounding float64 values to a number format: the arithmetic the replay profiles apply
(:mod:`.profiles` says which rounding a profile does where).

Every format is emulated on float64 arrays: ``quantize`` rounds to the values a format can hold
(nearest-even or toward zero, subnormals on the format's fixed quantum, optional flush to
zero), ``block_quantize`` applies a block-scaled recipe (MX, NVFP4) along an axis and
``hifloat8_round`` rounds to HiFloat8. numpy only: this module is pasted into the standalone
reproducer ``replay --export`` writes, before :mod:`.profiles`.
"""

from __future__ import annotations

import numpy as np

# name -> (mantissa bits, min normal exponent, largest finite value, has inf)
FORMATS = {
    "float64": (52, -1022, float(np.finfo(np.float64).max), True),
    "float32": (23, -126, float(np.finfo(np.float32).max), True),
    "float16": (10, -14, 65504.0, True),
    "bfloat16": (7, -126, float.fromhex("0x1.fep127"), True),
    "float8_e4m3fn": (3, -6, 448.0, False),
    "float8_e5m2": (2, -14, 57344.0, True),
    "float4_e2m1": (1, 0, 6.0, False),
}
# numpy casts float64 -> float32 correctly rounded and fast (its float16 cast is slow)
_NATIVE = {"float64": np.float64, "float32": np.float32}
# float16: numpy's cast is correctly rounded too, and faster than the bit path on large arrays
# only (its per-call cost dominates the short slices of a sequential reduction)
_HALF_CAST_MIN = 1 << 15
# elements quantize rounds at once (well above _HALF_CAST_MIN)
_QUANTIZE_SLICE = 1 << 18
# block-scaled recipes: element format, its largest normal's exponent (emax_elem), block size
BLOCK_RECIPES = {"mxfp8-e4m3": ("float8_e4m3fn", 8, 32), "mxfp8-e5m2": ("float8_e5m2", 15, 32),
                 "mxfp4": ("float4_e2m1", 2, 32), "nvfp4": ("float4_e2m1", 2, 16)}


def holds(wide: str, narrow: str) -> bool:
    """Every value of format ``narrow`` is one of ``wide``'s: rounding it to ``wide`` (either
    mode, with or without ftz at ``wide``'s smallest normal) changes nothing."""
    mant_n, emin_n, largest_n, _ = FORMATS[narrow]
    mant_w, emin_w, largest_w, _ = FORMATS[wide]
    return mant_n <= mant_w and emin_w <= emin_n and largest_n <= largest_w


def quantize(x: np.ndarray, fmt: str, *, bits: int | None = None, toward_zero: bool = False,
             ftz: bool = False) -> np.ndarray:
    """``x`` (float64) rounded to format ``fmt`` (``bits`` mantissa bits if given), as float64.

    Nearest-even to float32 (float16 on large arrays) is numpy's own cast (correctly rounded
    from float64). Other
    roundings work on the float64 bit pattern (nearest-even, or truncation) for normal values and
    on the format's fixed subnormal quantum below its smallest normal; values past the largest
    finite value become inf (nearest) or saturate (toward zero), NaN for formats without inf.
    ``ftz``: results below the smallest normal become signed zero."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 0:   # numpy gives scalars, not arrays, for operations on 0-d arrays
        return _quantize(x.reshape(1), fmt, bits, toward_zero, ftz).reshape(())
    if x.size > _QUANTIZE_SLICE:   # a slice at a time: the temporaries stay slices, not copies of x
        flat = x.reshape(-1)
        y = np.empty(flat.size)
        for i in range(0, flat.size, _QUANTIZE_SLICE):
            y[i:i + _QUANTIZE_SLICE] = _quantize(flat[i:i + _QUANTIZE_SLICE], fmt, bits, toward_zero, ftz)
        return y.reshape(x.shape)
    return _quantize(x, fmt, bits, toward_zero, ftz)


def _quantize(x: np.ndarray, fmt: str, bits: int | None, toward_zero: bool, ftz: bool) -> np.ndarray:
    native = _NATIVE.get(fmt)
    if fmt == "float16" and x.size >= _HALF_CAST_MIN:
        native = np.float16
    if native is not None and bits is None and not toward_zero:
        with np.errstate(over="ignore"):
            y = x.astype(native).astype(np.float64)
        return _flush_own(y, 2.0 ** FORMATS[fmt][1]) if ftz else y
    mant, emin, largest, has_inf = FORMATS[fmt]
    if bits is not None:
        mant = bits
    drop = 52 - mant
    if drop > 0:
        raw = x.view(np.uint64)
        mask = np.uint64((0xFFFFFFFFFFFFFFFF << drop) & 0xFFFFFFFFFFFFFFFF)
        if toward_zero:
            out = raw & mask
        else:   # add half an ulp minus one, plus the kept lowest bit: ties go to even
            out = raw >> np.uint64(drop)
            out &= np.uint64(1)
            out += np.uint64((1 << (drop - 1)) - 1)
            out += raw
            out &= mask
        y = out.view(np.float64)
    else:
        y = x.copy()
    mag = np.abs(x)
    tiny = 2.0 ** emin
    small = mag < tiny
    if small.any():
        small &= mag > 0
        if small.any():   # below the smallest normal: the format's fixed subnormal quantum
            quantum = 2.0 ** (emin - mant)
            scaled = x[small] / quantum
            y[small] = (np.trunc(scaled) if toward_zero else np.rint(scaled)) * quantum
    highest = mag.max(initial=0.0)
    if not highest <= largest:    # also NaN
        finite = np.isfinite(x)
        if not finite.all():
            # a carry must not turn NaN/inf bit patterns into others; no inf: NaN
            y[~finite] = x[~finite] if has_inf else np.nan
        over = finite & (np.abs(y) > largest)
        if over.any():
            if toward_zero:
                y[over] = np.copysign(largest, x[over])
            else:
                y[over] = np.copysign(np.inf, x[over]) if has_inf else np.nan
    return _flush_own(y, tiny) if ftz else y


def _flush_own(y: np.ndarray, tiny: float) -> np.ndarray:
    """Flush in place (``y`` is an array this module made)."""
    with np.errstate(invalid="ignore"):
        small = np.abs(y) < tiny
    if small.any():
        y[small] *= 0.0   # keeps the sign: -x * 0 is -0
    return y


def flush(x: np.ndarray, fmt: str) -> np.ndarray:
    """Subnormals of ``fmt`` (and anything smaller) to signed zero; ``x`` itself when none."""
    tiny = 2.0 ** FORMATS[fmt][1]
    with np.errstate(invalid="ignore"):
        small = np.abs(x) < tiny
    if not small.any():
        return x
    y = x.copy()   # subnormals are few: scaling just them beats a whole-array copysign and where
    y[small] *= 0.0   # keeps the sign: -x * 0 is -0
    return y


def block_quantize(x: np.ndarray, recipe: str, axis: int) -> np.ndarray:
    """``x`` (float64) quantized and dequantized by a block-scaled recipe along ``axis``."""
    elem, emax, size = BLOCK_RECIPES[recipe]
    top = FORMATS[elem][2]
    moved = np.moveaxis(np.asarray(x, dtype=np.float64), axis, -1)
    n = moved.shape[-1]
    nb = -(-n // size)
    blocks = np.zeros(moved.shape[:-1] + (nb * size,))
    blocks[..., :n] = moved
    blocks = blocks.reshape(moved.shape[:-1] + (nb, size))
    amax = np.where(np.isfinite(blocks), np.abs(blocks), 0.0).max(axis=-1, keepdims=True, initial=0.0)
    if recipe == "nvfp4":
        global_amax = float(amax.max(initial=0.0))
        encode = 448.0 * 6.0 / global_amax if global_amax > 0 else 1.0
        scale = quantize(np.minimum(amax / 6.0 * encode, 448.0), "float8_e4m3fn") / encode
    else:
        _, e = np.frexp(np.where(amax > 0, amax, 1.0))
        scale = np.ldexp(1.0, np.where(amax > 0, np.clip(e.astype(np.int64) - 1 - emax, -127, 127), -127))
    with np.errstate(divide="ignore", invalid="ignore"):
        scaled = np.where(scale > 0, blocks / scale, 0.0)
    y = quantize(np.clip(scaled, -top, top), elem) * scale
    y = np.where(np.isfinite(blocks), y, blocks)
    y = y.reshape(moved.shape[:-1] + (nb * size,))[..., :n]
    return np.moveaxis(y, -1, axis)


def hifloat8_round(x: np.ndarray) -> np.ndarray:
    """``x`` rounded to HiFloat8 (arXiv 2409.16626): 3 mantissa bits for |e| <= 3, 2 for 4..7,
    1 for 8..15, powers of two from 2^-16 down to 2^-22; ties away from zero; saturating at
    2^15; NaN stays NaN (the tapered precision needs its own rule, not FORMATS')."""
    x = np.asarray(x, dtype=np.float64)
    a = np.abs(x)
    _, e = np.frexp(np.where((a > 0) & np.isfinite(a), a, 1.0))
    e = e.astype(np.int64) - 1                    # a = 1.m * 2^e
    ae = np.abs(e)
    bits = np.where(ae <= 3, 3, np.where(ae <= 7, 2, np.where(ae <= 15, 1, 0)))
    quantum = np.ldexp(1.0, e - bits)
    y = np.floor(a / quantum + 0.5) * quantum
    y = np.where(e < -23, 0.0, np.where(e == -23, 2.0 ** -22, y))
    y = np.where(a > 2.0 ** 15, 2.0 ** 15, np.minimum(y, 2.0 ** 15))
    y = np.where(a == 0, 0.0, y)
    return np.where(np.isnan(x), np.nan, np.copysign(y, x))
