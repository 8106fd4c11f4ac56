"""The compact work unit of ``vc``: a task of plain tuples in, a list of plain tuples out.

Why not one :class:`~compare_worker.PairJob` per tensor: on a 50k-file dump (200k pairs) the
objects cost more to build, pickle and keep than the small tensors cost to compare. So a task
groups the rows of whole ops by dump file, and a worker

* opens each file once and reads each tensor with one ``pread`` into a reusable buffer of its
  thread (no mapping, no fresh allocation: a per-tensor mmap + populate + munmap cost more than
  the copy), restores a device layout with one copy into another such buffer, and parses the
  .npy header with the fast path of ``golden_npy`` from the same open file;
* takes an input that repeats its producer's bytes from that row (``alias``): when the
  producer's output is read, the inputs of the task that repeat it are checked at once, each
  by one kernel call that reads the input's bytes in cache-sized pieces and compares them with
  the producer's, the GIL released (``check_aliases``; without the kernel, or for a producer in
  an earlier task, the producer's bytes are kept or read again and compared when the input's
  row comes); and an
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

from precision_shell.analysis.compare import fused_metrics, pair_batch
from precision_shell.analysis.compare.pair_batch import PairBatch
from precision_shell.analysis.compare.task_files import TaskFiles, entry_description
from precision_shell.analysis.compare.worker import PairResult, _compare_arrays, failed_pair
from precision_shell.analysis.compare.metrics import Metrics
from precision_shell.errors import PshellError
from precision_shell.formats.dtypes import needs_decoding, numpy_dtype
from precision_shell.formats.dump_file import (
    DumpHeader, TensorEntry, read_device_array, to_logical,
)

# NPU tensors up to this size are memoised by content within a task.
MEMO_MAX_BYTES = 1 << 16
VALUE_FIELDS = tuple(f.name for f in fields(Metrics))[:15]   # the float fields, in order
_IO = ("input", "output")


def pack_header(header: DumpHeader, shared: dict | None = None) -> tuple:
    """The parts of a parsed header a worker needs, as plain tuples (cheap to pickle). ``shared``:
    equal entry groups are the same tuple object (a network's dumps repeat a few layouts, so a
    plan's packed headers cost ~100 bytes an op, not ~1 kB)."""
    def entries(group):
        packed = tuple((e.dtype, e.format, e.shape, e.original_shape, e.sub_format, e.offset, e.size)
                       for e in group)
        return packed if shared is None else shared.setdefault(packed, packed)
    return header.file_size, entries(header.inputs), entries(header.outputs)



def result_row(res: PairResult) -> tuple:
    if res.same_as is not None:
        return res.row, res.same_as, res.nbytes
    m = res.metrics
    return (res.row, -1, res.nbytes, tuple([getattr(m, f) for f in VALUE_FIELDS]), m.count,
            m.not_computed, m.cosine_both_zero, m.reasons, res.npu_dtype, res.golden_dtype, res.shape,
            res.reason, res.compared, bool(res.extra.get("identical")), res.coverage_kind, res.file,
            res.unreadable)



def _equal_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    if a.size != b.size:
        return False
    same = fused_metrics.same_bytes(a, b)
    if same is not None:
        return same
    k = a.size // 8 * 8   # 8 bytes at a time: ~3x faster than byte by byte
    return bool(np.array_equal(a[:k].view(np.uint64), b[:k].view(np.uint64)) and np.array_equal(a[k:], b[k:]))


def _device_array(header: DumpHeader, entry: TensorEntry, raw: np.ndarray | None) -> np.ndarray:
    """The device-layout array of ``entry`` from its bytes ``raw`` (or the general reader, which
    also decodes bools and raises the precise FormatError of a truncated or inconsistent entry)."""
    if needs_decoding(entry.dtype) or not entry.shape:
        return read_device_array(header, entry)   # needs decoding or a derived shape
    dtype = numpy_dtype(entry.dtype, header.path)
    count = math.prod(entry.shape)
    nbytes = count * dtype.itemsize
    if raw is None or count == 0 or nbytes > entry.size:
        return read_device_array(header, entry)
    return raw[:nbytes].view(dtype).reshape(entry.shape)



def _alias_same(files: TaskFiles, entry: TensorEntry, raw: np.ndarray | None, alias: tuple) -> bool:
    """Whether the input (``entry``, bytes ``raw``) has its producer's description and bytes (any
    read problem: False; the normal path then reports it)."""
    _, src_path, src_packed, src_index = alias
    key = (src_path, src_index)
    try:
        src_header = files.header(src_path, src_packed)
        src = src_header.entry("output", src_index)
    except PshellError:
        files.wanted.pop(key, None)
        return False
    src_bytes = files.producer_bytes(key, src_header, src)
    if raw is None or src_bytes is None or entry_description(entry) != entry_description(src) \
            or entry.size != src.size:
        return False
    return _equal_bytes(raw, src_bytes)


def iter_task(task: tuple) -> Iterator[tuple]:
    """One result tuple per row of ``task``, in row order, each as soon as it exists."""
    device_shape_mode, groups = task
    wanted: dict[tuple[str, int], int] = {}
    consumers: dict[tuple[str, int], list[tuple]] = {}
    for _, npu_path, packed, rows in groups:
        for row, _, index, *_, alias in rows:
            if alias is not None:
                key = (alias[1], alias[3])
                wanted[key] = wanted.get(key, 0) + 1
                consumers.setdefault(key, []).append((row, npu_path, packed, index))
    files = TaskFiles(wanted, consumers if fused_metrics.batch_enabled() else None)
    memo: dict[tuple, tuple[int, int]] = {}
    batch = PairBatch() if pair_batch.enabled(device_shape_mode) else None
    waiting: list[tuple | int] = []     # results after a row in the batch, that row as a placeholder
    try:
        for op, npu_path, packed, rows in groups:
            for row, io, index, target_format, fallback_shape, golden, alias in rows:
                try:
                    result = _run_row(files, memo, batch, device_shape_mode, op, npu_path, packed, row,
                                      _IO[io], index, target_format, fallback_shape, golden, alias)
                finally:
                    files.row_done()
                if result is not None and not waiting:
                    yield result
                    continue
                waiting.append(row if result is None else result)
                if batch.full():
                    yield from _computed(batch, files, waiting)
        if waiting:
            yield from _computed(batch, files, waiting)
    finally:
        files.close()


def _computed(batch: PairBatch, files: TaskFiles, waiting: list) -> Iterator[tuple]:
    """The batch computed, then every waiting result in row order."""
    results = {res.row: res for res in batch.compute()}
    files.release_held()
    for item in waiting:
        yield result_row(results[item]) if isinstance(item, int) else item
    waiting.clear()


def run_task(task: tuple) -> list[tuple]:
    """The task a worker runs: the whole task, results in row order."""
    return list(iter_task(task))


def _queue(files: TaskFiles, batch: PairBatch, header: DumpHeader, entry: TensorEntry, raw: np.ndarray,
           row: int, tensor: str, target_format: str | None, fallback_shape: tuple[int, ...] | None,
           golden_path: str) -> tuple[int | None, np.ndarray | None]:
    """(bytes of the pair, None) when the pair joined ``batch``; else (None, the golden array if
    it was read: the one-pair path takes it from there, a problem reading it is reported there)."""
    try:
        golden = files.golden(golden_path)
    except (PshellError, MemoryError, ValueError, OSError):
        return None, None
    spec = pair_batch.spec_for(header, entry, target_format, fallback_shape, golden)
    if spec is None:
        return None, golden
    files.hold_row((header.path, entry.index), raw)
    batch.add(row, raw, golden, spec, tensor)
    return spec.nbytes, None


def _run_row(files: TaskFiles, memo: dict, batch: PairBatch | None, device_shape_mode: bool, op: str,
             npu_path: str, packed: tuple | None,
             row: int, io: str, index: int, target_format: str | None,
             fallback_shape: tuple[int, ...] | None, golden: Any, alias: tuple | None) -> tuple | None:
    """The row's result, or None when it joined ``batch`` (its result comes with the batch's)."""
    if alias is not None:
        size = files.checked.pop(row, None)
        if size is not None:    # checked when its producer was read
            if size >= 0:
                return row, alias[0], 2 * size
            alias = None        # not the producer's bytes: compared as any input
    try:
        header = files.header(npu_path, packed)
        entry = header.entry(io, index)
    except PshellError as exc:
        return result_row(failed_pair(row, f"{op}:{io}:{index}", exc))
    raw = files.raw(header, entry)
    if alias is not None and _alias_same(files, entry, raw, alias):
        return row, alias[0], 2 * entry.size
    if io == "output" and raw is not None:
        if files.consumers:
            files.check_aliases(npu_path, index, entry, raw)
        files.keep(npu_path, index, raw)
    key = None
    if not device_shape_mode and raw is not None and entry.size <= MEMO_MAX_BYTES:
        key = (golden, entry_description(entry), target_format, fallback_shape, raw.tobytes())
        hit = memo.get(key)
        if hit is not None:
            return row, hit[0], hit[1]
    golden_arr = None
    if batch is not None and raw is not None and isinstance(golden, str):
        nbytes, golden_arr = _queue(files, batch, header, entry, raw, row, f"{op}:{io}:{index}",
                                    target_format, fallback_shape, golden)
        if nbytes is not None:
            if key is not None:
                memo[key] = (row, nbytes)
            return None
    try:
        npu = to_logical(header, entry, _device_array(header, entry, raw),
                         target_format=target_format, fallback_shape=fallback_shape, alloc=files.alloc)
        identical = None
        if isinstance(golden, str):
            golden_path, golden_entry = golden, None
            if golden_arr is None:
                golden_arr = files.golden(golden)
        else:
            golden_path = golden[0]
            golden_header = files.header(golden[0], golden[1])
            golden_entry = golden_header.entry(io, index)
            golden_raw = files.raw(golden_header, golden_entry)
            golden_arr = to_logical(golden_header, golden_entry,
                                    _device_array(golden_header, golden_entry, golden_raw),
                                    alloc=files.alloc)
            identical = raw is not None and golden_raw is not None and \
                (entry.dtype, entry.shape) == (golden_entry.dtype, golden_entry.shape) and \
                _equal_bytes(raw, golden_raw)
        res = _compare_arrays(row, npu, entry, golden_arr, golden_entry, device_shape_mode, npu_path,
                              golden_path, identical)
    except (PshellError, MemoryError, ValueError, OSError) as exc:
        return result_row(failed_pair(row, f"{op}:{io}:{index}", exc))
    if key is not None:
        memo[key] = (row, res.nbytes)
    return result_row(res)
