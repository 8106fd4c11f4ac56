"""Small float pairs of a ``vc`` task computed together: one C call for a batch of pairs.

Why: a network of thousands of small ops gives pairs of a few hundred KB, where the Python
around each pair (the layout restore's views and copy, two kernel calls, combining chunk rows,
building the metrics) costs as much as the kernel's passes and holds the GIL, so the second
worker thread mostly waits. Here a task's worker reads a pair's bytes as before (``tasks``),
then hands them to a :class:`PairBatch` instead of computing them; a full batch (or the task's
end) goes to the kernel's ``batch_metrics`` in one call with the GIL released, which restores
the NPU layout by an index array, runs both passes and combines them
(``fused_metrics.batch_passes``). Python then builds each row's Metrics with the same
``metrics_from_passes`` as the one-pair path: the CSV and JSON stay byte-identical.

The index array of a layout (NPU tensor description, target format, golden shape) is made once
with the real restore code (``dump_file.to_logical`` of an ``arange`` in place of the data, then
the worker's own NCHW/NHWC match with the golden), so the element order is by construction the
one the one-pair path computes on; tensors already in logical order need none. Anything the
batch does not take (the numpy path, NPU-vs-NPU, bool/int/complex, decoded dtypes, Fortran-order
goldens, shape mismatches, unreadable parts) stays on the one-pair path, which reports it.
"""

from __future__ import annotations

import math
import threading
from typing import NamedTuple

import numpy as np

from precision_shell.analysis.compare import fused_metrics
from precision_shell.analysis.compare.metrics import DEFAULT_CHUNK, metrics_from_passes, scalar_and_ratio
from precision_shell.analysis.compare.worker import PairResult, _dtype_text, _match_golden_layout, failed_pair
from precision_shell.errors import PshellError
from precision_shell.formats.dtypes import needs_decoding, numpy_dtype
from precision_shell.formats.dump_file import DumpHeader, TensorEntry, to_logical
from precision_shell.formats.layout import PLAIN_LAYOUTS

# A batch is computed when it holds this many pairs or bytes (both sides): long enough that the
# GIL is released for milliseconds at a time, short enough that the read buffers held for it
# stay a few MB per thread.
BATCH_PAIRS = 4
BATCH_BYTES = 4 << 20
# Pairs larger than this go the one-pair way (the kernel's own chunking serves them well, and a
# gathered copy of their NPU side would be a large scratch buffer).
MAX_PAIR_ELEMENTS = 1 << 22
# Index arrays kept (bytes); beyond, the cache starts again.
_INDEX_BUDGET = 64 << 20


class PairSpec(NamedTuple):
    """What a layout's pairs share: the gather and everything of the row but the metrics."""

    index: np.ndarray | None            # int32 starts of runs of the logical order, None: as read
    run: int                            # logical element run*j + t is device element index[j] + t*step
    step: int
    x_kind: int
    y_kind: int
    n: int
    scalar_shape: bool
    ratio_ok: bool
    shape: tuple[int, ...]
    npu_dtype: str
    golden_dtype: str
    x_bytes: int                        # the NPU bytes the gather reads (or the pair takes)
    nbytes: int                         # both sides' bytes, as the one-pair path counts them
    lengths: np.ndarray | None = None   # int32: runs are pieces of these lengths from index (step 1)


_specs: dict[tuple, PairSpec | None] = {}
_spec_bytes = 0
_spec_lock = threading.Lock()


def enabled(device_shape_mode: bool) -> bool:
    return not device_shape_mode and fused_metrics.batch_enabled()


def spec_for(header: DumpHeader, entry: TensorEntry, target_format: str | None,
             fallback_shape: tuple[int, ...] | None, golden: np.ndarray) -> PairSpec | None:
    """The batch's spec of a pair (cached by layout), or None when the pair is not the batch's."""
    key = (entry.dtype, entry.format, entry.shape, entry.original_shape, entry.sub_format, entry.size,
           target_format, fallback_shape, golden.dtype.str, golden.shape, golden.flags.c_contiguous)
    try:
        return _specs[key]
    except KeyError:
        pass
    spec = _make_spec(header, entry, target_format, fallback_shape, golden)
    global _spec_bytes
    with _spec_lock:
        size = sum(a.nbytes for a in (spec.index, spec.lengths) if a is not None) if spec is not None else 0
        if _spec_bytes + size > _INDEX_BUDGET:
            _specs.clear()
            _spec_bytes = 0
        _specs[key] = spec
        _spec_bytes += size
    return spec


