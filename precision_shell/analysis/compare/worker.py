"""The work of one compare pair: open both files, restore the layout, compute metrics.

What every path shares: the checks and metrics of two decoded tensors (``_compare_arrays``), the
rows of pairs that were skipped or failed. ``vc`` runs compact tasks (``compare_tasks``: pread
into reusable buffers); :func:`compare_job` serves one :class:`PairJob` at a time (tests, the
naive benchmark baseline), memory-mapping tensors where the bytes can be used as they lie. Jobs
carry paths and entry indexes, never arrays, so a cluster worker can run them as well.
"""

from __future__ import annotations

import math
import mmap
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import numpy as np

from precision_shell.analysis.compare import coverage
from precision_shell.analysis.compare.metrics import Metrics, compute_metrics
from precision_shell.errors import FormatError, PshellError
from precision_shell.formats.dtypes import needs_decoding, numpy_dtype
from precision_shell.formats.dump_file import (
    DumpHeader, TensorEntry, read_device_array, read_dump_header, to_logical,
)
from precision_shell.formats.golden_npy import load_npy, read_npy_header
from precision_shell.formats.layout import PLAIN_LAYOUTS

# Vendor wording (msaccucmp) for pairs that could not be compared, kept so that users who grep
# their old CSVs find the same reasons.
NO_GOLDEN = "There is no the ground truth dump file for {tensor}"
NO_DUMP = "There is no dump file for my output operator"


@dataclass(frozen=True)
class TensorSource:
    """Where a worker finds one side of a pair."""

    path: str
    kind: str                                   # "dump" | "npy"
    io: str = "output"                          # dump entry group: "input" | "output"
    index: int = 0
    target_format: str | None = None            # layout the logical shape is written in
    fallback_shape: tuple[int, ...] | None = None  # logical shape when the dump has none


@dataclass(frozen=True)
class PairJob:
    row: int                                    # position of the row in the result
    op: str                                     # NPU op name
    io: str                                     # "input" | "output"
    index: int
    npu: TensorSource | None
    golden: TensorSource | None
    golden_ref: str | None = None               # "framework_op:idx" (or "op:output:i" NPU vs NPU)
    reason: str = ""                            # why the pair cannot be compared (no file...)
    nbytes: int = 0                             # bytes both sides occupy on disk (batching)
    device_shape_mode: bool = False             # NPU vs NPU: report device shapes, check them
    # An input that is (probably) the very bytes of its producer's dumped output, compared with
    # the same golden: (row of that output, its TensorSource). If the bytes are equal, its metrics
    # are that row's -- a memcmp instead of a second metric pass over the same data.
    alias: tuple[int, TensorSource] | None = None

    @property
    def tensor(self) -> str:
        return f"{self.op}:{self.io}:{self.index}"


@dataclass
class PairResult:
    row: int
    metrics: Metrics
    npu_dtype: str = "NaN"
    golden_dtype: str = "NaN"
    shape: tuple[int, ...] | None = None
    reason: str = ""
    compared: bool = False                      # metrics came from data (not an all-NaN row)
    nbytes: int = 0                             # tensor bytes read for this pair
    same_as: int | None = None                  # row whose metrics these are (bit-identical data)
    extra: dict = field(default_factory=dict)
    coverage_kind: str = ""                     # why not compared, counted alike (coverage)
    file: str | None = None                     # the file that could not be read, if one
    unreadable: bool = False                    # a file could not be read or the pair failed


def skipped_pair(row: int, reason: str, kind: str, npu_dtype: str = "NaN", golden_dtype: str = "NaN",
                 shape: tuple[int, ...] | None = None) -> PairResult:
    """The row of a pair that was not compared for a reason of ``coverage``'s kinds."""
    return PairResult(row, Metrics.unavailable(reason), npu_dtype, golden_dtype, shape, reason,
                      coverage_kind=kind)


def failed_pair(row: int, tensor: str, exc: Exception) -> PairResult:
    """The row of a pair whose file could not be read or decoded, or whose compare failed."""
    if isinstance(exc, PshellError):
        reason = str(exc)
        file = exc.path if isinstance(exc, FormatError) else None
        kind = coverage.reason_kind(exc.reason if isinstance(exc, FormatError) else reason)
    else:  # a numpy/OS failure on this pair only
        reason, file, kind = f"{tensor}: {type(exc).__name__}: {exc}", None, type(exc).__name__
    return PairResult(row, Metrics.unavailable(reason), reason=reason, coverage_kind=kind, file=file,
                      unreadable=True)


# ------------------------------------------------------------------------------------------------
# reading

