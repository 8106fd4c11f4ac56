"""The compact work unit of ``vc``: a task of plain tuples in, a list of plain tuples out.

Why not one :class:`~compare_worker.PairJob` per tensor: on a 50k-file dump (200k pairs) the
objects cost more to build, pickle and keep than the small tensors cost to compare. So a task
groups the rows of whole ops by dump file, and a worker

* reads each small dump file and each small golden once, whole, with one read (no per-tensor
  open + mmap), and parses the .npy header with the fast path of ``golden_npy``;
* takes an input that repeats its producer's bytes from that row (``alias``, as before), and an
  NPU tensor whose bytes, description and golden file equal a row already computed in this task
  from that row too (``memo``: a constant or weight fed to many ops is compared once per task);
* returns one tuple per row; the parent keeps them in arrays (``compare_results``).

Layouts (positions, to keep pickles small)::

    task   = (device_shape_mode, groups)
    group  = (op name, npu dump path, packed header or None, rows)
    row    = (row, io, index, target_format, fallback_shape, golden, alias)
    golden = .npy path | (other dump path, packed header or None)   # NPU vs NPU: same io/index
    alias  = None | (source row, source dump path, packed header or None, output index)
    packed header = (file_size, inputs, outputs); entry = (dtype, format, shape, original_shape,
                     sub_format, offset, size)
    result = (row, same_as_row, nbytes)                             # the result of another row
           | (row, -1, nbytes, values, count, not_computed, cosine_both_zero, reasons,
              npu_dtype, golden_dtype, shape, reason, compared, identical, coverage_kind, file, unreadable)
"""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any, Iterator

import numpy as np

from precision_shell.analysis.compare_worker import (
    PairResult, _compare_arrays, _golden_array, _same_bytes, failed_pair, map_array,
)
from precision_shell.analysis.metrics import Metrics
from precision_shell.errors import PshellError
from precision_shell.formats.dtypes import DT_BOOL, DT_UNDEFINED, numpy_dtype
from precision_shell.formats.dump_file import (
    DumpHeader, TensorEntry, read_device_array, read_dump_header, to_logical,
)
from precision_shell.formats.golden_npy import array_from_bytes, read_npy

# Files up to this size are read whole, once per task; larger ones are memory-mapped per tensor.
SMALL_FILE = 1 << 20
# Whole small files kept per task (dump files of the batch, goldens seen twice).
_FILE_BUDGET = 32 << 20
# NPU tensors up to this size are memoised by content within a task.
MEMO_MAX_BYTES = 1 << 16
VALUE_FIELDS = tuple(f.name for f in fields(Metrics))[:15]   # the float fields, in order
_IO = ("input", "output")


def pack_header(header: DumpHeader) -> tuple:
    """The parts of a parsed header a worker needs, as plain tuples (cheap to pickle)."""
    def entries(group):
        return tuple((e.dtype, e.format, e.shape, e.original_shape, e.sub_format, e.offset, e.size)
                     for e in group)
    return header.file_size, entries(header.inputs), entries(header.outputs)


def _unpack_header(path: str, packed: tuple) -> DumpHeader:
    file_size, inputs, outputs = packed
    return DumpHeader(path, "", "", 0, "v2", 0, file_size,
                      [TensorEntry("input", i, *e[:5], None, None, *e[5:]) for i, e in enumerate(inputs)],
                      [TensorEntry("output", i, *e[:5], None, None, *e[5:]) for i, e in enumerate(outputs)])


def result_row(res: PairResult) -> tuple:
    if res.same_as is not None:
        return res.row, res.same_as, res.nbytes
    m = res.metrics
    return (res.row, -1, res.nbytes, tuple([getattr(m, f) for f in VALUE_FIELDS]), m.count,
            m.not_computed, m.cosine_both_zero, m.reasons, res.npu_dtype, res.golden_dtype, res.shape,
            res.reason, res.compared, bool(res.extra.get("identical")), res.coverage_kind, res.file,
            res.unreadable)


class _TaskFiles:
    """Headers and whole small files of one task."""

    def __init__(self) -> None:
        self.headers: dict[str, DumpHeader] = {}
        self.blobs: dict[str, Any] = {}
        self.kept = 0

    def header(self, path: str, packed: tuple | None) -> DumpHeader:
        header = self.headers.get(path)
        if header is None:
            header = _unpack_header(path, packed) if packed is not None else read_dump_header(path)
            self.headers[path] = header
        return header

    def keep(self, path: str, value: Any, size: int) -> None:
        if self.kept + size > _FILE_BUDGET:
            self.blobs.clear()
            self.kept = 0
        self.blobs[path] = value
        self.kept += size

    def dump_bytes(self, header: DumpHeader) -> bytes | None:
        """The whole dump file when it is small (read once per task), else None."""
        if header.file_size > SMALL_FILE:
            return None
        blob = self.blobs.get(header.path)
        if blob is None:
            try:
                with open(header.path, "rb", buffering=0) as fh:
                    blob = fh.read(header.file_size)
            except OSError:
                return None   # the per-tensor readers report it with their own message
            self.keep(header.path, blob, len(blob))
        return blob

    def golden(self, path: str) -> np.ndarray:
        arr = self.blobs.get(path)
        if arr is not None:
            return arr
        header, blob = read_npy(path, SMALL_FILE)
        if blob is None or math.prod(header.shape) == 0:
            return _golden_array(path)
        arr = array_from_bytes(header, blob)
        self.keep(path, arr, len(blob))
        return arr


