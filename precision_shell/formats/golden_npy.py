"""Golden ``.npy`` files: header-only reads for indexing, memory-mapped loads for comparing.

``np.load`` would read the whole array (and, by default, refuse nothing cheaply); indexing
thousands of goldens needs only shape and dtype, and comparing wants the data paged in lazily.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np
from numpy.lib import format as npy_format

from ..errors import FormatError


@dataclass
class NpyHeader:
    path: str
    shape: tuple[int, ...]
    dtype: np.dtype
    fortran_order: bool
    data_offset: int

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


def _open_error(path: str, e: OSError) -> FormatError:
    if isinstance(e, IsADirectoryError):
        return FormatError(path, "is a directory, not a .npy file")
    if isinstance(e, FileNotFoundError):
        return FormatError(path, "no such file")
    return FormatError(path, f"cannot read: {e.strerror or e}")


def _read_header(f, path: str) -> tuple[tuple[int, ...], bool, np.dtype]:
    try:
        version = npy_format.read_magic(f)
        if version == (1, 0):
            return npy_format.read_array_header_1_0(f)
        if version == (2, 0):
            return npy_format.read_array_header_2_0(f)
        reader = getattr(npy_format, "_read_array_header", None)
        if version == (3, 0) and reader is not None:
            return reader(f, version)
        raise FormatError(path, f"unsupported .npy format version {version[0]}.{version[1]}")
    except FormatError:
        raise
    except Exception as e:
        # numpy parses the header dict with tokenize/ast, so garbage can surface as ValueError,
        # EOFError, SyntaxError, tokenize.TokenError, UnicodeDecodeError, ...: all mean "not npy"
        raise FormatError(path, f"not a valid .npy file: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None


def read_npy_header(path: str | os.PathLike) -> NpyHeader:
    """Shape, dtype and data offset of a ``.npy`` file, reading only its header.

    FormatError for a non-npy file, a truncated one (the data is shorter than the header says) and
    object arrays (which would need pickle).
    """
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            file_size = os.fstat(f.fileno()).st_size
            if file_size == 0:
                raise FormatError(path, "empty file")
            shape, fortran, dtype = _read_header(f, path)
            offset = f.tell()
    except OSError as e:
        raise _open_error(path, e) from None
    if any(int(d) < 0 for d in shape):
        raise FormatError(path, f"negative dimension in shape {list(shape)}")
    if dtype.hasobject:
        raise FormatError(path, "object arrays are not supported (they need pickle)")
    header = NpyHeader(path, tuple(int(d) for d in shape), dtype, bool(fortran), offset)
    if offset + header.nbytes > file_size:
        raise FormatError(path, f"truncated: shape {list(header.shape)} of {dtype} needs {header.nbytes} bytes "
                                f"after the header, the file has {file_size - offset}")
    return header


def load_npy(path: str | os.PathLike, mmap: bool = True) -> np.ndarray:
    """The array of a ``.npy`` file, memory-mapped read-only by default."""
    header = read_npy_header(path)
    order = "F" if header.fortran_order else "C"
    count = math.prod(header.shape)
    try:
        if count == 0:
            return np.empty(header.shape, dtype=header.dtype, order=order)
        if mmap:
            mapped = np.memmap(header.path, dtype=header.dtype, mode="r", offset=header.data_offset,
                               shape=header.shape, order=order)
            return mapped.view(np.ndarray)   # a plain array; the mapping stays alive through .base
        with open(header.path, "rb") as f:
            f.seek(header.data_offset)
            flat = np.fromfile(f, dtype=header.dtype, count=count)
        if flat.size != count:
            raise FormatError(header.path, "file shrank while being read")
        return flat.reshape(header.shape, order=order)
    except OSError as e:
        raise _open_error(header.path, e) from None
    except (ValueError, OverflowError, MemoryError) as e:
        raise FormatError(header.path, f"cannot load: {e}") from None
