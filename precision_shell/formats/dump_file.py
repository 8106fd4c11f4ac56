"""Read and write NPU tensor dump files (formats.md §1.2-§1.5).

Three containers share one result type, :class:`DumpHeader`, whose entries carry absolute file
offsets, so tensor bytes are read later, one tensor at a time, with a seek:

* ``v2`` (default): ``<Q header_len> + DumpData protobuf (no data) + raw bytes`` of inputs,
  outputs, buffers, spaces, in that order.
* ``nano``: same framing, TLV header starting with magic 0x5A5A5A5A (see ``nano_dump``).
* ``v1``: the whole file is one ``DumpData`` with the bytes inline in ``data``; tried only when
  the file is not a valid v2 file. The offsets of the inline bytes are found by walking the
  protobuf wire format.

Indexing touches up to 50k files, so :func:`read_dump_header` does one open, one ``fstat`` and
two small reads; tensor bytes are never read there.
"""

from __future__ import annotations

import math
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from ..errors import FormatError
from . import nano_dump
from .dtypes import DT_BOOL, DT_UNDEFINED, FORMAT_ND, dtype_name, format_name, is_supported_dtype, numpy_dtype
from .dump_names import parse_dump_name
from .layout import PLAIN_LAYOUTS, restore_layout
from .protoload import dump_data_pb

_LEN = struct.Struct("<Q")
# protobuf refuses messages over 2 GiB, so a v1 (inline) file cannot be larger.
_V1_MAX_BYTES = 2**31 - 1


@lru_cache(maxsize=None)
def _dump_data_class():
    return dump_data_pb().DumpData


@dataclass(frozen=True, slots=True)
class TensorEntry:
    kind: str                                  # "input" | "output" | "buffer" | "space"
    index: int
    dtype: int                                 # OutputDataType code (buffers/spaces: DT_UNDEFINED)
    format: int                                # OutputFormat code
    shape: tuple[int, ...]                     # device shape
    original_shape: tuple[int, ...] | None     # logical shape when the header has one
    sub_format: int
    original_name: str | None                  # original_op.name (outputs)
    original_output_index: int | None
    offset: int                                # absolute byte offset of the data in the file
    size: int                                  # bytes

    @property
    def dtype_name(self) -> str:
        return dtype_name(self.dtype)

    @property
    def format_name(self) -> str:
        return format_name(self.format)

    @property
    def label(self) -> str:
        return f"{self.kind}:{self.index}"


@dataclass
class DumpHeader:
    path: str
    op_name: str
    version: str
    dump_time: int
    variant: str                               # "v2" | "v1" | "nano"
    header_len: int                            # v1: the whole file is the header
    file_size: int
    inputs: list[TensorEntry] = field(default_factory=list)
    outputs: list[TensorEntry] = field(default_factory=list)
    buffers: list[TensorEntry] = field(default_factory=list)
    spaces: list[TensorEntry] = field(default_factory=list)
    attrs: list[tuple[str, str]] = field(default_factory=list)

    def entry(self, kind: str, index: int) -> TensorEntry:
        """``entry("output", 0)``; FormatError when the file has no such tensor."""
        group = {"input": self.inputs, "output": self.outputs, "buffer": self.buffers, "space": self.spaces}.get(kind)
        if group is None or not 0 <= index < len(group):
            count = len(group) if group is not None else 0
            raise FormatError(self.path, f"no {kind}:{index} in this dump ({count} {kind}s)")
        return group[index]


@dataclass(frozen=True)
class DumpTensor:
    """One tensor to write: ``data`` already in DEVICE layout with its final dtype."""
    data: np.ndarray
    dtype: int
    format: int
    original_shape: tuple[int, ...] | None = None
    original_name: str | None = None
    original_output_index: int | None = None
    sub_format: int = 0


# ----------------------------------------------------------------------------------------------
# reading the header