def _mapped_device_array(header: DumpHeader, entry: TensorEntry) -> np.ndarray:
    """The device-layout array, memory-mapped when its bytes can be used in place."""
    if needs_decoding(entry.dtype) or not entry.shape:
        return read_device_array(header, entry)   # needs decoding or a derived shape
    dtype = numpy_dtype(entry.dtype, header.path)
    count = math.prod(entry.shape)
    if count == 0 or count * dtype.itemsize > entry.size or \
            entry.offset + count * dtype.itemsize > header.file_size:
        return read_device_array(header, entry)   # raises the reader's precise FormatError
    try:
        return map_array(header.path, dtype, entry.offset, count).reshape(entry.shape)
    except (OSError, ValueError):
        return read_device_array(header, entry)


# Every byte of a mapped tensor is read, so fault the pages in with one call (Linux
# MAP_POPULATE) instead of one fault per 4 KiB page: ~1.7x faster on a warm page cache.
_MAP_FLAGS = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)


def map_array(path: str, dtype: np.dtype, offset: int, count: int) -> np.ndarray:
    """``count`` items at ``offset`` of ``path``, memory-mapped read-only. Lighter than np.memmap
    (a tenth of the set-up cost, which shows with thousands of small tensors); the mapping
    lives as long as the array (``.base``)."""
    nbytes = count * np.dtype(dtype).itemsize
    start = offset - offset % mmap.ALLOCATIONGRANULARITY
    with open(path, "rb") as fh:
        mapped = mmap.mmap(fh.fileno(), offset + nbytes - start, flags=_MAP_FLAGS,
                           prot=mmap.PROT_READ, offset=start)
    return np.frombuffer(mapped, dtype=dtype, count=count, offset=offset - start)


def dump_logical_array(header: DumpHeader, entry: TensorEntry, target_format: str | None = None,
                       fallback_shape: tuple[int, ...] | None = None) -> np.ndarray:
    """As ``dump_file.read_logical_array``, but memory-mapped and with the graph's logical shape
    as a fallback when the dump does not record one."""
    return to_logical(header, entry, _mapped_device_array(header, entry),
                      target_format=target_format, fallback_shape=fallback_shape)


def _golden_array(path: str) -> np.ndarray:
    header = read_npy_header(path)   # FormatError for anything that is not a sound .npy
    count = math.prod(header.shape)
    if count == 0:
        return load_npy(path)
    try:
        flat = map_array(header.path, header.dtype, header.data_offset, count)
    except (OSError, ValueError):
        return load_npy(path)
    return flat.reshape(header.shape, order="F" if header.fortran_order else "C")


class _HeaderCache:
    """An op's inputs and outputs live in one file: read its header once per batch."""

    def __init__(self) -> None:
        self._headers: dict[str, DumpHeader] = {}

    def get(self, path: str) -> DumpHeader:
        header = self._headers.get(path)
        if header is None:
            header = self._headers[path] = read_dump_header(path)
        return header


def _load(src: TensorSource, headers: _HeaderCache) -> tuple[np.ndarray, TensorEntry | None]:
    if src.kind == "npy":
        return _golden_array(src.path), None
    header = headers.get(src.path)
    entry = header.entry(src.io, src.index)
    return dump_logical_array(header, entry, src.target_format, src.fallback_shape), entry


def _match_golden_layout(npu: np.ndarray, golden_shape: tuple[int, ...], restored: bool) -> np.ndarray:
    """NCHW vs NHWC: the vendor trusts the golden .npy's shape over the graph's format label.
    Only for tensors restored from a device layout (a plain ND reshape has no axis meaning)."""
    if not restored or npu.shape == golden_shape or npu.ndim != 4 or len(golden_shape) != 4:
        return npu
    for perm in ((0, 2, 3, 1), (0, 3, 1, 2)):
        if tuple(npu.shape[p] for p in perm) == golden_shape:
            return npu.transpose(perm)
    return npu


def _alias_bytes_equal(a: TensorSource, b: TensorSource, headers: "_HeaderCache") -> int:
    """Byte count when tensors ``a`` and ``b`` have the same description and the same bytes,
    else 0 (any read problem: 0, the normal path then reports it)."""
    try:
        ha, hb = headers.get(a.path), headers.get(b.path)
        ea, eb = ha.entry(a.io, a.index), hb.entry(b.io, b.index)
    except PshellError:
        return 0
    if (ea.dtype, ea.format, ea.shape, ea.original_shape, ea.sub_format) != \
            (eb.dtype, eb.format, eb.shape, eb.original_shape, eb.sub_format):
        return 0
    return ea.size if _same_bytes(a.path, ea, b.path, eb) else 0


