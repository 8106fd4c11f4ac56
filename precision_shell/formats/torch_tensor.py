"""The tensors of a ``.pt`` file as plain values: a storage (one ``data/<key>`` member of the
archive) and a strided view of it, checked to lie inside the storage whenever one is made and
again before its bytes are read; the bytes come from the zip member in place (framework-dumps.md
A4). :mod:`.torch_pt` makes these from the pickle.
"""

from __future__ import annotations

import math
import os
import struct
import zipfile
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from ..errors import FormatError
from .input_files import open_regular


# a view cannot be larger than its storage, which the file holds, unless it repeats elements
MAX_EXPANDED_BYTES = 1 << 30
_MAX_DIM = 1 << 62

# torch dtype names (as in `torch.bfloat16` and in msprobe's "torch.bfloat16") -> numpy dtypes
TORCH_DTYPES: dict[str, np.dtype] = {
    "float64": np.dtype("<f8"), "double": np.dtype("<f8"),
    "float32": np.dtype("<f4"), "float": np.dtype("<f4"),
    "float16": np.dtype("<f2"), "half": np.dtype("<f2"),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float8_e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn),
    "float8_e5m2": np.dtype(ml_dtypes.float8_e5m2),
    "float8_e4m3fnuz": np.dtype(ml_dtypes.float8_e4m3fnuz),
    "float8_e5m2fnuz": np.dtype(ml_dtypes.float8_e5m2fnuz),
    "complex128": np.dtype("<c16"), "cdouble": np.dtype("<c16"),
    "complex64": np.dtype("<c8"), "cfloat": np.dtype("<c8"),
    "int64": np.dtype("<i8"), "long": np.dtype("<i8"),
    "int32": np.dtype("<i4"), "int": np.dtype("<i4"),
    "int16": np.dtype("<i2"), "short": np.dtype("<i2"),
    "int8": np.dtype("i1"), "uint8": np.dtype("u1"),
    "uint16": np.dtype("<u2"), "uint32": np.dtype("<u4"), "uint64": np.dtype("<u8"),
    "bool": np.dtype("?"),
}
_DTYPE_SET = frozenset(TORCH_DTYPES.values())


class _Disallowed(Exception):
    pass


@dataclass(frozen=True)
class _Sealed:
    """Objects a pickle gets hold of: BUILD would write its state into them (``__dict__`` past the
    frozen dataclass, slot state by ``setattr``) after their checks ran; with ``__setstate__``
    defined, BUILD calls it instead, and it refuses."""

    def __setstate__(self, state):
        raise _Disallowed(f"pickle BUILD on a {type(self).__name__} (a crafted file: state written "
                          f"into an object after its checks)")


@dataclass(frozen=True)
class PtStorage(_Sealed):
    """One ``data/<key>`` member: ``numel`` elements of ``dtype`` (bytes read on demand)."""
    path: str
    member: str
    dtype: np.dtype
    numel: int
    location: str
    big_endian: bool


@dataclass(frozen=True)
class PtTensor(_Sealed):
    """A tensor of a ``.pt`` file: a strided view of a storage, read by :meth:`load`. Its geometry
    is checked when it is made (``replace`` included): no instance addresses outside its storage."""
    storage: PtStorage
    offset: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: np.dtype
    requires_grad: bool = False

    def __post_init__(self):
        _check_geometry(self.storage, self.offset, self.shape, self.stride, self.dtype)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def load(self) -> np.ndarray:
        """The tensor's values as a C-contiguous array (a copy only when the view is strided)."""
        # again here, so that no state of this object can make as_strided address foreign memory
        try:
            _check_geometry(self.storage, self.offset, self.shape, self.stride, self.dtype)
        except ValueError as e:
            path = self.storage.path if isinstance(self.storage, PtStorage) else None
            raise FormatError(path, str(e)) from None
        if self.size == 0:
            return np.empty(self.shape, self.dtype)
        span = _span(self.shape, self.stride)
        try:
            flat = _read_elements(self.storage, self.dtype, self.offset, span)
            if span == self.size and self.stride == _contiguous_strides(self.shape):
                return flat.reshape(self.shape)
            # strides are >= 0 and the span was read: the last element addressed is flat[span - 1]
            # (a length-1 dimension's stride is never stepped; 0 keeps it from overflowing intp)
            steps = tuple(s * self.dtype.itemsize if n > 1 else 0 for n, s in zip(self.shape, self.stride))
            view = np.lib.stride_tricks.as_strided(flat, self.shape, steps, writeable=False)
            return np.ascontiguousarray(view)
        except MemoryError:
            raise FormatError(self.storage.path, f"tensor of {self.size * self.dtype.itemsize} bytes "
                                                 f"does not fit in memory") from None


