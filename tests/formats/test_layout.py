"""Layout restore is the exact inverse of the device layouts of formats.md §7.

The forward transforms here are written element by element from the index formulas (where each
logical element lands in the device array, padding zero), independently of the reshape/transpose
code under test.
"""

from __future__ import annotations

import itertools
import math

import ml_dtypes
import numpy as np
import pytest

from precision_shell.errors import FormatError
from precision_shell.formats.layout import restore_layout

RNG = np.random.default_rng(7)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def logical(shape, dtype=np.float32) -> np.ndarray:
    # distinct non-zero values so a misplaced element or a padding zero cannot go unnoticed
    return (np.arange(math.prod(shape), dtype=np.float64) + 1).reshape(shape).astype(dtype)


def to_nc1hwc0(x: np.ndarray, c0: int) -> np.ndarray:
    n, c, h, w = x.shape
    out = np.zeros((n, ceil_div(c, c0), h, w, c0), x.dtype)
    for ni, ci, hi, wi in itertools.product(range(n), range(c), range(h), range(w)):
        out[ni, ci // c0, hi, wi, ci % c0] = x[ni, ci, hi, wi]
    return out


def to_ndc1hwc0(x: np.ndarray, c0: int) -> np.ndarray:
    n, c, d, h, w = x.shape
    out = np.zeros((n, d, ceil_div(c, c0), h, w, c0), x.dtype)
    for ni, ci, di, hi, wi in itertools.product(*map(range, x.shape)):
        out[ni, di, ci // c0, hi, wi, ci % c0] = x[ni, ci, di, hi, wi]
    return out


def to_fractal_z(x: np.ndarray, c0: int, n0: int = 16) -> np.ndarray:
    n, c, h, w = x.shape
    c1 = ceil_div(c, c0)
    out = np.zeros((c1 * h * w, ceil_div(n, n0), n0, c0), x.dtype)
    for ni, ci, hi, wi in itertools.product(range(n), range(c), range(h), range(w)):
        out[(ci // c0) * h * w + hi * w + wi, ni // n0, ni % n0, ci % c0] = x[ni, ci, hi, wi]
    return out


def to_fractal_z_c04(x: np.ndarray, c0: int, n0: int = 16) -> np.ndarray:
    # GE: C padded to 4, K = (h*W + w)*4 + c, K split into (K // C0, K % C0)
    n, c, h, w = x.shape
    out = np.zeros((ceil_div(h * w * 4, c0), ceil_div(n, n0), n0, c0), x.dtype)
    for ni, ci, hi, wi in itertools.product(range(n), range(c), range(h), range(w)):
        k = (hi * w + wi) * 4 + ci
        out[k // c0, ni // n0, ni % n0, k % c0] = x[ni, ci, hi, wi]
    return out


def to_fractal_nz(x: np.ndarray, c0: int, n0: int = 16) -> np.ndarray:
    if x.ndim == 1:
        x = x.reshape(1, -1)
    *batch, n, c = x.shape
    out = np.zeros((*batch, ceil_div(c, c0), ceil_div(n, n0), n0, c0), x.dtype)
    for idx in itertools.product(*map(range, x.shape)):
        *b, ni, ci = idx
        out[(*b, ci // c0, ni // n0, ni % n0, ci % c0)] = x[idx]
    return out


@pytest.mark.parametrize("shape, c0", [((2, 19, 3, 2), 16), ((1, 16, 2, 2), 16), ((2, 5, 2, 3), 32),
                                       ((1, 3, 4, 4), 4), ((3, 9, 1, 2), 8)])
def test_nc1hwc0_to_nchw(shape, c0):
    x = logical(shape)
    dev = to_nc1hwc0(x, c0)
    got = restore_layout(dev, "NC1HWC0", shape)
    assert got.shape == x.shape and got.flags.c_contiguous
    np.testing.assert_array_equal(got, x)


def test_nc1hwc0_to_nhwc_and_hwcn():
    x = logical((2, 19, 3, 2))
    dev = to_nc1hwc0(x, 16)
    nhwc = x.transpose(0, 2, 3, 1)
    np.testing.assert_array_equal(restore_layout(dev, "NC1HWC0", nhwc.shape, target_format="NHWC"), nhwc)
    hwcn = x.transpose(2, 3, 1, 0)
    np.testing.assert_array_equal(restore_layout(dev, "FORMAT_NC1HWC0", hwcn.shape, target_format="hwcn"), hwcn)


def test_nc1hwc0_without_logical_shape_keeps_padding():
    x = logical((1, 5, 2, 2))
    got = restore_layout(to_nc1hwc0(x, 16), 3, None)  # format given as its code
    assert got.shape == (1, 16, 2, 2)
    np.testing.assert_array_equal(got[:, :5], x)
    assert not got[:, 5:].any()


def test_nc1hwc0_c04():
    x = logical((2, 3, 3, 3))
    np.testing.assert_array_equal(restore_layout(to_nc1hwc0(x, 4), "NC1HWC0_C04", x.shape), x)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.int8, np.int32, np.bool_])
def test_restore_keeps_every_dtype_exact(dtype):
    x = (logical((2, 7, 2, 3)) % 2 if dtype is np.bool_ else logical((2, 7, 2, 3)) % 100).astype(dtype)
    got = restore_layout(to_nc1hwc0(x, 16), "NC1HWC0", x.shape)
    assert got.dtype == x.dtype
    np.testing.assert_array_equal(got.view(np.uint8), x.view(np.uint8))


@pytest.mark.parametrize("shape, c0", [((2, 21, 2, 3, 2), 16), ((1, 4, 3, 2, 2), 8)])
def test_ndc1hwc0(shape, c0):
    x = logical(shape)
    dev = to_ndc1hwc0(x, c0)
    np.testing.assert_array_equal(restore_layout(dev, "NDC1HWC0", shape), x)
    ndhwc = x.transpose(0, 2, 3, 4, 1)
    np.testing.assert_array_equal(restore_layout(dev, "NDC1HWC0", ndhwc.shape, target_format="NDHWC"), ndhwc)


@pytest.mark.parametrize("shape, c0, n0", [((20, 19, 3, 3), 16, 16), ((16, 16, 1, 1), 16, 16),
                                           ((5, 40, 2, 1), 32, 16), ((3, 2, 2, 2), 4, 16)])
def test_fractal_z(shape, c0, n0):
    x = logical(shape)
    dev = to_fractal_z(x, c0, n0)
    np.testing.assert_array_equal(restore_layout(dev, "FRACTAL_Z", shape), x)
    hwcn = x.transpose(2, 3, 1, 0)
    np.testing.assert_array_equal(restore_layout(dev, "FRACTAL_Z", hwcn.shape, target_format="HWCN"), hwcn)


@pytest.mark.parametrize("shape, c0", [((18, 3, 3, 3), 16), ((4, 1, 2, 5), 16), ((17, 4, 3, 3), 4)])
def test_fractal_z_c04(shape, c0):
    x = logical(shape)
    np.testing.assert_array_equal(restore_layout(to_fractal_z_c04(x, c0), "FRACTAL_Z_C04", shape), x)


def test_fractal_z_c04_with_c0_4_is_fractal_z_with_one_c1():
    x = logical((5, 3, 2, 2))
    np.testing.assert_array_equal(to_fractal_z_c04(x, 4), to_fractal_z(x, 4))


@pytest.mark.parametrize("shape, c0, n0, fmt", [
    ((20, 33), 16, 16, "FRACTAL_NZ"),
    ((2, 3, 17, 5), 16, 16, "FRACTAL_NZ"),
    ((3, 40, 9), 32, 16, "FRACTAL_NZ"),
    ((7, 12), 8, 16, "FRACTAL_NZ_C0_8"),
    ((21,), 16, 16, "FRACTAL_NZ"),
])
def test_fractal_nz(shape, c0, n0, fmt):
    x = logical(shape)
    dev = to_fractal_nz(x, c0, n0)
    got = restore_layout(dev, fmt, shape)
    assert got.shape == x.shape
    np.testing.assert_array_equal(got, x)


def test_fractal_nz_without_logical_shape_keeps_padding():
    x = logical((2, 3, 5))
    got = restore_layout(to_fractal_nz(x, 16), "FRACTAL_NZ", None)
    assert got.shape == (2, 16, 16)
    np.testing.assert_array_equal(got[:, :3, :5], x)
    assert got.sum() == x.sum()


def test_plain_formats_reshape_only():
    x = logical((2, 3, 4))
    np.testing.assert_array_equal(restore_layout(x.reshape(-1), "ND", (2, 3, 4)), x)
    np.testing.assert_array_equal(restore_layout(x, "NCHW", None), x)
    with pytest.raises(FormatError, match="cannot hold"):
        restore_layout(x, "ND", (5, 5), path="/d/f")


@pytest.mark.parametrize("dev_shape, fmt, original, kwargs, message", [
    ((1, 1, 2, 2, 16), "NC1HWC0", (1, 17, 2, 2), {}, "cannot hold"),       # C > C1*C0
    ((1, 2, 2, 2, 16), "NC1HWC0", (2, 17, 2, 2), {}, "cannot hold"),       # N differs
    ((1, 2, 2, 16), "NC1HWC0", (1, 17, 2, 2), {}, "not a 5-D"),
    ((4, 1, 16, 16), "FRACTAL_Z", (16, 16, 3, 1), {}, "not a multiple"),
    ((4, 1, 16, 16), "FRACTAL_Z", (17, 16, 2, 2), {}, "cannot hold"),
    ((4, 1, 16, 16), "FRACTAL_Z", (16, 16, 2, 2), {"sub_format": 2}, "group-convolution"),
    ((4, 1, 16, 16), "FRACTAL_Z", None, {}, "needs the logical shape"),
    ((1, 2, 16, 16), "FRACTAL_NZ", (33, 16), {}, "cannot hold"),
    ((2, 1, 2, 16, 16), "FRACTAL_NZ", (3, 20, 16), {}, "cannot hold"),    # batch 2 vs 3
    ((16, 16), "FRACTAL_NZ", (16, 16), {}, "needs >= 4 dims"),
    ((2, 2, 16, 16), "FRACTAL_Z_3D", (2, 2, 2, 2), {}, "no converter from FRACTAL_Z_3D"),
    ((2, 2, 16, 16), 200, (2, 2, 2, 2), {}, "no converter from FORMAT_200"),
    ((1, 1, 2, 2, 16), "NC1HWC0", (1, 16, 2, 2), {"target_format": "NCDHW"}, "no converter"),
])
def test_shapes_that_do_not_fit_raise_format_error(dev_shape, fmt, original, kwargs, message):
    with pytest.raises(FormatError) as e:
        restore_layout(np.zeros(dev_shape, np.float16), fmt, original, path="/dump/Conv.c.1.2.3", **kwargs)
    assert str(e.value).startswith("/dump/Conv.c.1.2.3: ") and message in str(e.value)


def test_random_sizes_round_trip():
    for _ in range(20):
        n, c, h, w = (int(v) for v in RNG.integers(1, 6, size=4))
        c += int(RNG.integers(0, 30))
        c0 = int(RNG.choice([4, 8, 16, 32]))
        x = RNG.standard_normal((n, c, h, w)).astype(np.float16)
        np.testing.assert_array_equal(restore_layout(to_nc1hwc0(x, c0), "NC1HWC0", x.shape), x)
        np.testing.assert_array_equal(restore_layout(to_fractal_z(x, c0), "FRACTAL_Z", x.shape), x)
        m = x.reshape(n * c, h * w)
        np.testing.assert_array_equal(restore_layout(to_fractal_nz(m, c0), "FRACTAL_NZ", m.shape), m)


@pytest.mark.parametrize("fmt, to_device, shape, target", [
    ("NC1HWC0", lambda x: to_nc1hwc0(x, 16), (2, 19, 3, 5), "NHWC"),
    ("NDC1HWC0", lambda x: to_ndc1hwc0(x, 16), (2, 3, 19, 2, 2), "NCDHW"),
    ("FRACTAL_Z", lambda x: to_fractal_z(x, 16), (20, 19, 3, 3), "HWCN"),
    ("FRACTAL_Z_C04", lambda x: to_fractal_z_c04(x, 4), (17, 3, 3, 3), "NCHW"),
    ("FRACTAL_Z_C04", lambda x: to_fractal_z_c04(x, 16), (18, 3, 3, 3), "NCHW"),
    ("FRACTAL_NZ", lambda x: to_fractal_nz(x, 16), (2, 20, 33), None),
])
def test_restore_is_one_copy_into_the_array_alloc_gives(fmt, to_device, shape, target):
    """Every device layout is written once, straight into the array ``alloc`` returns (a
    compare's reusable buffer), in the target's axis order."""
    from precision_shell.formats.layout import _FROM_NCHW

    x = logical(shape, np.float16)
    want = x.transpose(_FROM_NCHW[target]) if target in _FROM_NCHW and target != "NCHW" else x
    given = []

    def alloc(out_shape, dtype):
        given.append(np.full(out_shape, np.nan, dtype))
        return given[-1]

    got = restore_layout(to_device(x), fmt, want.shape, target_format=target, alloc=alloc)
    assert len(given) == 1 and np.shares_memory(got, given[0]) and got.flags.c_contiguous
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dev_shape, fmt, shape", [((2, 1, 3, 3, 0), "NC1HWC0", (2, 0, 3, 3)),
                                                   ((1, 0, 16, 0), "FRACTAL_NZ", (0, 0))])
def test_zero_sized_device_dims_restore_to_an_empty_array(dev_shape, fmt, shape):
    got = restore_layout(np.empty(dev_shape, np.float16), fmt, shape)
    assert got.shape == shape and got.size == 0
