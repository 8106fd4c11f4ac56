"""Golden .npy: header-only reads and memory-mapped loads."""

from __future__ import annotations

import numpy as np
import pytest

from precision_shell.errors import FormatError
from precision_shell.formats.golden_npy import load_npy, read_npy_header

RNG = np.random.default_rng(11)


@pytest.mark.parametrize("arr", [
    RNG.standard_normal((3, 4, 5)).astype(np.float32),
    RNG.standard_normal((7,)).astype(np.float16),
    RNG.integers(-(2**40), 2**40, size=(2, 9)),
    RNG.integers(0, 2, size=(4, 4)).astype(bool),
    np.asfortranarray(RNG.standard_normal((3, 5))),
    np.array(3.5, dtype=np.float64),
    np.zeros((0, 4), np.float32),
])
def test_header_and_load(tmp_path, arr):
    path = tmp_path / "fc1_MatMul.0.1619492699305998.npy"
    np.save(path, arr)
    h = read_npy_header(path)
    assert (h.shape, h.dtype, h.fortran_order, h.path) == \
        (arr.shape, arr.dtype, arr.flags.f_contiguous and not arr.flags.c_contiguous and arr.ndim > 1, str(path))
    blob = path.read_bytes()
    assert len(blob) - h.data_offset == arr.nbytes == h.nbytes
    for mmap in (True, False):
        got = load_npy(path, mmap=mmap)
        assert type(got) is np.ndarray and got.dtype == arr.dtype and got.shape == arr.shape
        np.testing.assert_array_equal(got, arr)


def test_mmap_is_read_only_and_lazy(tmp_path):
    arr = np.arange(1000, dtype=np.float32)
    path = tmp_path / "a.0.npy"
    np.save(path, arr)
    got = load_npy(path)
    assert not got.flags.writeable and isinstance(got.base, np.memmap)
    np.testing.assert_array_equal(got, arr)


def test_version_2_header(tmp_path):
    arr = np.arange(12, dtype=np.int16).reshape(3, 4)
    path = tmp_path / "v2.0.npy"
    with open(path, "wb") as f:
        np.lib.format.write_array(f, arr, version=(2, 0))
    assert path.read_bytes()[6] == 2
    np.testing.assert_array_equal(load_npy(path), arr)


def expect_error(path, match):
    for call in (read_npy_header, load_npy):
        with pytest.raises(FormatError) as e:
            call(path)
        assert str(e.value).startswith(f"{path}: ") and match in str(e.value)


def test_bad_files(tmp_path):
    good = tmp_path / "good.0.npy"
    np.save(good, np.arange(100, dtype=np.float64))
    blob = good.read_bytes()
    cases = {
        "not_npy.0.npy": (b"PK\x03\x04 definitely not numpy" * 4, "not a valid .npy"),
        "short_header.0.npy": (blob[:30], "not a valid .npy"),
        "short_data.0.npy": (blob[:-8], "truncated"),
        "empty.0.npy": (b"", "empty file"),
        "bad_version.0.npy": (blob[:6] + b"\x09\x00" + blob[8:], ".npy"),
    }
    for name, (content, match) in cases.items():
        path = tmp_path / name
        path.write_bytes(content)
        expect_error(str(path), match)


def test_object_arrays_are_refused(tmp_path):
    path = tmp_path / "obj.0.npy"
    np.save(path, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    expect_error(str(path), "object arrays")


def test_missing_and_directory(tmp_path):
    expect_error(str(tmp_path / "missing.0.npy"), "no such file")
    expect_error(str(tmp_path), "directory")
