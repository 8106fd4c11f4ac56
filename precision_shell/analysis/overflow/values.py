"""The value scan of ``ac``: every dumped tensor of a dump set checked for nan, ±inf and fp16
saturation (|x| == 65504), as bit patterns: small files (10^5 in a workspace) in one read each
and in batches (``_SmallFileBatch``), larger ones (up to ``_WHOLE_MAX``) in one open and one
read each into a reusable buffer of the reading thread, the rare larger still a tensor at a
time; memory stays bounded. The check is one pass of the C kernel
(``fused_metrics.value_counts``) where it is built, else a numpy mask and max. Only the few
dumps that fail the check get full statistics, from the bytes already read.

It runs in this process (on threads when there is enough to read: the reads and the kernel
release the GIL), or on an executor (``analysis.compare.executors``: a Dask cluster) in tasks of
``SCAN_TASK_FILES`` dump files that return compact stats, never tensors.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from precision_shell.analysis.compare import fused_metrics
from precision_shell.analysis.compare.tensor import TensorStats, tensor_stats
from precision_shell.errors import FormatError
from precision_shell.formats.dtypes import DT_UNDEFINED, is_supported_dtype, numpy_dtype
from precision_shell.formats.lowbit import by_dtype_code
from precision_shell.formats.dump_file import (
    DumpHeader, parse_dump_header, read_device_array, read_dump, read_dump_into, read_logical_array,
    read_small_file, release_thread_buffers, thread_buffers, v2_tensor_layout,
)
from precision_shell.model.dump_index import DumpFile


@dataclass
class TensorOverflow:
    kind: str                  # "input" | "output"
    index: int
    dtype: str
    shape: tuple[int, ...]
    stats: TensorStats

    @property
    def bad(self) -> bool:
        s = self.stats
        return bool(s.nan or s.pos_inf or s.neg_inf or s.fp16_saturated)

    def to_json(self) -> dict:
        s = self.stats
        return {"index": self.index, "dtype": self.dtype, "shape": list(self.shape), "nan": s.nan,
                "pos_inf": s.pos_inf, "neg_inf": s.neg_inf, "saturated": s.fp16_saturated,
                "max": s.max, "min": s.min}



# |x| as an unsigned bit pattern at or above this means: not finite (fp32, bf16), or not finite
# or saturated at ±65504 (fp16, whose largest finite magnitude is 0x7BFF).
_SUSPECT_BITS = {"float16": (np.uint16, 0x7FFF, 0x7BFF), "bfloat16": (np.uint16, 0x7FFF, 0x7F80),
                 "float32": (np.uint32, 0x7FFFFFFF, 0x7F800000),
                 "float64": (np.uint64, 0x7FFFFFFFFFFFFFFF, 0x7FF0000000000000)}
_CHUNK = 1 << 20
_BITS_BY_NUM: dict[int, tuple | None] = {}  # dtype.num -> _SUSPECT_BITS entry (dtype.name is slow)


def _suspect_bits(dtype: np.dtype) -> tuple | None:
    if dtype.num not in _BITS_BY_NUM:
        _BITS_BY_NUM[dtype.num] = _SUSPECT_BITS.get(dtype.name)
    return _BITS_BY_NUM[dtype.num]


def looks_clean(array: np.ndarray) -> bool:
    """True when a tensor certainly has no nan, inf or fp16 saturation: one integer max over
    the sign-stripped bit patterns, in chunks (no float work, bounded memory). Most tensors of a
    dump are clean, so the full statistics are computed only for the few that are not."""
    counts = fused_metrics.value_counts(array) if array.size else None
    if counts is not None:   # the C kernel: one pass, GIL released
        return not any(counts)
    spec = _suspect_bits(array.dtype)
    if spec is None or array.size == 0:
        # ints and bools cannot overflow into inf/nan; fp8 (ml_dtypes, kind "V"), complex and
        # anything else take the full statistics
        return array.size == 0 or array.dtype.kind in "iub"
    utype, mask, limit = spec
    bits = array.reshape(-1).view(utype)
    buf = np.empty(min(_CHUNK, bits.size), dtype=utype)
    for start in range(0, bits.size, _CHUNK):
        part = bits[start:start + _CHUNK]
        out = buf[:part.size]
        np.bitwise_and(part, mask, out=out)
        if out.max() >= limit:
            return False
    return True


def dump_looks_clean(header: DumpHeader, data: bytes | None = None) -> bool:
    """Every input and output of a dump passes :func:`looks_clean` (device layout: padding is
    zero, so it cannot hide or fake an overflow). ``data``: the whole file, when read whole."""
    for entry in header.inputs + header.outputs:
        if by_dtype_code(entry.dtype) is not None:
            return False   # low-precision formats: saturation at their own maximum, in the full stats
        try:
            array = read_device_array(header, entry, data)
        except FormatError:
            return False  # let the full path report it
        if not looks_clean(array):
            return False
    return True


def tensor_overflows(header: DumpHeader, kinds=("input", "output"),
                     data: bytes | None = None) -> list[TensorOverflow]:
    """Stats of each tensor of one dump, read one at a time (layout restored so padding is not
    counted as data). ``data``: the whole file, when read whole."""
    out = []
    for entry in header.inputs + header.outputs:
        if entry.kind not in kinds:
            continue
        array = read_logical_array(header, entry, data=data)   # complex: stats of both parts
        lowbit = by_dtype_code(entry.dtype)
        saturation = lowbit.max_finite if lowbit is not None else None
        out.append(TensorOverflow(entry.kind, entry.index, entry.dtype_name, tuple(array.shape),
                                  tensor_stats(array, saturation=saturation)))
    return out


# ----------------------------------------------------------------------------------------------
# the value scan of many small files

_SMALL = 1 << 16          # files under this size are read whole and checked in batches
_WHOLE_MAX = 64 << 20    # ... up to this, read whole into a reusable buffer by the per-file path
_BATCH_BYTES = 4 << 20    # small files held at once for one batched check (bounds memory)
_BATCH_FILES = 512        # ... and at most this many (bounds the delay of progress and Ctrl-C)


class _SmallFileBatch:
    """Small dump files read whole, whose float tensors are checked all at once: per data type,
    their bytes joined into one array, one mask and one max, and only when that max is suspect,
    a search for the files it came from. Decides exactly as :func:`dump_looks_clean` for the
    files it accepts; the others (and every suspect file) go through the per-file path."""

    # data-type code -> (itemsize, bit check or None) for the types decided here: the four float
    # types (bit check) and those that cannot overflow (ints, bools: looks_clean passes them
    # unread). fp8, raw bytes, complex and undecodable types take the per-file path.
    _KINDS = {code: (dt.itemsize, _suspect_bits(dt))
              for code, dt in ((c, numpy_dtype(c)) for c in range(256) if c != DT_UNDEFINED and is_supported_dtype(c))
              if _suspect_bits(dt) or dt.kind in "iub"}
    # tensor layout -> its float segments, merged when back to back: ((code, start, end,
    # element count), ...) from the data start; None: the layout needs the per-file path
    _PLANS: dict[tuple, tuple | None] = {}

    def __init__(self):
        self.files: list[tuple] = []          # (DumpFile, whole bytes or None, needs per-file path)
        self.nbytes = 0
        self._segments: dict[int, list[tuple]] = {}   # code -> [(bytes, element count, file no)]

    def add(self, f, path: str) -> None:
        data = None       # None: the per-file path reads it (again) and words any error
        if f.size < _SMALL:
            try:
                data = read_small_file(path, f.size)
            except OSError:
                pass
        accepted = data is not None and self._accept(data, len(self.files))
        self.files.append((f, data, not accepted))
        self.nbytes += len(data) if data is not None else 0

    def _accept(self, data: bytes, file_no: int) -> bool:
        found = v2_tensor_layout(data)
        if found is None:
            return False
        start, layout = found
        try:
            plan = self._PLANS[layout]
        except KeyError:
            if len(self._PLANS) >= 4096:
                self._PLANS.clear()
            plan = self._PLANS[layout] = self._plan(layout)
        if plan is None:
            return False
        view = memoryview(data)
        for code, begin, end, count in plan:
            self._segments.setdefault(code, []).append((view[start + begin:start + end], count, file_no))
        return True

    def _plan(self, layout: tuple) -> tuple | None:
        pending: list[list[int]] = []
        for code, dims, offset, size in layout:
            kind = self._KINDS.get(code)
            # empty and odd shapes keep the per-file path's exact rules
            if kind is None or not dims or len(dims) > 32 or min(dims) <= 0:
                return None
            need = math.prod(dims) * kind[0]
            if need > size:
                return None
            if kind[1] is None:
                continue
            if pending and pending[-1][0] == code and pending[-1][2] == offset:
                pending[-1][2] = offset + need   # back to back: one segment
            else:
                pending.append([code, offset, offset + need])
        return tuple((code, begin, end, (end - begin) // self._KINDS[code][0]) for code, begin, end in pending)

    def suspects(self) -> set[int]:
        """Numbers of the accepted files with a float value that may be nan, inf or ±65504."""
        found: set[int] = set()
        for code, segments in self._segments.items():
            parts, counts, owners = zip(*segments)
            utype, mask, limit = self._KINDS[code][1]
            bits = np.frombuffer(b"".join(parts), dtype=utype)
            masked = np.bitwise_and(bits, mask)
            if masked.max() < limit:
                continue
            starts = np.cumsum((0,) + counts[:-1])   # segments are never empty
            per_segment = np.maximum.reduceat(masked, starts)
            found.update(owners[i] for i in np.flatnonzero(per_segment >= limit))
        return found


def _batched(files: list[DumpFile]):
    """``(file, whole bytes or None, unclear)`` for each file in order, ``unclear`` when the
    batched check could not clear it; a batch's files come once the whole batch is checked."""
    batch, folder, folder_text = _SmallFileBatch(), None, ""
    for pos, f in enumerate(files, 1):
        if f.folder is not folder:   # a str() of each file's Path would cost more than its read
            folder, folder_text = f.folder, os.fspath(f.folder)
        batch.add(f, os.path.join(folder_text, f.filename))
        if batch.nbytes >= _BATCH_BYTES or len(batch.files) >= _BATCH_FILES or pos == len(files):
            suspects = batch.suspects()
            for file_no, (f_, data, per_file) in enumerate(batch.files):
                yield f_, data, per_file or file_no in suspects
            batch = _SmallFileBatch()