def _device_array(header: DumpHeader, entry: TensorEntry, blob: bytes | None) -> np.ndarray:
    """As ``compare_worker._mapped_device_array``, from the file's bytes when it was read whole."""
    if entry.dtype in (DT_BOOL, DT_UNDEFINED) or not entry.shape:
        return read_device_array(header, entry)   # needs decoding or a derived shape
    dtype = numpy_dtype(entry.dtype, header.path)
    count = math.prod(entry.shape)
    end = entry.offset + count * dtype.itemsize
    if count == 0 or count * dtype.itemsize > entry.size or end > header.file_size:
        return read_device_array(header, entry)   # raises the reader's precise FormatError
    if blob is not None and end <= len(blob):
        return np.frombuffer(blob, dtype=dtype, count=count, offset=entry.offset).reshape(entry.shape)
    try:
        return map_array(header.path, dtype, entry.offset, count).reshape(entry.shape)
    except (OSError, ValueError):
        return read_device_array(header, entry)


def _desc(e: TensorEntry) -> tuple:
    return e.dtype, e.format, e.shape, e.original_shape, e.sub_format


def _alias_size(files: _TaskFiles, header: DumpHeader, entry: TensorEntry, alias: tuple) -> int:
    """Bytes of the input when it has its producer's description and bytes, else 0 (any read
    problem: 0; the normal path then reports it)."""
    _, src_path, src_packed, src_index = alias
    try:
        src_header = files.header(src_path, src_packed)
        src = src_header.entry("output", src_index)
    except PshellError:
        return 0
    if _desc(entry) != _desc(src) or entry.size != src.size:
        return 0
    a, b = files.dump_bytes(header), files.dump_bytes(src_header)
    if a is not None and b is not None and entry.offset + entry.size <= len(a) \
            and src.offset + src.size <= len(b):
        same = a[entry.offset:entry.offset + entry.size] == b[src.offset:src.offset + src.size]
    else:
        same = _same_bytes(header.path, entry, src_header.path, src)
    return entry.size if same else 0


def iter_task(task: tuple) -> Iterator[tuple]:
    """One result tuple per row of ``task``, in row order, each as soon as it exists."""
    device_shape_mode, groups = task
    files = _TaskFiles()
    memo: dict[tuple, tuple[int, int]] = {}
    for op, npu_path, packed, rows in groups:
        for row, io, index, target_format, fallback_shape, golden, alias in rows:
            yield _run_row(files, memo, device_shape_mode, op, npu_path, packed, row, _IO[io], index,
                           target_format, fallback_shape, golden, alias)


def run_task(task: tuple) -> list[tuple]:
    """The task a pool worker runs: the whole task, results in row order."""
    return list(iter_task(task))


def _run_row(files: _TaskFiles, memo: dict, device_shape_mode: bool, op: str, npu_path: str,
             packed: tuple | None,
             row: int, io: str, index: int, target_format: str | None,
             fallback_shape: tuple[int, ...] | None, golden: Any, alias: tuple | None) -> tuple:
    try:
        header = files.header(npu_path, packed)
        entry = header.entry(io, index)
        blob = files.dump_bytes(header)
    except PshellError as exc:
        return result_row(failed_pair(row, f"{op}:{io}:{index}", exc))
    if alias is not None:
        same = _alias_size(files, header, entry, alias)
        if same:
            return row, alias[0], 2 * same
    key = None
    if not device_shape_mode and blob is not None and entry.size <= MEMO_MAX_BYTES:
        key = (golden, _desc(entry), target_format, fallback_shape,
               blob[entry.offset:entry.offset + entry.size])
        hit = memo.get(key)
        if hit is not None:
            return row, hit[0], hit[1]
    try:
        npu = to_logical(header, entry, _device_array(header, entry, blob),
                         target_format=target_format, fallback_shape=fallback_shape)
        if isinstance(golden, str):
            golden_path, golden_entry = golden, None
            golden_arr = files.golden(golden)
        else:
            golden_path = golden[0]
            golden_header = files.header(golden[0], golden[1])
            golden_entry = golden_header.entry(io, index)
            golden_arr = to_logical(golden_header, golden_entry,
                                    _device_array(golden_header, golden_entry, files.dump_bytes(golden_header)))
        res = _compare_arrays(row, npu, entry, golden_arr, golden_entry, device_shape_mode, npu_path,
                              golden_path)
    except (PshellError, MemoryError, ValueError, OSError) as exc:
        return result_row(failed_pair(row, f"{op}:{io}:{index}", exc))
    if key is not None:
        memo[key] = (row, res.nbytes)
    return result_row(res)
