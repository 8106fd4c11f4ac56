"""Restore a tensor from its NPU device layout to its logical shape (formats.md §7, A.6).

C0, C1, N0 and N1 are always read from the device shape (the last dim is C0): the cube size
depends on dtype and chip (16 for fp16, 32 for int8, 4 for the *_C04 formats, 8 for some NZ
variants), so a hard-coded 16 would silently scramble data.

Every converter returns a C-contiguous array and raises :class:`FormatError` (never a bare numpy
error) when the device shape cannot hold the logical shape. Each device layout is restored with
one copy: the logical array is allocated in its final axis order (by ``alloc``, default
``np.empty``: a compare passes reusable buffers) and the device data is copied into a strided view
of it, the C1/C0 split of the channel axis included (a transpose-reshape-slice-transpose chain
copies twice: 2.4x the time on a 300 MB NC1HWC0 tensor).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from ..errors import FormatError
from .dtypes import normalize_format
from .quoting import clipped, shown
from .shapes import check_dims

# Formats whose bytes are already in logical order: restoring is a reshape.
PLAIN_LAYOUTS = frozenset({
    "ND", "NCHW", "NHWC", "HWCN", "CHWN", "NCDHW", "NDHWC", "DHWCN", "DHWNC", "NC", "CN", "NCL", "MD",
})
# Device layouts with a converter here.
DEVICE_LAYOUTS = frozenset({
    "NC1HWC0", "NC1HWC0_C04", "NDC1HWC0", "FRACTAL_Z", "FRACTAL_Z_C04", "FRACTAL_NZ",
    "FRACTAL_NZ_C0_16", "FRACTAL_NZ_C0_32", "FRACTAL_NZ_C0_2", "FRACTAL_NZ_C0_4", "FRACTAL_NZ_C0_8",
})

# Axis order of each supported 4-D / 5-D target format, as a permutation of NCHW / NCDHW.
_FROM_NCHW = {"NCHW": (0, 1, 2, 3), "NHWC": (0, 2, 3, 1), "HWCN": (2, 3, 1, 0), "CHWN": (1, 2, 3, 0)}
_FROM_NCDHW = {"NCDHW": (0, 1, 2, 3, 4), "NDHWC": (0, 2, 3, 4, 1), "DHWCN": (2, 3, 4, 1, 0)}


def has_converter(device_format: str | int) -> bool:
    return normalize_format(device_format) in DEVICE_LAYOUTS


Alloc = Callable[[tuple[int, ...], np.dtype], np.ndarray]


def restore_layout(arr: np.ndarray, device_format: str | int, original_shape: Sequence[int] | None, *,
                   target_format: str | None = None, sub_format: int = 0,
                   path: str | None = None, alloc: Alloc = np.empty) -> np.ndarray:
    """``arr`` (in device layout ``device_format``) as a logical tensor of ``original_shape``.

    ``original_shape`` is read in ``target_format`` (default NCHW for 4-D device layouts,
    NCDHW for NDC1HWC0, ND for FRACTAL_NZ). ``None`` restores without slicing the padding where
    the logical dims can be derived from the device shape alone. ``alloc(shape, dtype)`` gives
    the C-contiguous array the result is written to (plain layouts are only reshaped).
    """
    fmt = normalize_format(device_format)
    target = normalize_format(target_format) if target_format else None
    shape = tuple(int(d) for d in original_shape) if original_shape is not None else None
    if shape is not None:
        check_dims(shape, path, "logical shape")
    try:
        if fmt in PLAIN_LAYOUTS:
            return _reshape_only(arr, fmt, shape, path)
        if fmt in ("NC1HWC0", "NC1HWC0_C04"):
            return _from_nc1hwc0(arr, fmt, shape, target or "NCHW", path, alloc)
        if fmt == "NDC1HWC0":
            return _from_ndc1hwc0(arr, shape, target or "NCDHW", path, alloc)
        if fmt == "FRACTAL_Z":
            if sub_format > 1:
                raise FormatError(path, f"no converter from group-convolution FRACTAL_Z (sub_format={sub_format}) "
                                        "to logical layout")
            return _from_fractal_z(arr, shape, target or "NCHW", path, alloc)
        if fmt == "FRACTAL_Z_C04":
            return _from_fractal_z_c04(arr, shape, target or "NCHW", path, alloc)
        if fmt.startswith("FRACTAL_NZ"):
            return _from_fractal_nz(arr, fmt, shape, path, alloc)
    except (ValueError, IndexError, OverflowError, MemoryError) as e:
        # The explicit checks below should catch every inconsistent shape; this is the safety
        # net that keeps a numpy error from reaching the user as a traceback.
        raise FormatError(path, f"cannot restore {fmt} shape {list(arr.shape)} to {_show(shape)}: {clipped(e)}") from None
    raise FormatError(path, f"no converter from {fmt} to logical layout")


def _show(shape: tuple[int, ...] | None) -> str:
    return "its padded shape" if shape is None else shown(list(shape))


def _cannot_hold(path, fmt: str, arr: np.ndarray, shape, why: str) -> FormatError:
    return FormatError(path, f"{fmt} device shape {list(arr.shape)} cannot hold logical shape "
                             f"{_show(shape)}: {why}")


def _split_axis(view: np.ndarray, axis: int, inner: int) -> np.ndarray:
    """``view`` with axis ``axis`` split into (len // inner, inner): always a view (a reshape
    could silently copy, and the copy would be written instead of ``view``)."""
    n = view.shape[axis]
    stride = view.strides[axis]
    # as_strided rebuilds the array from its __array_interface__, whose type string numpy cannot
    # parse back for ml_dtypes types ('<f1' of float8_e5m2, '<V1' of the others): the layout
    # moves bytes, not values, so the view is made on same-width unsigned integers
    bits = _BITS_OF_WIDTH.get(view.dtype.itemsize) if view.dtype.isbuiltin != 1 else None
    source = view.view(bits) if bits is not None else view
    split = np.lib.stride_tricks.as_strided(
        source, view.shape[:axis] + (n // inner, inner) + view.shape[axis + 1:],
        view.strides[:axis] + (stride * inner, stride) + view.strides[axis + 1:], writeable=True)
    return split.view(view.dtype) if bits is not None else split


_BITS_OF_WIDTH = {1: np.dtype(np.uint8), 2: np.dtype(np.uint16), 4: np.dtype(np.uint32), 8: np.dtype(np.uint64)}


def _gather(src: np.ndarray, axis: int | None, channels: int, perm: Sequence[int], alloc: Alloc) -> np.ndarray:
    """One copy of ``src`` into a new C-contiguous array: ``src`` is a view in logical axis order
    except that axes ``axis`` and ``axis + 1`` are C1 and C0 (``axis`` None: no split axis), which
    become one axis of the first ``channels`` of C1*C0; the result's axes are then ``perm`` of
    that (the target format's order)."""
    if axis is None:
        logical = src.shape
    else:
        logical = src.shape[:axis] + (channels,) + src.shape[axis + 2:]
    out = alloc(tuple(logical[p] for p in perm), src.dtype)
    view = out.transpose(np.argsort(perm))          # ``out`` seen in logical axis order
    if axis is None:
        np.copyto(view, src)
        return out
    if out.size == 0:       # C0 (or any other dim) 0: nothing to copy, no split to make
        return out
    c0 = src.shape[axis + 1]
    full, rest = divmod(channels, c0)
    lead = (slice(None),) * axis
    if full:
        np.copyto(_split_axis(view[lead + (slice(0, full * c0),)], axis, c0), src[lead + (slice(0, full),)])
    if rest:
        np.copyto(view[lead + (slice(full * c0, channels),)], src[lead + (full, slice(0, rest))])
    return out


def _reshape_only(arr, fmt, shape, path):
    if shape is None:
        return arr
    if math.prod(shape) != arr.size:
        raise _cannot_hold(path, fmt, arr, shape, f"{arr.size} elements vs {math.prod(shape)}")
    return arr.reshape(shape)


def _require_rank(arr, fmt, rank, path):
    if arr.ndim != rank:
        raise FormatError(path, f"device shape {list(arr.shape)} is not a {rank}-D {fmt} shape")


def _logical_nchw(fmt, arr, shape, target, path, perms) -> tuple[int, ...]:
    """``shape`` (written in ``target`` order) reordered to NCHW / NCDHW."""
    if target not in perms:
        raise FormatError(path, f"no converter from {fmt} to {target}")
    perm = perms[target]
    if len(shape) != len(perm):
        raise _cannot_hold(path, fmt, arr, shape, f"a {target} shape needs {len(perm)} dims")
    canonical = [0] * len(perm)
    for out_axis, canon_axis in enumerate(perm):
        canonical[canon_axis] = shape[out_axis]
    return tuple(canonical)


def _from_nc1hwc0(arr, fmt, shape, target, path, alloc):
    _require_rank(arr, fmt, 5, path)
    n, c1, h, w, c0 = arr.shape
    if shape is None:
        want = (n, c1 * c0, h, w)
        if target not in _FROM_NCHW:
            raise FormatError(path, f"no converter from {fmt} to {target}")
    elif len(shape) != 4:
        return _reshape_only(arr, fmt, shape, path)  # msaccucmp: 4-D formats with other ranks are reshaped
    else:
        want = _logical_nchw(fmt, arr, shape, target, path, _FROM_NCHW)
    ln, lc, lh, lw = want
    if (ln, lh, lw) != (n, h, w) or lc > c1 * c0:
        raise _cannot_hold(path, fmt, arr, shape, f"needs N,H,W = {n},{h},{w} and C <= C1*C0 = {c1 * c0}")
    return _gather(arr.transpose(0, 1, 4, 2, 3), 1, lc, _FROM_NCHW[target], alloc)


def _from_ndc1hwc0(arr, shape, target, path, alloc):
    fmt = "NDC1HWC0"
    _require_rank(arr, fmt, 6, path)
    n, d, c1, h, w, c0 = arr.shape
    if shape is None:
        want = (n, c1 * c0, d, h, w)
        if target not in _FROM_NCDHW:
            raise FormatError(path, f"no converter from {fmt} to {target}")
    elif len(shape) != 5:
        return _reshape_only(arr, fmt, shape, path)
    else:
        want = _logical_nchw(fmt, arr, shape, target, path, _FROM_NCDHW)
    ln, lc, ld, lh, lw = want
    if (ln, ld, lh, lw) != (n, d, h, w) or lc > c1 * c0:
        raise _cannot_hold(path, fmt, arr, shape,
                           f"needs N,D,H,W = {n},{d},{h},{w} and C <= C1*C0 = {c1 * c0}")
    return _gather(arr.transpose(0, 2, 5, 1, 3, 4), 1, lc, _FROM_NCDHW[target], alloc)


def _weight_nchw(fmt, arr, shape, target, path):
    if shape is None:
        raise FormatError(path, f"{fmt} needs the logical shape to restore (H and W are folded into dim 0)")
    _require_rank(arr, fmt, 4, path)
    return _logical_nchw(fmt, arr, shape, target, path, _FROM_NCHW)


def _from_fractal_z(arr, shape, target, path, alloc):
    fmt = "FRACTAL_Z"
    ln, lc, lh, lw = _weight_nchw(fmt, arr, shape, target, path)
    k, n1, n0, c0 = arr.shape
    hw = lh * lw
    if hw == 0 or k % hw:
        raise _cannot_hold(path, fmt, arr, shape, f"dim 0 ({k}) is not a multiple of H*W ({hw})")
    c1 = k // hw
    if lc > c1 * c0 or ln > n1 * n0:
        raise _cannot_hold(path, fmt, arr, shape, f"needs C <= {c1 * c0} and N <= {n1 * n0}")
    # (C1, H, W, N1*N0, C0) is a view of the device array (N1, N0 adjacent): to (N, C1, C0, H, W)
    src = arr.reshape(c1, lh, lw, n1 * n0, c0).transpose(3, 0, 4, 1, 2)[:ln]
    return _gather(src, 1, lc, _FROM_NCHW[target], alloc)


def _from_fractal_z_c04(arr, shape, target, path, alloc):
    """GE's FRACTAL_Z_C04: C padded to 4, (H, W, 4) flattened into the K axis, K split in C0.

    With C0 = 4 this is the same as FRACTAL_Z with C1 = 1 (the ACL doc's description).
    """
    fmt = "FRACTAL_Z_C04"
    ln, lc, lh, lw = _weight_nchw(fmt, arr, shape, target, path)
    k1, n1, n0, c0 = arr.shape
    k = lh * lw * 4
    if lc > 4 or k > k1 * c0 or ln > n1 * n0:
        raise _cannot_hold(path, fmt, arr, shape,
                           f"needs C <= 4, H*W*4 <= {k1 * c0} and N <= {n1 * n0}")
    if c0 == 4:   # K = (H*W, 4): (H, W, N, C0) is a view of the device array, to (N, C, H, W)
        src = arr[:lh * lw].reshape(lh, lw, n1 * n0, 4).transpose(2, 3, 0, 1)[:ln, :lc]
        return _gather(src, None, lc, _FROM_NCHW[target], alloc)
    rows = arr.transpose(1, 2, 0, 3).reshape(n1 * n0, k1 * c0)[:ln, :k]
    nhwc = rows.reshape(ln, lh, lw, 4)[..., :lc]
    return _gather(nhwc.transpose(0, 3, 1, 2), None, lc, _FROM_NCHW[target], alloc)


def _from_fractal_nz(arr, fmt, shape, path, alloc):
    if arr.ndim < 4:
        raise FormatError(path, f"device shape {list(arr.shape)} is not a {fmt} shape (needs >= 4 dims)")
    batch = arr.shape[:-4]
    c1, n1, n0, c0 = arr.shape[-4:]
    b = math.prod(batch)
    rows = arr.reshape(b, c1, n1 * n0, c0).transpose(0, 2, 1, 3)   # (B, N, C1, C0), a view
    if shape is None:
        return _gather(rows, 2, c1 * c0, (0, 1, 2), alloc).reshape(*batch, n1 * n0, c1 * c0)
    if len(shape) >= 2:
        lbatch, ln, lc = shape[:-2], shape[-2], shape[-1]
    else:  # 1-D (or scalar) tensors are one row of the fractal
        lbatch, ln, lc = (), 1, (shape[0] if shape else 1)
    if math.prod(lbatch) != b or ln > n1 * n0 or lc > c1 * c0:
        raise _cannot_hold(path, fmt, arr, shape,
                           f"needs batch size {b}, rows <= {n1 * n0} and columns <= {c1 * c0}")
    return _gather(rows[:, :ln], 2, lc, (0, 1, 2), alloc).reshape(shape)