def _open_error(path, e: OSError) -> FormatError:
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
    path = os.fspath(path)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        raise _open_error(path, e) from None
    try:
        try:
            file_size = os.fstat(fd).st_size
            if file_size == 0:
                raise FormatError(path, "empty file")
            if file_size < _LEN.size:
                raise FormatError(path, f"truncated: {file_size} bytes, shorter than the 8-byte header length")
            (header_len,) = _LEN.unpack(_read_exact(fd, _LEN.size))
            if header_len > file_size - _LEN.size:
                v2_error = FormatError(path, f"header length {header_len} is larger than the file "
                                             f"({file_size} bytes)")
                return _try_v1(fd, path, file_size, v2_error)
            header = _read_exact(fd, header_len)
            if len(header) != header_len:
                raise FormatError(path, "file shrank while being read")
            if nano_dump.is_nano_header(header):
                return _nano_header(path, header, file_size)
            try:
                msg = _dump_data_class().FromString(header)
            except Exception as e:  # upb raises DecodeError; any failure means a corrupt header
                return _try_v1(fd, path, file_size, FormatError(path, f"corrupt protobuf header: {e}"))
            try:
                return _v2_header(path, msg, header_len, file_size)
            except FormatError as v2_error:
                return _try_v1(fd, path, file_size, v2_error)
        except OSError as e:
            raise _open_error(path, e) from None
    finally:
        os.close(fd)


def _entry(kind: str, index: int, t, offset: int, size: int) -> TensorEntry:
    if kind not in ("input", "output"):
        return TensorEntry(kind, index, DT_UNDEFINED, FORMAT_ND, (size,), None, 0, None, None, offset, size)
    # an absent or empty original shape both mean "no logical shape recorded"
    original = tuple(t.original_shape.dim) if t.HasField("original_shape") else ()
    has_op = kind == "output" and t.HasField("original_op")
    return TensorEntry(kind, index, t.data_type, t.format, tuple(t.shape.dim), original or None, t.sub_format,
                       (t.original_op.name or None) if has_op else None,
                       t.original_op.output_index if has_op else None, offset, size)


def _tensor_entries(kind: str, tensors, start: int) -> tuple[list[TensorEntry], int]:
    """Entries whose data segments lie back to back from ``start``; returns them and the end."""
    entries, offset = [], start
    for i, t in enumerate(tensors):
        entries.append(_entry(kind, i, t, offset, t.size))
        offset += t.size
    return entries, offset


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
        raise FormatError(path, f"corrupt nano dump header: {e}") from None
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


def _try_v1(fd: int, path: str, file_size: int, v2_error: FormatError) -> DumpHeader:
    """The whole file as one inline-data DumpData; re-raise the v2 error when it is not one."""
    if file_size > _V1_MAX_BYTES:
        raise v2_error
    os.lseek(fd, 0, os.SEEK_SET)
    blob = _read_exact(fd, file_size)
    try:
        msg = _dump_data_class().FromString(blob)
    except Exception:
        raise v2_error from None
    tensors = list(msg.input) + list(msg.output) + list(msg.buffer) + list(msg.space)
    if not any(t.data for t in tensors):
        raise v2_error
    try:
        spans = _inline_data_spans(blob)
    except ValueError:
        raise v2_error from None
    groups = []
    for kind, items in (("input", msg.input), ("output", msg.output), ("buffer", msg.buffer), ("space", msg.space)):
        groups.append([_entry(kind, i, t, *spans.get((kind, i), (0, 0))) for i, t in enumerate(items)])
    return DumpHeader(path, msg.op_name, msg.version, msg.dump_time, "v1", file_size, file_size,
                      *groups, [(a.name, a.value) for a in msg.attr])


