"""Read and write NPU tensor dump files (formats.md §1.2-§1.5).

The header (types, v2/nano/v1 parsing) lives in ``dump_header``; this module reads tensor bytes,
one tensor at a time with a seek, or as zero-copy views on a small file read whole
(``dump_header.read_dump``; ``v2_tensor_layout`` says where its tensors lie, cheaply), restores
logical shapes, and writes v2 files. The header names are re-exported here: callers import
everything about dump files from this one module.
"""

from __future__ import annotations

import bisect
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import FormatError
from . import nano_dump
from .dtypes import DT_BOOL, DT_UNDEFINED, TABLE_DECODED, dtype_name, is_supported_dtype, numpy_dtype
from .dump_header import (  # noqa: F401  (re-exported)
    _LEN, DumpHeader, TensorEntry, _dump_data_class, open_error, parse_dump_header, pread_into, read_dump,
    read_dump_header, read_dump_into, read_small_file,
)
from .layout import PLAIN_LAYOUTS, restore_layout
from .quoting import clipped, shown
from .shapes import check_dims


@dataclass(frozen=True)
class DumpTensor:
    """One tensor to write: ``data`` already in DEVICE layout with its final dtype (for the
    table-decoded low-precision types: uint8 codes, one per element; FP4 is packed on writing)."""
    data: np.ndarray
    dtype: int
    format: int
    original_shape: tuple[int, ...] | None = None
    original_name: str | None = None
    original_output_index: int | None = None
    sub_format: int = 0


# ----------------------------------------------------------------------------------------------
# reading tensor bytes

def _count_and_shape(header: DumpHeader, entry: TensorEntry, itemsize: int) -> tuple[int, tuple[int, ...]]:
    if entry.dtype == DT_UNDEFINED and entry.size:
        return entry.size, (entry.size,)          # raw bytes, whatever the header's shape says
    if not entry.shape and entry.size:
        count = entry.size // itemsize            # no shape: the whole segment as 1-D
        return count, (count,)
    return check_dims(entry.shape, header.path, f"{entry.label} shape"), entry.shape


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
        raise open_error(header.path, e) from None
    if len(data) != nbytes:
        raise FormatError(header.path, f"truncated: {entry.label} data ends at byte {entry.offset + len(data)}, "
                                       f"expected {entry.offset + nbytes}")
    return data


def read_device_array(header: DumpHeader, entry: TensorEntry, data: bytes | None = None) -> np.ndarray:
    """The tensor in its device layout and shape, decoded to its numpy dtype.

    ``data``: the whole file (from ``read_dump``); the result is then a read-only view on it, no
    copy and no file access, with the same checks and errors as reading from the file.
    """
    if entry.dtype in TABLE_DECODED:
        return _read_table_decoded(header, entry, data)
    dtype = numpy_dtype(entry.dtype, header.path)
    count, shape = _count_and_shape(header, entry, dtype.itemsize)
    need = count * dtype.itemsize
    if need > entry.size:
        raise FormatError(header.path, f"{entry.label} shape {shown(list(entry.shape))} of {entry.dtype_name} needs "
                                       f"{need} bytes but its size is {entry.size}")
    try:
        if count == 0:
            return np.empty(shape, dtype=dtype)
        raw_dtype = np.dtype("u1") if entry.dtype == DT_BOOL else dtype
        if data is None:
            arr = _from_file(header, entry, raw_dtype, count)
        elif count > 0 and entry.offset + need <= len(data):
            arr = np.frombuffer(data, dtype=raw_dtype, count=count, offset=entry.offset)
        else:
            arr = np.empty(0, raw_dtype)  # reported as truncated below, as from the file
        if arr.size != count:
            raise FormatError(header.path, f"truncated: {entry.label} needs {need} bytes at offset "
                                           f"{entry.offset}, the file ends first")
        if entry.dtype == DT_BOOL:
            arr = arr != 0  # any non-zero byte is true; a raw view would make invalid numpy bools
        return arr.reshape(shape)
    except (ValueError, OverflowError, MemoryError) as e:
        raise FormatError(header.path, f"{entry.label} shape {shown(list(entry.shape))} cannot be decoded: {clipped(e)}") from None


