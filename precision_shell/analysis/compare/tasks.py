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
import os
from dataclasses import fields
from typing import Any, Iterator

import numpy as np

from precision_shell.analysis.compare import fused_metrics, pair_batch
from precision_shell.analysis.compare.pair_batch import PairBatch
from precision_shell.analysis.compare.worker import PairResult, _compare_arrays, failed_pair
from precision_shell.analysis.compare.metrics import Metrics
from precision_shell.errors import PshellError
from precision_shell.formats.dtypes import needs_decoding, numpy_dtype
from precision_shell.formats.dump_file import (
    DumpHeader, TensorEntry, pread_into, read_device_array, read_dump_header, thread_buffers, to_logical,
)
from precision_shell.formats.golden_npy import read_npy_into

# Bytes of producer outputs kept per task for the alias checks of later inputs (beyond: re-read).
_KEEP_BUDGET = 64 << 20
# Files a task keeps open (an op's dump file, its producers', goldens are opened per read).
_OPEN_FILES = 8
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
    """Headers, open files and buffers of one task: each file opened once, each tensor read with
    one pread into a reusable buffer, the raw bytes of outputs that later inputs of the task
    repeat (aliases) kept until those are checked."""

    def __init__(self, wanted: dict[tuple[str, int], int],
                 consumers: dict[tuple[str, int], list[tuple]] | None = None) -> None:
        self.headers: dict[str, DumpHeader] = {}
        self.fds: dict[str, int] = {}
        self.buffers = thread_buffers()
        self.row_buffers: list[np.ndarray] = []            # given back when the row is done
        self.wanted = wanted                               # (dump, output index) -> alias rows to come
        self.kept: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = {}   # -> (buffer, bytes)
        self.kept_bytes = 0
        self.held: list[np.ndarray] = []                   # buffers a queued pair batch reads
        self.busy: set[int] = set()                        # ids of kept buffers it reads too
        self.last_raw: tuple[np.ndarray, np.ndarray] | None = None   # raw()'s last (view, its buffer)
        # (dump, output index) -> alias rows of this task that repeat it: (row, dump, packed, index)
        self.consumers = consumers or {}
        self.checked: dict[int, int] = {}                  # alias row -> its bytes if checked same, -1 not

    def header(self, path: str, packed: tuple | None) -> DumpHeader:
        header = self.headers.get(path)
        if header is None:
            header = _unpack_header(path, packed) if packed is not None else read_dump_header(path)
            self.headers[path] = header
        return header

    def take(self, nbytes: int) -> np.ndarray:
        buf = self.buffers.take(nbytes)
        self.row_buffers.append(buf)
        return buf

    def alloc(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """``layout.restore_layout``'s output array, carved from a reusable buffer."""
        nbytes = math.prod(shape) * dtype.itemsize
        return self.take(nbytes)[:nbytes].view(dtype).reshape(shape)

    def row_done(self) -> None:
        for buf in self.row_buffers:
            if id(buf) in self.busy:
                self.held.append(buf)
            else:
                self.buffers.give(buf)
        self.row_buffers.clear()

    def hold_row(self, kept_key: tuple[str, int], raw: np.ndarray) -> None:
        """The row's buffers stay untouched until the pair batch that reads them is computed
        (``release_held``); so does the row's NPU output if it is kept for aliases."""
        self.held += self.row_buffers
        self.row_buffers.clear()
        kept = self.kept.get(kept_key)
        if kept is not None and kept[1] is raw:
            self.busy.add(id(kept[0]))

    def release_held(self) -> None:
        for buf in self.held:
            self.buffers.give(buf)
        self.held.clear()
        self.busy.clear()

    def close(self) -> None:
        self.last_raw = None
        self.row_done()
        self.release_held()
        for buf, _ in self.kept.values():
            self.buffers.give(buf)
        self.kept.clear()
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()

    def _fd(self, path: str) -> int:
        fd = self.fds.get(path)
        if fd is None:
            if len(self.fds) >= _OPEN_FILES:
                old = next(iter(self.fds))
                os.close(self.fds.pop(old))
            fd = self.fds[path] = os.open(path, os.O_RDONLY)
        return fd

    def raw(self, header: DumpHeader, entry: TensorEntry) -> np.ndarray | None:
        """The ``entry.size`` bytes of a tensor (uint8), or None when they cannot be read in full
        (the general reader then reports why)."""
        size = entry.size
        if entry.offset + size > header.file_size:
            return None
        base = self.take(size)
        buf = base[:size]
        try:
            got = pread_into(self._fd(header.path), buf, entry.offset)
        except OSError:
            return None
        self.last_raw = (buf, base)
        return buf if got == size else None

    def keep(self, path: str, index: int, raw: np.ndarray) -> None:
        """Keep an output's bytes while inputs of this task that repeat them are still to come."""
        key = (path, index)
        if not self.wanted.get(key) or key in self.kept or self.kept_bytes + raw.size > _KEEP_BUDGET:
            return
        if self.last_raw is not None and self.last_raw[0] is raw:   # (b.ctypes.data: ~5 us a buffer)
            base = self.last_raw[1]
        else:
            base = next(b for b in self.row_buffers if b.ctypes.data == raw.ctypes.data)   # raw = b[:size]
        self.row_buffers.remove(base)
        self.kept[key] = (base, raw)
        self.kept_bytes += raw.size

    def check_aliases(self, path: str, index: int, entry: TensorEntry, raw: np.ndarray) -> None:
        """Check the inputs of this task that repeat output ``index`` of ``path`` (bytes ``raw``,
        just read) now, while those bytes are in memory: each input's bytes are read from its
        file and compared in one kernel call with the GIL released (``checked``), so the check
        costs no buffer, no kept copy and almost no Python when its row comes. Inputs whose
        header cannot be read are left to the row (``_alias_same``), which reports it."""
        rows = self.consumers.pop((path, index), None)
        if not rows:
            return
        key, desc, size = (path, index), _desc(entry), entry.size
        for row, c_path, c_packed, c_index in rows:
            try:
                c_entry = self.header(c_path, c_packed).entry("input", c_index)
                if _desc(c_entry) != desc or c_entry.size != size:
                    same = False
                else:
                    same = fused_metrics.file_same_bytes(self._fd(c_path), c_entry.offset, raw)
            except (PshellError, OSError):
                continue
            if same is None:   # no kernel: the row checks
                return
            self.checked[row] = size if same else -1
            left = self.wanted.get(key, 0) - 1
            if left > 0:
                self.wanted[key] = left
            else:
                self.wanted.pop(key, None)

    def producer_bytes(self, key: tuple[str, int], header: DumpHeader, entry: TensorEntry) -> np.ndarray | None:
        """An output's bytes for an alias check: kept when read earlier in this task, else read;
        the count of checks still to come is decreased, the kept copy released after the last."""
        kept = self.kept.get(key)
        left = self.wanted.get(key, 0) - 1
        if left > 0:
            self.wanted[key] = left
        else:
            self.wanted.pop(key, None)
        if kept is None:
            return self.raw(header, entry)
        if left <= 0:
            del self.kept[key]
            self.kept_bytes -= kept[1].size
            self.row_buffers.append(kept[0])        # still valid for this row, reused after it
        return kept[1]

    def golden(self, path: str) -> np.ndarray:
        return read_npy_into(path, self.take)


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


def _desc(e: TensorEntry) -> tuple:
    return e.dtype, e.format, e.shape, e.original_shape, e.sub_format


def _alias_same(files: _TaskFiles, entry: TensorEntry, raw: np.ndarray | None, alias: tuple) -> bool:
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
    if raw is None or src_bytes is None or _desc(entry) != _desc(src) or entry.size != src.size:
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
    files = _TaskFiles(wanted, consumers if fused_metrics.batch_enabled() else None)
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


def _computed(batch: PairBatch, files: _TaskFiles, waiting: list) -> Iterator[tuple]:
    """The batch computed, then every waiting result in row order."""
    results = {res.row: res for res in batch.compute()}
    files.release_held()
    for item in waiting:
        yield result_row(results[item]) if isinstance(item, int) else item
    waiting.clear()


def run_task(task: tuple) -> list[tuple]:
    """The task a worker runs: the whole task, results in row order."""
    return list(iter_task(task))


def _queue(files: _TaskFiles, batch: PairBatch, header: DumpHeader, entry: TensorEntry, raw: np.ndarray,
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


def _run_row(files: _TaskFiles, memo: dict, batch: PairBatch | None, device_shape_mode: bool, op: str,
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
        key = (golden, _desc(entry), target_format, fallback_shape, raw.tobytes())
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
