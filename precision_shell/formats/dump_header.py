"""The header of an NPU tensor dump file (formats.md §1.2-§1.5): reading and parsing (the types
are in ``dump_types``, the v1 container in ``dump_v1``).

Three containers share one result type, :class:`DumpHeader`, whose entries carry absolute file
offsets, so tensor bytes are read later, one tensor at a time, with a seek:

* ``v2`` (default): ``<Q header_len> + DumpData protobuf (no data) + raw bytes`` of inputs,
  outputs, buffers, spaces, in that order.
* ``nano``: same framing, TLV header starting with magic 0x5A5A5A5A (see ``nano_dump``).
* ``v1``: the whole file is one ``DumpData`` with the bytes inline in ``data``; tried only when
  the file is not a valid v2 file. The offsets of the inline bytes are found by walking the
  protobuf wire format.

A header is parsed from an open file (:func:`read_dump_header`: one open, one ``fstat``, two
small reads) or from the whole file in memory (:func:`read_dump` of a small file: one open, one
read, its tensors then views on the bytes). One parser serves both: same files accepted, same
errors.
"""

from __future__ import annotations

import os
import struct

from ..errors import FormatError
from . import nano_dump
from .dump_names import parse_dump_name
from .dump_types import DumpHeader, TensorEntry, _dump_data_class, _tensor_entries  # noqa: F401  (re-exported)
from .dump_v1 import try_v1
from .input_files import open_regular
from .quoting import clipped

try:   # the C helper of read_dump_headers and _parse (optional: without it each file is read
    # alone, and every header parsed by protobuf)
    from . import _file_heads
except ImportError:
    _file_heads = None

_LEN = struct.Struct("<Q")


def _c_decoder() -> bool:
    """Whether v2 headers are decoded in C (``_dump_v2.c``): unless the helper is not built or
    ``PSHELL_NO_EXT=1`` (then protobuf, as for every header the decoder is not sure of)."""
    return _file_heads is not None and os.environ.get("PSHELL_NO_EXT") != "1"
# read_dump_headers reads this much of each file: a dump header of a few tensors is ~100-400 bytes
HEAD_BYTES = 4096


# ----------------------------------------------------------------------------------------------
# opening and reading

def open_error(path, e: OSError) -> FormatError:
    """The one-line FormatError for an OSError met while opening or reading ``path``."""
    if isinstance(e, IsADirectoryError):
        return FormatError(path, "is a directory, not a dump file")
    if isinstance(e, FileNotFoundError):
        return FormatError(path, "no such file")
    return FormatError(path, f"cannot read: {e.strerror or e}")


def _read_exact(fd: int, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 30))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_dump_header(path: str | os.PathLike) -> DumpHeader:
    """Parse a dump file's header (v2, nano or v1) and validate it against the file size."""
    return read_dump(path, whole_below=0)[0]


def read_dump_headers(paths: list[str]) -> list[DumpHeader | FormatError]:
    """:func:`read_dump_header` of each path, in order: the header, or the FormatError it raises.
    The first HEAD_BYTES of every file are read in one call of the C helper (``_file_heads``),
    the GIL released once, and each header parsed from them (a plain v2 one decoded there); a
    header that needs more bytes, or a file the helper could not open or read, is read alone by
    :func:`read_dump_header` (so the same files are accepted, with the same errors)."""
    heads = paths
    if _file_heads is not None and paths:
        try:
            heads = _file_heads.read_heads(paths, HEAD_BYTES, *[TensorEntry] * _c_decoder())
        except (ValueError, TypeError, MemoryError):   # a name the OS cannot take (NUL): each alone
            heads = paths
    out: list[DumpHeader | FormatError] = []
    for path, head in zip(paths, heads):
        try:
            if isinstance(head, tuple):
                if len(head) == 3:   # a plain v2 header, decoded as _parse would (decode_v2)
                    size, header_len, decoded = head
                    out.append(DumpHeader(path, *decoded[:3], "v2", header_len, size, *decoded[3:]))
                    continue
                try:
                    out.append(_parse(path, head[0], _PrefixSource(head[1], head[0])))
                    continue
                except _PastPrefix:
                    pass
            out.append(read_dump_header(path))
        except FormatError as exc:
            out.append(exc)
    return out