def _file_overflows(f, data: bytes | None) -> tuple[DumpHeader, list[TensorOverflow] | None]:
    """One dump the batched check could not clear: its header, and the stats of its tensors
    (None when it is clean after all), from one read of the file (up to ``_WHOLE_MAX``)."""
    path = os.fspath(f.path)
    if data is not None:
        header = parse_dump_header(path, data)
    elif f.size > _WHOLE_MAX:
        header = read_dump(path, 0)[0]      # tensor by tensor
    else:
        buffers = thread_buffers()
        taken: list = []

        def take(nbytes: int):
            taken.append(buffers.take(nbytes))
            return taken[-1]
        try:
            header, data = read_dump_into(path, take)
            return header, _overflows(header, data)
        finally:
            for buf in taken:
                buffers.give(buf)
    return header, _overflows(header, data)


def _overflows(header: DumpHeader, data) -> list[TensorOverflow] | None:
    if dump_looks_clean(header, data):
        return None
    return tensor_overflows(header, data=data)


SCAN_TASK_FILES = 2048   # dump files per value-scan task on an executor
# The local scan goes to threads from this many bytes, in tasks of about _THREAD_TASK_BYTES.
_THREADS_FROM = 32 << 20
_THREAD_TASK_BYTES = 16 << 20


def scan_value_batch(files: list[DumpFile]) -> tuple[list[tuple], list[tuple[int, str, str]]]:
    """One value-scan task (an executor's worker runs it): for each file of ``files`` that has a
    nan, inf or fp16-saturated value, ``(position, header op name, tensor stats)``; and
    ``(position, path, reason)`` for each file it could not read. Compact: stats, never tensors."""
    found, errors = [], []
    for pos, (f, data, unclear) in enumerate(_batched(files)):
        if not unclear:
            continue
        try:
            header, tensors = _file_overflows(f, data)
        except FormatError as exc:
            errors.append((pos, exc.path or str(f.path), exc.reason))
            continue
        if tensors is not None and any(t.bad for t in tensors):
            found.append((pos, header.op_name, tensors))
    return found, errors