def _make_spec(header: DumpHeader, entry: TensorEntry, target_format: str | None,
               fallback_shape: tuple[int, ...] | None, golden: np.ndarray) -> PairSpec | None:
    if needs_decoding(entry.dtype) or not entry.shape or not golden.flags.c_contiguous:
        return None
    try:
        dtype = numpy_dtype(entry.dtype, header.path)
    except PshellError:
        return None
    x_kind, y_kind = fused_metrics.kind_of(dtype), fused_metrics.kind_of(golden.dtype)
    count = math.prod(entry.shape)
    if x_kind is None or y_kind is None or not 0 < count <= MAX_PAIR_ELEMENTS or \
            count * dtype.itemsize > entry.size:
        return None
    order = np.arange(count, dtype=np.int32).reshape(entry.shape)
    try:   # the one-pair path's own restore and golden-layout match, on element numbers
        logical = to_logical(header, entry, order, target_format=target_format, fallback_shape=fallback_shape)
    except (PshellError, ValueError, MemoryError):
        return None     # the one-pair path reports it
    restored = entry.format_name not in PLAIN_LAYOUTS
    npu = _match_golden_layout(logical, tuple(golden.shape), restored)
    n = npu.size
    if n != golden.size or n == 0:
        return None
    index, run, step, lengths = _runs(npu.reshape(-1), tuple(npu.shape))
    shape = tuple(logical.shape)
    if entry.format_name == "ND":
        shape = (n,)    # the vendor compares an ND dump as read, flat (formats.md A.8.1)
    scalar_shape, ratio_ok = scalar_and_ratio(tuple(npu.shape))
    return PairSpec(index, run, step, x_kind, y_kind, n, scalar_shape, ratio_ok, shape,
                    _dtype_text(np.empty(0, dtype), True), _dtype_text(golden, True),
                    (n if index is None else count) * dtype.itemsize,
                    n * (dtype.itemsize + golden.dtype.itemsize), lengths)


# Even runs shorter than this are replaced by contiguous pieces when those are much longer.
_SHORT_RUN = 8


def _runs(flat: np.ndarray, shape: tuple[int, ...]) -> tuple[np.ndarray | None, int, int, np.ndarray | None]:
    """``flat`` (the device element of each logical one) as (run starts, run, step, None): the
    longest run along which it steps evenly, over whole trailing logical axes, else over equal
    parts of the last axis (an NHWC golden's channels cross C0 blocks); (None, n, 1, None) when
    it is 0, 1, 2...; when those runs are short, as (piece starts, 0, 1, piece lengths): the
    contiguous pieces of ``flat``, if they are at least twice as long on average (FRACTAL_NZ
    with a last axis that is not a multiple of 16: pieces of 16 and of the rest)."""
    last = shape[-1] if shape else 1
    runs = [math.prod(shape[axis:]) for axis in range(len(shape))]
    runs += [d for d in range(last // 2, 1, -1) if last % d == 0]
    found = None
    for run in runs:
        if run <= 1:
            continue
        rows = flat.reshape(-1, run).astype(np.int64)
        step = int(rows[0, 1] - rows[0, 0])
        if np.array_equal(rows, rows[:, :1] + step * np.arange(run, dtype=np.int64)):
            if run == flat.size and step == 1 and flat[0] == 0:
                return None, run, 1, None
            found = np.ascontiguousarray(rows[:, 0], dtype=np.int32), run, step, None
            break
    if found is not None and found[1] >= _SHORT_RUN:
        return found
    starts = np.flatnonzero(np.diff(flat.astype(np.int64)) != 1) + 1
    starts = np.concatenate(([0], starts))
    if flat.size >= 2 * (found[1] if found is not None else 1) * len(starts):
        lengths = np.diff(np.append(starts, flat.size)).astype(np.int32)
        return np.ascontiguousarray(flat[starts], dtype=np.int32), 0, 1, lengths
    if found is not None:
        return found
    return np.ascontiguousarray(flat, dtype=np.int32), 1, 0, None


class PairBatch:
    """Pairs waiting for one kernel call, with the read buffers they hold."""

    def __init__(self) -> None:
        self.items: list[tuple] = []
        self.rows: list[tuple[int, PairSpec, str]] = []      # (row, spec, "op:io:index")
        self.bytes = 0

    def __len__(self) -> int:
        return len(self.items)

    def full(self) -> bool:
        return len(self.items) >= BATCH_PAIRS or self.bytes >= BATCH_BYTES

    def add(self, row: int, raw: np.ndarray, golden: np.ndarray, spec: PairSpec, tensor: str) -> bool:
        """Queue a pair (``raw``: the NPU tensor's bytes as read); True when the batch should now
        be computed."""
        self.items.append((raw[:spec.x_bytes], spec.x_kind, spec.index, spec.run, spec.step,
                           golden.reshape(-1).view(np.uint8), spec.y_kind, spec.lengths))
        self.rows.append((row, spec, tensor))
        self.bytes += spec.nbytes
        return len(self.items) >= BATCH_PAIRS or self.bytes >= BATCH_BYTES

    def compute(self) -> list[PairResult]:
        """Every queued pair's result, in queue order; the batch is empty afterwards."""
        if not self.items:
            return []
        try:
            passes = fused_metrics.batch_passes(self.items, DEFAULT_CHUNK)
        except (MemoryError, ValueError) as exc:     # as the one-pair path: those rows fail
            results = [failed_pair(row, tensor, exc) for row, _, tensor in self.rows]
            self.clear()
            return results
        results = []
        for (row, spec, _), (first, second) in zip(self.rows, passes):
            metrics = metrics_from_passes(first, second, spec.n, spec.scalar_shape, spec.ratio_ok)
            results.append(PairResult(row, metrics, spec.npu_dtype, spec.golden_dtype, spec.shape,
                                      " ".join(metrics.reasons), compared=True, nbytes=spec.nbytes))
        self.clear()
        return results

    def clear(self) -> None:
        self.items.clear()
        self.rows.clear()
        self.bytes = 0