def read_dump(path: str | os.PathLike, whole_below: int = 1 << 20) -> tuple[DumpHeader, bytes | None]:
    """The header and, when the file is smaller than ``whole_below`` bytes, the whole file (one
    open, one read; ``dump_file.read_device_array(header, entry, data)`` then views tensors in
    it). Larger files: the header only, as :func:`read_dump_header`, and ``None``."""
    path = os.fspath(path)
    try:
        fd = open_regular(path)
    except OSError as e:
        raise open_error(path, e) from None
    try:
        file_size = os.fstat(fd).st_size
        if file_size < whole_below:
            data = _read_exact(fd, file_size)
            return _parse(path, len(data), _BufferSource(data)), data
        return _parse(path, file_size, _FdSource(fd)), None
    except OSError as e:
        raise open_error(path, e) from None
    finally:
        os.close(fd)


def pread_into(fd: int, buf, offset: int) -> int:
    """Fill ``buf`` (a writable contiguous buffer, e.g. a reusable uint8 array) with the bytes of
    ``fd`` from ``offset``, without moving the file position; the count read (less at the end)."""
    view = memoryview(buf).cast("B")
    total = 0
    while total < len(view):
        got = os.preadv(fd, [view[total:]], offset + total)   # Linux caps one call at ~2 GiB
        if got == 0:
            break
        total += got
    return total


def read_dump_into(path: str | os.PathLike, take):
    """The header and the whole file with one open and one read, into ``take(size)`` (a reusable
    uint8 buffer of at least ``size`` bytes): ``(header, data)``, ``data`` the file's bytes in it
    (``dump_file.read_device_array(header, entry, data)`` views tensors there)."""
    path = os.fspath(path)
    try:
        fd = open_regular(path)
    except OSError as e:
        raise open_error(path, e) from None
    try:
        size = os.fstat(fd).st_size
        data = take(size)[:size]
        if pread_into(fd, data, 0) != size:
            raise FormatError(path, "file shrank while being read")
    except OSError as e:
        raise open_error(path, e) from None
    finally:
        os.close(fd)
    return _parse(path, size, _ArraySource(data)), data