def _check_geometry(storage, offset, shape, stride, dtype) -> None:
    """ValueError unless the view lies inside its storage: plain ints, strides >= 0, every
    addressable element ``offset + sum((n - 1) * stride)`` inside, and an expanded (stride-0)
    view no larger than MAX_EXPANDED_BYTES when loaded."""
    if not isinstance(storage, PtStorage):
        raise ValueError("tensor storage is not a persistent storage reference")
    if not isinstance(dtype, np.dtype) or dtype not in _DTYPE_SET:
        raise ValueError(f"tensor dtype {dtype!r:.40} is not a torch dtype")
    shape, stride = _int_tuple(shape, "size"), _int_tuple(stride, "stride")
    if len(shape) != len(stride) or type(offset) is not int or not 0 <= offset < _MAX_DIM:
        raise ValueError(f"bad tensor geometry size={shape} stride={stride} offset={offset!r:.40}")
    storage_elems = storage.numel * storage.dtype.itemsize // dtype.itemsize
    size = math.prod(shape)
    if size and offset + _span(shape, stride) > storage_elems:
        raise ValueError(f"tensor size {list(shape)} stride {list(stride)} offset {offset} "
                         f"exceeds its storage of {storage_elems} elements")
    # stride-0 (expanded) views hold more elements than their storage: cap what load() allocates
    if size > storage_elems and size * dtype.itemsize > MAX_EXPANDED_BYTES:
        raise ValueError(f"expanded tensor of {size} elements over a storage of {storage_elems}")


def _span(shape: tuple[int, ...], stride: tuple[int, ...]) -> int:
    """Storage elements (in the tensor's dtype) from the view's first element to its last."""
    return 1 + sum((n - 1) * s for n, s in zip(shape, stride))


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def _read_elements(storage: PtStorage, dtype: np.dtype, start: int, count: int) -> np.ndarray:
    """``count`` elements of ``dtype`` from element ``start`` of a storage, read from the zip."""
    path = storage.path
    raw_dtype = _big_endian(dtype) if storage.big_endian else dtype
    try:
        with os.fdopen(open_regular(path), "rb") as f:
            data_start, size = _member_data(f, storage)
            begin = start * dtype.itemsize
            if begin + count * dtype.itemsize > size:
                raise FormatError(path, f"{storage.member} holds {size} bytes, fewer than the tensor needs")
            f.seek(data_start + begin)
            flat = np.fromfile(f, dtype=raw_dtype, count=count)
    except FormatError:
        raise
    except (OSError, ValueError) as e:
        raise FormatError(path, f"cannot read {storage.member}: {e}") from None
    if flat.size != count:
        raise FormatError(path, f"{storage.member} is truncated")
    if raw_dtype is not dtype:
        flat = _from_big_endian(flat, dtype)
    return flat


def storage_data(storage: PtStorage) -> tuple[int, int]:
    """(file offset, size in bytes) of a storage's raw bytes: members are stored uncompressed,
    so a reader can read them in place (``pread``) instead of through the zip module."""
    try:
        with os.fdopen(open_regular(storage.path), "rb") as f:
            return _member_data(f, storage)
    except FormatError:
        raise
    except OSError as e:
        raise FormatError(storage.path, f"cannot read {storage.member}: {e}") from None


def _member_data(f, storage: PtStorage) -> tuple[int, int]:
    path = storage.path
    try:
        with zipfile.ZipFile(f) as zf:
            info = zf.getinfo(storage.member)
    except (KeyError, zipfile.BadZipFile, ValueError, EOFError) as e:
        raise FormatError(path, f"cannot read {storage.member}: {e}") from None
    # torch stores members uncompressed; a deflated one could be a zip bomb
    if info.compress_type != zipfile.ZIP_STORED:
        raise FormatError(path, f"{storage.member} is compressed (torch.save never does that)")
    f.seek(info.header_offset)
    local = f.read(30)
    if len(local) != 30 or local[:4] != b"PK\x03\x04":
        raise FormatError(path, f"{storage.member}: bad zip local header")
    name_len, extra_len = struct.unpack_from("<HH", local, 26)
    data_start = info.header_offset + 30 + name_len + extra_len
    if data_start + info.file_size > os.fstat(f.fileno()).st_size:
        raise FormatError(path, f"{storage.member} is truncated")
    return data_start, info.file_size


def _big_endian(dtype: np.dtype) -> np.dtype:
    if dtype.itemsize == 1:
        return dtype
    if dtype.kind in "biufc":
        return dtype.newbyteorder(">")
    return np.dtype(f">u{dtype.itemsize}")   # ml_dtypes floats: swap the bit pattern


def _from_big_endian(raw: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if raw.dtype.kind == "u" and dtype.kind not in "biufc":
        return raw.astype(raw.dtype.newbyteorder("<")).view(dtype)
    return raw.astype(dtype)


def _int_tuple(value, what: str) -> tuple[int, ...]:
    if not isinstance(value, (tuple, list)) or len(value) > 64 or not all(
            type(v) is int and 0 <= v < _MAX_DIM for v in value):
        raise ValueError(f"bad tensor {what} {value!r:.80}")
    return tuple(value)
