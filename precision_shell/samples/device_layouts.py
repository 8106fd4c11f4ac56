"""Logical -> NPU device layout transforms used by the sample generator (formats.md §7).

These are the forward direction of what a reader must undo: the generator keeps every tensor in
its logical shape and only lays it out for the device when writing a dump or a graph descriptor.
Channel / row padding is filled with zeros, as GE's TransData does, so a reader that forgets to
slice the padding off sees zeros rather than plausible-looking garbage.

C0 (the cube unit) is 16 for every 16- and 32-bit dtype the samples use (fp16, bf16, fp32, int32);
8-bit types (the lowprec variant's float8) pass 32 (formats.md Appendix B).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

C0 = 16

# OutputFormat codes of toolkit.dumpdata (formats.md §1.3) for the layouts the samples use.
FORMAT_CODES = {"NCHW": 0, "NHWC": 1, "ND": 2, "NC1HWC0": 3, "FRACTAL_Z": 4, "FRACTAL_NZ": 29}
PLAIN_FORMATS = frozenset({"NCHW", "NHWC", "ND"})


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def device_shape(logical_shape: Sequence[int], fmt: str, c0: int = C0) -> tuple[int, ...]:
    """Shape of a tensor of ``logical_shape`` laid out as ``fmt`` (padded dims included)."""
    shape = tuple(int(d) for d in logical_shape)
    if fmt in PLAIN_FORMATS:
        return shape
    if fmt == "NC1HWC0":
        n, c, h, w = _expect_rank(shape, 4, fmt)
        return (n, _ceil_div(c, c0), h, w, c0)
    if fmt == "FRACTAL_Z":
        n, c, h, w = _expect_rank(shape, 4, fmt)
        return (_ceil_div(c, c0) * h * w, _ceil_div(n, C0), C0, c0)
    if fmt == "FRACTAL_NZ":
        if len(shape) < 2:
            raise ValueError(f"FRACTAL_NZ needs a logical rank >= 2, got {list(shape)}")
        *batch, rows, cols = shape
        return (*batch, _ceil_div(cols, c0), _ceil_div(rows, C0), C0, c0)
    raise ValueError(f"no sample layout for format {fmt!r}")


def to_device(arr: np.ndarray, fmt: str, c0: int = C0) -> np.ndarray:
    """``arr`` (logical shape) laid out as ``fmt``; a new C-contiguous array, same dtype."""
    if fmt in PLAIN_FORMATS:
        return np.ascontiguousarray(arr)
    if fmt == "NC1HWC0":
        return nchw_to_nc1hwc0(arr, c0)
    if fmt == "FRACTAL_Z":
        return nchw_to_fractal_z(arr, c0)
    if fmt == "FRACTAL_NZ":
        return nd_to_fractal_nz(arr, c0)
    raise ValueError(f"no sample layout for format {fmt!r}")


def nchw_to_nc1hwc0(arr: np.ndarray, c0: int = C0) -> np.ndarray:
    """(N, C, H, W) -> (N, C1, H, W, C0), channels zero-padded to C1*C0."""
    n, c, h, w = _expect_rank(arr.shape, 4, "NC1HWC0")
    c1 = _ceil_div(c, c0)
    padded = _pad_axis(arr, 1, c1 * c0)
    return np.ascontiguousarray(padded.reshape(n, c1, c0, h, w).transpose(0, 1, 3, 4, 2))


def nchw_to_fractal_z(arr: np.ndarray, c0: int = C0) -> np.ndarray:
    """Conv weights (N=Cout, C=Cin, H, W) -> FRACTAL_Z (C1*H*W, N1, N0=16, C0).

    Both N and C are zero-padded: N to a multiple of 16 (the cube's N0), C to C1*C0.
    """
    n, c, h, w = _expect_rank(arr.shape, 4, "FRACTAL_Z")
    n1, c1 = _ceil_div(n, C0), _ceil_div(c, c0)
    padded = _pad_axis(_pad_axis(arr, 0, n1 * C0), 1, c1 * c0)
    blocks = padded.reshape(n1, C0, c1, c0, h, w).transpose(2, 4, 5, 0, 1, 3)
    return np.ascontiguousarray(blocks.reshape(c1 * h * w, n1, C0, c0))


def nd_to_fractal_nz(arr: np.ndarray, c0: int = C0) -> np.ndarray:
    """(..., n, c) -> FRACTAL_NZ (..., C1, N1, N0=16, C0): rows padded to N1*16, cols to C1*C0."""
    if arr.ndim < 2:
        raise ValueError(f"FRACTAL_NZ needs a logical rank >= 2, got {list(arr.shape)}")
    *batch, rows, cols = arr.shape
    n1, c1 = _ceil_div(rows, C0), _ceil_div(cols, c0)
    padded = _pad_axis(_pad_axis(arr, arr.ndim - 2, n1 * C0), arr.ndim - 1, c1 * c0)
    flat = padded.reshape(math.prod(batch), n1, C0, c1, c0).transpose(0, 3, 1, 2, 4)
    return np.ascontiguousarray(flat.reshape(*batch, c1, n1, C0, c0))


def _pad_axis(arr: np.ndarray, axis: int, size: int) -> np.ndarray:
    extra = size - arr.shape[axis]
    if extra == 0:
        return arr
    shape = list(arr.shape)
    shape[axis] = size
    out = np.zeros(shape, dtype=arr.dtype)   # zero fill (np.pad is ~10x slower on small arrays)
    out[tuple(slice(0, d) for d in arr.shape)] = arr
    return out


def _expect_rank(shape: Sequence[int], rank: int, fmt: str) -> tuple[int, ...]:
    if len(shape) != rank:
        raise ValueError(f"{fmt} needs a logical rank-{rank} tensor, got {list(shape)}")
    return tuple(int(d) for d in shape)