def read_small_file(path: str, size: int) -> bytes | None:
    """The whole file in one open and one read, when it still has the ``size`` bytes a directory
    listing gave it; None when it has not (then :func:`read_dump` reads it and words any error).
    A regular file's read returns less than asked only at its end, so asking one byte more than
    ``size`` proves the size without an ``fstat``, and the buffer is exactly the file. Raises
    OSError."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO (the listing drops them) cannot block
    try:
        data = os.read(fd, size + 1)
    finally:
        os.close(fd)
    return data if len(data) == size else None


def parse_dump_header(path: str | os.PathLike, data: bytes) -> DumpHeader:
    """Parse the header of a dump file whose whole content is ``data``."""
    return _parse(os.fspath(path), len(data), _BufferSource(data))


class _FdSource:
    """Bytes of an open file, read on demand (seeking only when not already there)."""

    def __init__(self, fd: int):
        self.fd, self.pos = fd, 0

    def read_at(self, offset: int, n: int) -> bytes:
        if offset != self.pos:
            os.lseek(self.fd, offset, os.SEEK_SET)
        data = _read_exact(self.fd, n)
        self.pos = offset + len(data)
        return data

    def whole(self, size: int) -> bytes:
        return self.read_at(0, size)


class _BufferSource:
    def __init__(self, data: bytes):
        self.data = data

    def read_at(self, offset: int, n: int) -> bytes:
        return self.data[offset:offset + n]

    def whole(self, size: int) -> bytes:
        return self.data


class _PastPrefix(Exception):
    """A read beyond the bytes read_dump_headers has of a file (it then reads the file itself)."""


class _PrefixSource:
    """The first bytes of a file of ``file_size`` bytes; reading past them raises _PastPrefix
    (unless they are the whole file: then a short read, as from the file)."""

    def __init__(self, data: bytes, file_size: int):
        self.data, self.complete = data, len(data) >= file_size

    def read_at(self, offset: int, n: int) -> bytes:
        if offset + n > len(self.data) and not self.complete:
            raise _PastPrefix
        return self.data[offset:offset + n]

    def whole(self, size: int) -> bytes:
        if size > len(self.data):
            raise _PastPrefix
        return self.data[:size]


class _ArraySource:
    """Bytes of a file read whole into a buffer (``read_dump_into``): slices come out as bytes."""

    def __init__(self, data):
        self.data = data

    def read_at(self, offset: int, n: int) -> bytes:
        return bytes(self.data[offset:offset + n])

    def whole(self, size: int) -> bytes:
        return bytes(self.data[:size])


# ----------------------------------------------------------------------------------------------
# parsing

def _parse(path: str, file_size: int, source: _FdSource | _BufferSource) -> DumpHeader:
    if file_size == 0:
        raise FormatError(path, "empty file")
    if file_size < _LEN.size:
        raise FormatError(path, f"truncated: {file_size} bytes, shorter than the 8-byte header length")
    head = source.read_at(0, _LEN.size)
    if len(head) != _LEN.size:
        raise FormatError(path, "file shrank while being read")
    (header_len,) = _LEN.unpack(head)
    if header_len == 0:
        # an empty DumpData decodes fine and lists no tensors: the op would vanish unreported
        return try_v1(source, path, file_size, FormatError(path, "header length 0"))
    if header_len > file_size - _LEN.size:
        v2_error = FormatError(path, f"header length {header_len} is larger than the file "
                                     f"({file_size} bytes)")
        return try_v1(source, path, file_size, v2_error)
    header = source.read_at(_LEN.size, header_len)
    if len(header) != header_len:
        raise FormatError(path, "file shrank while being read")
    if nano_dump.is_nano_header(header):
        return _nano_header(path, header, file_size)
    if _c_decoder():   # the plain v2 headers (C); None: not sure, protobuf decides
        decoded = _file_heads.decode_v2(header, file_size, TensorEntry)
        if decoded is not None:
            return DumpHeader(path, *decoded[:3], "v2", header_len, file_size, *decoded[3:])
    try:
        msg = _dump_data_class().FromString(header)
    except Exception as e:  # upb raises DecodeError; any failure means a corrupt header
        return try_v1(source, path, file_size, FormatError(path, f"corrupt protobuf header: {clipped(e)}"))
    try:
        return _v2_header(path, msg, header_len, file_size)
    except FormatError as v2_error:
        return try_v1(source, path, file_size, v2_error)


def _v2_header(path: str, msg, header_len: int, file_size: int) -> DumpHeader:
    start = _LEN.size + header_len
    inputs, end = _tensor_entries("input", msg.input, start)
    outputs, end = _tensor_entries("output", msg.output, end)
    buffers, end = _tensor_entries("buffer", msg.buffer, end)
    spaces, end = _tensor_entries("space", msg.space, end)
    if end > file_size:
        raise FormatError(path, f"tensor sizes overrun the file: header + data need {end} bytes, "
                                f"the file has {file_size}")
    # Trailing bytes (end < file_size) are tolerated, as the newest msaccucmp does.
    return DumpHeader(path, msg.op_name, msg.version, msg.dump_time, "v2", header_len, file_size,
                      inputs, outputs, buffers, spaces, [(a.name, a.value) for a in msg.attr])


def _nano_header(path: str, header: bytes, file_size: int) -> DumpHeader:
    try:
        nano = nano_dump.parse_nano_header(header)
    except nano_dump.NanoFormatError as e:
        raise FormatError(path, f"corrupt nano dump header: {clipped(e)}") from None
    offset = _LEN.size + len(header)
    groups = []
    for kind, descs in (("input", nano.inputs), ("output", nano.outputs)):
        entries = []
        for i, d in enumerate(descs):
            entries.append(TensorEntry(kind, i, d.dtype, d.format, d.shape, d.original_shape, 0,
                                       d.original_name, d.original_index, offset, d.size))
            offset += d.size
        groups.append(entries)
    if offset > file_size:
        raise FormatError(path, f"tensor sizes overrun the file: header + data need {offset} bytes, "
                                f"the file has {file_size}")
    # The nano header has no op name or time: take them from the file name when it is a dump name.
    name = parse_dump_name(os.path.basename(path))
    return DumpHeader(path, name.op_name if name else "", str(nano.version), name.timestamp if name else 0,
                      "nano", len(header), file_size, groups[0], groups[1])