def _tasks_by_files(files: list[DumpFile], size: int):
    for start in range(0, len(files), size):
        yield start, (files[start:start + size],)


def _tasks_by_bytes(files: list[DumpFile], nbytes: int):
    start, total = 0, 0
    for pos, f in enumerate(files):
        total += f.size
        if total >= nbytes or pos - start + 1 >= SCAN_TASK_FILES:
            yield start, (files[start:pos + 1],)
            start, total = pos + 1, 0
    if start < len(files):
        yield start, (files[start:],)


def scan_values(files: list[DumpFile], bar: Any, executor=None) -> tuple[list[tuple], list[FormatError], int, bool]:
    """The value scan of ``files``: ``(file, header op name, tensor stats)`` for each file with a
    bad value, the files it could not read, how many it scanned, and whether Ctrl-C stopped it
    (what was scanned is kept). ``executor``: run it there in tasks (a lost task's files are
    reported unreadable). Without one, a large scan runs on this process's threads, with the
    same result, in the same order, as one thread."""
    from concurrent.futures import ThreadPoolExecutor

    from precision_shell.analysis.compare.executors import run_tasks

    if executor is None:
        workers = os.cpu_count() or 1
        if workers == 1 or len(files) < 2 or sum(f.size for f in files) < _THREADS_FROM:
            return _scan_here(files, bar)
        with ThreadPoolExecutor(workers, thread_name_prefix="pshell-ac") as pool:
            return _scan_on(pool, files, bar, _tasks_by_bytes(files, _THREAD_TASK_BYTES), workers, run_tasks,
                            local=True)
    return _scan_on(executor, files, bar, _tasks_by_files(files, SCAN_TASK_FILES),
                    max(1, getattr(executor, "_max_workers", 1)), run_tasks, local=False)