# DumpData field number -> (kind, field number of ``data`` inside that message)
_INLINE_FIELDS = {3: ("output", 5), 4: ("input", 4), 5: ("buffer", 2), 8: ("space", 2)}


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ValueError("bad varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def _fields(buf: bytes, start: int, end: int):
    """(field number, wire type, value start, value end) of each field in buf[start:end]."""
    pos = start
    while pos < end:
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 2:
            length, pos = _varint(buf, pos)
            nxt = pos + length
        elif wire in (0, 1, 5):
            nxt = _varint(buf, pos)[1] if wire == 0 else pos + (8 if wire == 1 else 4)
        else:
            raise ValueError(f"unsupported wire type {wire}")
        if nxt > end:
            raise ValueError("field overruns its message")
        yield number, wire, pos, nxt
        pos = nxt


def _inline_data_spans(blob: bytes) -> dict[tuple[str, int], tuple[int, int]]:
    """Absolute (offset, length) of each tensor's inline ``data`` in a v1 file."""
    spans: dict[tuple[str, int], tuple[int, int]] = {}
    counts = {kind: 0 for kind, _ in _INLINE_FIELDS.values()}
    for number, wire, start, end in _fields(blob, 0, len(blob)):
        if number not in _INLINE_FIELDS or wire != 2:
            continue
        kind, data_field = _INLINE_FIELDS[number]
        index = counts[kind]
        counts[kind] += 1
        for sub_number, sub_wire, s, e in _fields(blob, start, end):
            if sub_number == data_field and sub_wire == 2:
                spans[(kind, index)] = (s, e - s)  # the last occurrence wins, as in protobuf
    return spans


# ----------------------------------------------------------------------------------------------
# reading tensor bytes

def _count_and_shape(entry: TensorEntry, itemsize: int) -> tuple[int, tuple[int, ...]]:
    if entry.dtype == DT_UNDEFINED and entry.size:
        return entry.size, (entry.size,)          # raw bytes, whatever the header's shape says
    if not entry.shape and entry.size:
        count = entry.size // itemsize            # no shape: the whole segment as 1-D
        return count, (count,)
    return math.prod(entry.shape), entry.shape


def read_raw_bytes(header: DumpHeader, entry: TensorEntry, nbytes: int | None = None) -> bytes:
    """The first ``nbytes`` (default: all ``size``) bytes of a tensor's segment."""
    nbytes = entry.size if nbytes is None else nbytes
    if nbytes > entry.size:
        raise FormatError(header.path, f"{entry.label} holds {entry.size} bytes, {nbytes} requested")
    try:
        with open(header.path, "rb") as f:
            f.seek(entry.offset)
            data = f.read(nbytes)
    except OSError as e:
        raise _open_error(header.path, e) from None
    if len(data) != nbytes:
        raise FormatError(header.path, f"truncated: {entry.label} data ends at byte {entry.offset + len(data)}, "
                                       f"expected {entry.offset + nbytes}")
    return data


def read_device_array(header: DumpHeader, entry: TensorEntry) -> np.ndarray:
    """The tensor in its device layout and shape, decoded to its numpy dtype."""
    dtype = numpy_dtype(entry.dtype, header.path)
    count, shape = _count_and_shape(entry, dtype.itemsize)
    need = count * dtype.itemsize
    if need > entry.size:
        raise FormatError(header.path, f"{entry.label} shape {list(entry.shape)} of {entry.dtype_name} needs "
                                       f"{need} bytes but its size is {entry.size}")
    try:
        if count == 0:
            return np.empty(shape, dtype=dtype)
        raw_dtype = np.dtype("u1") if entry.dtype == DT_BOOL else dtype
        try:
            with open(header.path, "rb") as f:
                f.seek(entry.offset)
                arr = np.fromfile(f, dtype=raw_dtype, count=count)
        except OSError as e:
            raise _open_error(header.path, e) from None
        if arr.size != count:
            raise FormatError(header.path, f"truncated: {entry.label} needs {need} bytes at offset "
                                           f"{entry.offset}, the file ends first")
        if entry.dtype == DT_BOOL:
            arr = arr != 0  # any non-zero byte is true; a raw view would make invalid numpy bools
        return arr.reshape(shape)
    except (ValueError, OverflowError, MemoryError) as e:
        raise FormatError(header.path, f"{entry.label} shape {list(entry.shape)} cannot be decoded: {e}") from None


def read_logical_array(header: DumpHeader, entry: TensorEntry, *, target_format: str | None = None) -> np.ndarray:
    """The tensor restored to its logical (original) shape.

    Plain layouts (ND, NCHW, ...) are reshaped to the original shape when the element counts
    agree and returned as stored otherwise. Every other format goes through
    ``layout.restore_layout``, which raises FormatError when it has no converter (callers can fall
    back to :func:`read_device_array`). ``target_format`` names the layout the original shape is
    written in (default NCHW for 4-D device layouts; NHWC for TF graphs, from the graph's
    ``origin_format``).
    """
    return to_logical(header, entry, read_device_array(header, entry), target_format=target_format)


def to_logical(header: DumpHeader, entry: TensorEntry, arr: np.ndarray, *,
               target_format: str | None = None,
               fallback_shape: tuple[int, ...] | None = None) -> np.ndarray:
    """Restore a device array of ``entry`` (read or memory-mapped by the caller) to its logical
    shape; ``fallback_shape`` (e.g. the graph's origin_shape) serves when the dump has none."""
    fmt = entry.format_name
    original = entry.original_shape or fallback_shape
    if fmt in PLAIN_LAYOUTS or entry.dtype == DT_UNDEFINED:
        if original is not None and math.prod(original) == arr.size:
            return arr.reshape(original)
        return arr
    return restore_layout(arr, fmt, original, target_format=target_format,
                          sub_format=entry.sub_format, path=header.path)


# ----------------------------------------------------------------------------------------------
# writing

def _le_array(data: np.ndarray) -> np.ndarray:
    """``data`` as a flat, contiguous, little-endian array (what the file stores)."""
    arr = np.ascontiguousarray(data).reshape(-1)
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    return arr


def _fill(msg, t: DumpTensor, nbytes: int, is_output: bool) -> None:
    if is_supported_dtype(t.dtype) and t.dtype != DT_UNDEFINED and numpy_dtype(t.dtype).itemsize != t.data.dtype.itemsize:
        raise ValueError(f"{dtype_name(t.dtype)} does not match array dtype {t.data.dtype}")
    msg.data_type = t.dtype
    msg.format = t.format
    msg.shape.dim.extend(int(d) for d in t.data.shape)
    msg.size = nbytes
    msg.sub_format = t.sub_format
    if t.original_shape is not None:
        msg.original_shape.dim.extend(int(d) for d in t.original_shape)
    if is_output and (t.original_name is not None or t.original_output_index is not None):
        msg.original_op.name = t.original_name or ""
        msg.original_op.output_index = t.original_output_index or 0


def write_dump(path: str | os.PathLike, op_name: str, inputs: Sequence[DumpTensor], outputs: Sequence[DumpTensor], *,
               dump_time: int = 0, version: str = "2.0", buffers: Sequence[bytes] = (),
               spaces: Sequence[bytes] = ()) -> int:
    """Write a v2 dump file; returns the number of bytes written.

    Used by tests and the sample generator. ``buffers``/``spaces`` are raw byte strings (L1 buffer
    and workspace/LOG segments).
    """
    msg = _dump_data_class()(version=version, dump_time=dump_time, op_name=op_name)
    payload: list = []
    for group, tensors, is_output in ((msg.input, inputs, False), (msg.output, outputs, True)):
        for t in tensors:
            arr = _le_array(t.data)
            _fill(group.add(), t, arr.nbytes, is_output)
            payload.append(arr.view(np.uint8))   # written without another copy
    for group, segments in ((msg.buffer, buffers), (msg.space, spaces)):
        for raw in segments:
            group.add(size=len(raw))
            payload.append(bytes(raw))
    header = msg.SerializeToString()
    with open(path, "wb") as f:
        f.write(_LEN.pack(len(header)) + header)
        for chunk in payload:
            f.write(chunk)
    return _LEN.size + len(header) + sum(len(chunk) if isinstance(chunk, bytes) else chunk.nbytes for chunk in payload)