def _read_table_decoded(header: DumpHeader, entry: TensorEntry, data: bytes | None) -> np.ndarray:
    """A low-precision tensor (formats/lowbit) decoded to float32 in its device shape: the codes
    are unpacked and looked up in device order, so any layout is then restored on float32."""
    from .lowbit import by_dtype_code, decode_codes   # (here: only low-precision dumps need the tables)

    fmt = by_dtype_code(entry.dtype)
    if not entry.shape and entry.size:
        count = entry.size * 2 if fmt.packed else entry.size
        shape: tuple[int, ...] = (count,)
    else:
        count = check_dims(entry.shape, header.path, f"{entry.label} shape")
        shape = entry.shape
    need = fmt.storage_bytes(count)
    if need > entry.size:
        raise FormatError(header.path, f"{entry.label} shape {shown(list(entry.shape))} of {entry.dtype_name} needs "
                                       f"{need} bytes but its size is {entry.size}")
    if count == 0:
        return np.empty(shape, np.float32)
    if data is None:
        raw = _from_file(header, entry, np.dtype(np.uint8), need)
    else:
        raw = np.frombuffer(data, np.uint8, count=min(need, max(0, len(data) - entry.offset)),
                            offset=min(entry.offset, len(data)))
    if raw.size != need:
        raise FormatError(header.path, f"truncated: {entry.label} needs {need} bytes at offset "
                                       f"{entry.offset}, the file ends first")
    return decode_codes(fmt, raw, count, header.path, entry.label).reshape(shape)


class ReadBuffers:
    """Reusable byte buffers of one reading thread. A fresh large array per tensor would cost a
    page fault per 4 KiB when first written (and a mapping per tensor, munmap included); these
    grow to the largest tensors seen and are then reused, so memory is a few times the largest
    tensor, whatever the dump size."""

    # free buffers kept: a compare's pair batch holds ~2 per pair until it is computed
    # (analysis/compare/pair_batch.py); the pool only grows to what was held at once
    MAX_FREE = 40
    MIN_SIZE = 1 << 16       # the smallest allocated (small tensors share buffers)
    ALIGN = 64

    def __init__(self) -> None:
        self.free: list[np.ndarray] = []     # ascending by size
        self.sizes: list[int] = []           # their sizes (bisected: dozens of buffers are kept)

    def take(self, nbytes: int) -> np.ndarray:
        """A uint8 buffer of at least ``nbytes`` (the caller slices it; :meth:`give` it back)."""
        i = bisect.bisect_left(self.sizes, nbytes)
        if i < len(self.sizes):     # the smallest that fits
            del self.sizes[i]
            return self.free.pop(i)
        if len(self.free) >= self.MAX_FREE:     # the smallest is replaced by this one
            del self.sizes[0], self.free[0]
        size = max(nbytes, self.MIN_SIZE)
        # 64-byte aligned: the kernel copies a file's pages to a destination that is not
        # cache-line aligned at half the speed (numpy aligns to 16: 0.29 vs 0.15 s for 1.9 GB)
        raw = np.empty(size + self.ALIGN, np.uint8)
        shift = -raw.ctypes.data % self.ALIGN
        return raw[shift:shift + size]

    def give(self, buf: np.ndarray) -> None:
        i = bisect.bisect_right(self.sizes, buf.size)
        self.sizes.insert(i, buf.size)
        self.free.insert(i, buf)


_local = threading.local()


def thread_buffers() -> ReadBuffers:
    """This thread's :class:`ReadBuffers` (threads of a compare or scan each read their own)."""
    buffers = getattr(_local, "buffers", None)
    if buffers is None:
        buffers = _local.buffers = ReadBuffers()
    return buffers


def release_thread_buffers() -> None:
    """Drop this thread's buffers (a worker thread's go when it ends; the session's main thread,
    which runs small compares and scans itself, must not keep the largest tensors' worth)."""
    _local.__dict__.pop("buffers", None)


def _from_file(header: DumpHeader, entry: TensorEntry, raw_dtype: np.dtype, count: int) -> np.ndarray:
    try:
        with open(header.path, "rb") as f:
            f.seek(entry.offset)
            return np.fromfile(f, dtype=raw_dtype, count=count)
    except OSError as e:
        raise open_error(header.path, e) from None


# (tensor descriptors of a header, serialized) -> its layout: the dumps of one network repeat a
# handful of tensor layouts, their headers differing only in names and time, which the key drops.
_LAYOUTS: dict[bytes, tuple] = {}
_LAYOUTS_MAX = 4096