def _scan_here(files: list[DumpFile], bar: Any) -> tuple[list[tuple], list[FormatError], int, bool]:
    try:
        return _scan_files(files, bar)
    finally:
        release_thread_buffers()


def _scan_files(files: list[DumpFile], bar: Any) -> tuple[list[tuple], list[FormatError], int, bool]:
    found: list[tuple] = []
    errors: list[FormatError] = []
    scanned = 0
    try:
        for f, data, unclear in _batched(files):
            scanned += 1
            bar.advance()
            if not unclear:
                continue
            try:
                header, tensors = _file_overflows(f, data)
            except FormatError as exc:
                errors.append(exc)
                continue
            if tensors is not None and any(t.bad for t in tensors):
                found.append((f, header.op_name, tensors))
    except KeyboardInterrupt:
        return found, errors, scanned, True
    return found, errors, scanned, False


def _scan_on(executor, files: list[DumpFile], bar: Any, tasks, workers: int, run_tasks,
             local: bool) -> tuple[list[tuple], list[FormatError], int, bool]:
    found: list[tuple[int, tuple]] = []
    errors: list[tuple[int, FormatError]] = []
    scanned = 0
    sizes: dict[int, int] = {}

    def sized(pairs):
        for start, args in pairs:
            sizes[start] = len(args[0])
            yield start, args

    def on_result(start: int, value: tuple) -> None:
        nonlocal scanned
        bad, unreadable = value
        errors.extend((start + pos, FormatError(path, reason)) for pos, path, reason in unreadable)
        found.extend((start + pos, (files[start + pos], op_name, tensors)) for pos, op_name, tensors in bad)
        scanned += sizes[start]
        bar.advance(sizes[start])

    def on_error(start: int, exc: BaseException) -> None:
        why = str(exc).splitlines()[0] if str(exc) else ""
        errors.extend((start + i, FormatError(f.path, f"value scan task lost ({type(exc).__name__}: {why})"))
                      for i, f in enumerate(files[start:start + sizes[start]]))

    cancelled = run_tasks(executor, scan_value_batch, sized(tasks), on_result, on_error, 3 * workers)
    errors.sort(key=lambda item: item[0])
    if local:   # the order one thread gives
        found.sort(key=lambda item: item[0])
    else:       # a task's files come back together: keep the order a local scan gives
        found.sort(key=lambda item: (item[1][0].name.timestamp, item[1][0].filename))
    return [item for _, item in found], [exc for _, exc in errors], scanned, cancelled