def _same_bytes(path_a: str, a: TensorEntry, path_b: str, b: TensorEntry) -> bool:
    """Bit-identical tensors (NPU vs NPU): NaN/Inf on both sides then is no divergence, although
    the metrics say NaN."""
    if (a.dtype, a.shape, a.size) != (b.dtype, b.shape, b.size):
        return False
    if a.size == 0:
        return True
    try:
        x, y = map_array(path_a, np.uint8, a.offset, a.size), map_array(path_b, np.uint8, b.offset, b.size)
    except (OSError, ValueError):
        return False
    k = a.size // 8 * 8   # compare 8 bytes at a time: ~3x faster than byte by byte
    return bool(np.array_equal(x[:k].view(np.uint64), y[:k].view(np.uint64))
                and np.array_equal(x[k:], y[k:]))


def _dtype_text(arr: np.ndarray, vendor_bf16: bool) -> str:
    name = arr.dtype.name
    # msaccucmp casts bf16 to float32 while decoding, so its CSV shows float32 (A.8.1)
    return "float32" if vendor_bf16 and name == "bfloat16" else name


def _shape_text(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ")"


# ------------------------------------------------------------------------------------------------
# comparing

def compare_job(job: PairJob, headers: _HeaderCache | None = None) -> PairResult:
    """One row. Never raises: a problem with this pair becomes the row's reason."""
    headers = headers or _HeaderCache()
    if job.npu is None or job.golden is None:
        return skipped_pair(job.row, job.reason, coverage.NO_DUMP if job.npu is None else coverage.NO_GOLDEN)
    if job.alias is not None:
        same = _alias_bytes_equal(job.npu, job.alias[1], headers)
        if same:
            return PairResult(job.row, Metrics.unavailable(), same_as=job.alias[0], nbytes=2 * same)
    try:
        npu, npu_entry = _load(job.npu, headers)
        golden, golden_entry = _load(job.golden, headers)
        return _compare_arrays(job.row, npu, npu_entry, golden, golden_entry, job.device_shape_mode,
                               job.npu.path, job.golden.path)
    except (PshellError, MemoryError, ValueError, OSError) as exc:
        return failed_pair(job.row, job.tensor, exc)


def _compare_arrays(row: int, npu: np.ndarray, npu_entry: TensorEntry | None, golden: np.ndarray,
                    golden_entry: TensorEntry | None, device_shape_mode: bool, npu_path: str,
                    golden_path: str, identical: bool | None = None) -> PairResult:
    """The row of two decoded tensors (the checks and metrics every path shares). ``identical``:
    NPU vs NPU, whether both tensors' bytes are equal when the caller already knows (else read)."""
    npu_dtype = _dtype_text(npu, not device_shape_mode)
    golden_dtype = _dtype_text(golden, not device_shape_mode)
    shape = tuple(npu.shape)
    if device_shape_mode and npu_entry is not None and golden_entry is not None:
        shape = tuple(npu_entry.shape)
        if npu_entry.shape != golden_entry.shape:
            reason = (f"device shape {list(npu_entry.shape)} does not match the other run's "
                      f"{list(golden_entry.shape)}")
            return skipped_pair(row, reason, coverage.SHAPE_DIFFERS, npu_dtype, golden_dtype, shape)
    restored = npu_entry is not None and npu_entry.format_name not in PLAIN_LAYOUTS
    npu = _match_golden_layout(npu, tuple(golden.shape), restored)
    if npu.size != golden.size:
        reason = (f"npu shape {_shape_text(npu.shape)} does not match the ground truth shape "
                  f"{_shape_text(golden.shape)}")
        return skipped_pair(row, reason, coverage.SHAPE_DIFFERS, npu_dtype, golden_dtype, shape)
    metrics = compute_metrics(npu, golden)
    if not device_shape_mode and npu_entry is not None and npu_entry.format_name == "ND":
        shape = (npu.size,)   # the vendor compares an ND dump as read, flat (formats.md A.8.1)
    result = PairResult(row, metrics, npu_dtype, golden_dtype, shape, " ".join(metrics.reasons),
                        compared=True, nbytes=npu.nbytes + golden.nbytes)
    if device_shape_mode and npu_entry is not None and golden_entry is not None:
        result.extra["identical"] = identical if identical is not None else \
            _same_bytes(npu_path, npu_entry, golden_path, golden_entry)
    return result


def iter_batch(jobs: Sequence[PairJob]) -> Iterator[PairResult]:
    """Compare a batch of pairs (one op or a group of ops), yielding each result as it exists."""
    headers = _HeaderCache()
    for job in jobs:
        yield compare_job(job, headers)


def run_batch(jobs: Sequence[PairJob]) -> list[PairResult]:
    """A batch of :class:`PairJob` in one go, results in job order."""
    return list(iter_batch(jobs))