TensorLayout = tuple[tuple[int, tuple[int, ...], int, int], ...]


def v2_tensor_layout(data: bytes) -> tuple[int, TensorLayout] | None:
    """``(data start, layout)`` of a v2 dump held whole in ``data``, where the layout holds
    ``(data type, device shape, offset from data start, size)`` of each input, then each output:
    the values :func:`parse_dump_header` puts in its entries, at a fraction of the cost (no entry
    objects, no metadata; equal layouts are one shared tuple). None when ``data`` is not a valid
    v2 dump (nano, v1, corrupt, sizes overrunning the file): :func:`parse_dump_header` then
    reads it or says what is wrong."""
    file_size = len(data)
    if file_size < _LEN.size:
        return None
    (header_len,) = _LEN.unpack_from(data)
    if header_len == 0 or header_len > file_size - _LEN.size:
        return None
    header = memoryview(data)[_LEN.size:_LEN.size + header_len]
    if nano_dump.is_nano_header(header):
        return None
    try:
        msg = _dump_data_class().FromString(header)
    except Exception:
        return None
    for name in ("version", "dump_time", "op_name", "attr"):
        msg.ClearField(name)
    for t in msg.output:
        t.ClearField("original_op")
    key = msg.SerializeToString()
    found = _LAYOUTS.get(key)
    if found is None:
        if len(_LAYOUTS) >= _LAYOUTS_MAX:
            _LAYOUTS.clear()
        found = _LAYOUTS[key] = _layout(msg)
    layout, end = found
    start = _LEN.size + header_len
    return (start, layout) if start + end <= file_size else None


def _layout(msg) -> tuple[TensorLayout, int]:
    """The layout of a DumpData header and where its last segment ends (from data start)."""
    layout, offset = [], 0
    for group in (msg.input, msg.output):
        for t in group:
            size = t.size
            layout.append((t.data_type, tuple(t.shape.dim), offset, size))
            offset += size
    for group in (msg.buffer, msg.space):
        for t in group:
            offset += t.size
    return tuple(layout), offset


def read_logical_array(header: DumpHeader, entry: TensorEntry, *, target_format: str | None = None,
                       data: bytes | None = None) -> np.ndarray:
    """The tensor restored to its logical (original) shape.

    Plain layouts (ND, NCHW, ...) are reshaped to the original shape when the element counts
    agree and returned as stored otherwise. Every other format goes through
    ``layout.restore_layout``, which raises FormatError when it has no converter (callers can fall
    back to :func:`read_device_array`). ``target_format`` names the layout the original shape is
    written in (default NCHW for 4-D device layouts; NHWC for TF graphs, from the graph's
    ``origin_format``). ``data``: the whole file, as for :func:`read_device_array`.
    """
    return to_logical(header, entry, read_device_array(header, entry, data), target_format=target_format)


def to_logical(header: DumpHeader, entry: TensorEntry, arr: np.ndarray, *,
               target_format: str | None = None,
               fallback_shape: tuple[int, ...] | None = None, alloc=np.empty) -> np.ndarray:
    """Restore a device array of ``entry`` (read or memory-mapped by the caller) to its logical
    shape; ``fallback_shape`` (e.g. the graph's origin_shape) serves when the dump has none.
    ``alloc(shape, dtype)``: where a device layout is restored to (``layout.restore_layout``)."""
    fmt = entry.format_name
    original = entry.original_shape or fallback_shape
    if original is not None:  # checked before anything is shaped or allocated by it
        count = check_dims(original, header.path, f"{entry.label} original shape")
    if fmt in PLAIN_LAYOUTS or entry.dtype == DT_UNDEFINED:
        if original is not None and count == arr.size:
            try:
                return arr.reshape(original)
            except ValueError as e:  # more dims than numpy holds
                raise FormatError(header.path, f"{entry.label} original shape {shown(list(original))}: {clipped(e)}") from None
        return arr
    return restore_layout(arr, fmt, original, target_format=target_format,
                          sub_format=entry.sub_format, path=header.path, alloc=alloc)


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
            if t.dtype in TABLE_DECODED:
                if arr.dtype != np.uint8:
                    raise ValueError(f"{dtype_name(t.dtype)} is written from uint8 codes, not {arr.dtype}")
                from .lowbit import by_dtype_code, pack_nibbles

                if by_dtype_code(t.dtype).packed:
                    arr = pack_nibbles(arr)
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
