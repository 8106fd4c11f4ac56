"""Golden ``.npy`` files: header-only reads for indexing, memory-mapped loads for comparing.

``np.load`` would read the whole array (and, by default, refuse nothing cheaply); indexing
thousands of goldens needs only shape and dtype, and comparing wants the data paged in lazily.

The header dict numpy itself writes (``{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3),
}``) is parsed with one regex: numpy's own parser (tokenize + ``ast.literal_eval``) costs ~50 us
per file, which is most of the time spent on 100k small goldens. Anything else (structured
dtypes, hand-written headers) still goes through numpy's parser.
"""

from __future__ import annotations

import math
import os
import re
import struct
from dataclasses import dataclass

import numpy as np
from numpy.lib import format as npy_format

from ..errors import FormatError
from .input_files import open_regular
from .quoting import clipped, shown
from .shapes import check_dims


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


_MAGIC = b"\x93NUMPY"
# the dict as numpy's write_array formats it: simple descr string, keys in this order
_STANDARD_HEADER = re.compile(
    r"\{'descr': '([<>|=]?[a-zA-Z][0-9]*)', 'fortran_order': (True|False), "
    r"'shape': \(((?:[0-9]+, )*(?:[0-9]+,?)?)\), \} *\n?\Z")
_DTYPES: dict[str, np.dtype] = {}


def _standard_header(head: bytes) -> tuple[tuple[int, ...], bool, np.dtype, int] | None:
    """(shape, fortran, dtype, data offset) when ``head`` (the file's first bytes) holds a whole
    header in numpy's own layout; None for anything else (numpy's parser then decides)."""
    if head[:6] != _MAGIC or len(head) < 10:
        return None
    major = head[6]
    if major == 1:
        (hlen,), start = struct.unpack_from("<H", head, 8), 10
    elif major in (2, 3) and len(head) >= 12:
        (hlen,), start = struct.unpack_from("<I", head, 8), 12
    else:
        return None
    if head[7] != 0 or start + hlen > len(head):
        return None
    m = _STANDARD_HEADER.match(head[start:start + hlen].decode("latin1"))
    if m is None:
        return None
    descr = m.group(1)
    dtype = _DTYPES.get(descr)
    if dtype is None:
        try:
            dtype = np.dtype(descr)
        except TypeError:
            return None
        if len(_DTYPES) < 256:
            _DTYPES[descr] = dtype
    shape = tuple(int(d) for d in m.group(3).replace(",", " ").split())
    return shape, m.group(2) == "True", dtype, start + hlen


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
        raise FormatError(path, f"not a valid .npy file: {clipped(e)}") from None


def read_npy_header(path: str | os.PathLike) -> NpyHeader:
    """Shape, dtype and data offset of a ``.npy`` file, reading only its header.

    FormatError for a non-npy file, a truncated one (the data is shorter than the header says) and
    object arrays (which would need pickle).
    """
    return read_npy(path, 0)[0]


# numpy pads headers to a multiple of 64 bytes; the ones it writes for arrays up to ~10 dims fit
_HEAD_BYTES = 512


def read_npy(path: str | os.PathLike, whole_below: int = 1 << 20) -> tuple[NpyHeader, bytes | None]:
    """The header, and the whole file's bytes when the file is at most ``whole_below`` bytes
    (one read instead of header read + mapping: what many small goldens want); else None.
    Same checks and FormatErrors as :func:`read_npy_header`."""
    path = os.fspath(path)
    blob = None
    try:
        with os.fdopen(open_regular(path), "rb", buffering=0) as f:
            file_size = os.fstat(f.fileno()).st_size
            if file_size == 0:
                raise FormatError(path, "empty file")
            head = f.read(file_size if file_size <= whole_below else _HEAD_BYTES)
            if len(head) == file_size:
                blob = head
            header = _header_of(f, path, head, file_size)
    except OSError as e:
        raise _open_error(path, e) from None
    return header, blob


def read_npy_into(path: str | os.PathLike, take) -> np.ndarray:
    """The array of a ``.npy`` file with one open and no mapping: the header parsed from its
    first bytes, the data read into ``take(nbytes)`` (a uint8 buffer of at least ``nbytes``,
    reused by the caller: no fresh allocation per file). Same checks and FormatErrors as
    :func:`read_npy`."""
    from .dump_file import pread_into

    path = os.fspath(path)
    try:
        with os.fdopen(open_regular(path), "rb", buffering=0) as f:
            file_size = os.fstat(f.fileno()).st_size
            if file_size == 0:
                raise FormatError(path, "empty file")
            header = _header_of(f, path, f.read(min(file_size, _HEAD_BYTES)), file_size)
            offset = header.data_offset
            count, nbytes = math.prod(header.shape), header.nbytes
            order = "F" if header.fortran_order else "C"
            if count == 0:
                return np.empty(header.shape, dtype=header.dtype, order=order)
            buf = take(nbytes)[:nbytes]
            if pread_into(f.fileno(), buf, offset) != nbytes:
                raise FormatError(path, "file shrank while being read")
    except OSError as e:
        raise _open_error(path, e) from None
    return buf.view(header.dtype).reshape(header.shape, order=order)


def _header_of(f, path: str, head: bytes, file_size: int) -> NpyHeader:
    """The checked header of an open ``.npy`` whose first bytes are ``head``: the common
    version-1 header parsed from them, any other read by numpy's header reader from the start."""
    parsed = _standard_header(head)
    if parsed is None:
        f.seek(0)
        shape, fortran, dtype = _read_header(f, path)
        offset = f.tell()
    else:
        shape, fortran, dtype, offset = parsed
    return _checked(path, shape, fortran, dtype, offset, file_size)


def _checked(path: str, shape, fortran, dtype: np.dtype, offset: int, file_size: int) -> NpyHeader:
    check_dims(shape, path, "shape")
    if dtype.hasobject:
        raise FormatError(path, "object arrays are not supported (they need pickle)")
    # no tensor is text, dates or records: said here, with the file, not later by a compare
    if dtype.kind in "USMm" or dtype.fields is not None or dtype.subdtype is not None:
        kind = "structured" if dtype.fields is not None or dtype.subdtype is not None else {
            "U": "string", "S": "bytes", "M": "datetime", "m": "timedelta"}[dtype.kind]
        raise FormatError(path, f"holds {kind} values ({clipped(str(dtype))}), not numbers")
    header = NpyHeader(path, tuple(int(d) for d in shape), dtype, bool(fortran), offset)
    if offset + header.nbytes > file_size:
        raise FormatError(path, f"truncated: shape {shown(list(header.shape))} of {dtype} needs {header.nbytes} bytes "
                                f"after the header, the file has {file_size - offset}")
    return header


def array_from_bytes(header: NpyHeader, blob: bytes) -> np.ndarray:
    """The (read-only) array of a .npy file read whole by :func:`read_npy`."""
    count = math.prod(header.shape)
    order = "F" if header.fortran_order else "C"
    if count == 0:
        return np.empty(header.shape, dtype=header.dtype, order=order)
    flat = np.frombuffer(blob, dtype=header.dtype, count=count, offset=header.data_offset)
    return flat.reshape(header.shape, order=order)


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
        raise FormatError(header.path, f"cannot load: {clipped(e)}") from None
