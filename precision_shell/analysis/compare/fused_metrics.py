"""The compiled metrics kernel (``_fused_metrics``, C) behind the numpy kernels' interface.

:func:`passes` gives the same :class:`~.metrics_kernels.FirstPass` and
:class:`~.metrics_kernels.SecondPass` as ``metrics_kernels.first_pass`` / ``second_pass`` (bit
for bit: same float32 element operations, numpy's own float32 log, numpy's float64 summation
order, chunk by chunk), and :func:`bool_counts` the same ``BoolCounts``, in two passes over the
data with no temporary arrays and the GIL released. They return None when the kernel cannot
take the pair (not built, ``PSHELL_NO_EXT=1``, a dtype other than float16/bfloat16/float32,
non-contiguous or non-native-endian data): the caller then keeps the numpy path, which stays
the reference and the fallback. :func:`value_counts` is ``ac``'s check (nan, ±inf, fp16
saturation from the bit patterns), with the same rules.
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from precision_shell.analysis.compare import metrics_kernels as k

try:
    from precision_shell.analysis.compare import _fused_metrics as _ext
except ImportError:  # not built: no compiler at install time (setup.py warned)
    _ext = None

DISABLE_VARIABLE = "PSHELL_NO_EXT"
# the C kernel's row layouts (one row per chunk)
FIRST_FIELDS = ("x_min", "x_max", "y_min", "y_max", "x_sum", "y_sum", "xy_sum", "sq_diff_sum",
                "abs_diff_sum", "max_abs_diff", "rel_sum", "max_rel", "within_one_thousandth",
                "within_five_thousandths")
SECOND_FIELDS = ("x_dev_sq_sum", "y_dev_sq_sum", "kl_a_sum", "kl_b_sum", "kl_log_sum")
_MIN_FIELDS, _MAX_FIELDS = ("x_min", "y_min"), ("x_max", "y_max", "max_abs_diff", "max_rel")
_COUNT_FIELDS = ("within_one_thousandth", "within_five_thousandths")


def built() -> bool:
    """Whether the C kernel was compiled and imports."""
    return _ext is not None


def active_path() -> str:
    """``"c-extension"`` when float pairs go through the C kernel, else ``"numpy"``."""
    return "c-extension" if _enabled() else "numpy"


def _enabled() -> bool:
    return _ext is not None and os.environ.get(DISABLE_VARIABLE) != "1"


def _kind(a: np.ndarray) -> int | None:
    if a.ndim != 1 or not a.flags.c_contiguous or not a.dtype.isnative:
        return None
    if a.dtype == np.float32:
        return _ext.KIND_F32
    if a.dtype == np.float16:
        return _ext.KIND_F16
    if k._is_bfloat16(a.dtype):
        return _ext.KIND_BF16
    return None


def value_counts(a: np.ndarray) -> tuple[int, int, int, int] | None:
    """``(nan, +inf, -inf, |x| == 65504)`` of a float16/bfloat16/float32 array in one pass of
    the C kernel from the bit patterns (saturation counted for float16 only, else 0), or None
    when the kernel cannot take it (not built, ``PSHELL_NO_EXT=1``, another dtype, not
    contiguous): the caller's numpy check decides then."""
    if not _enabled():
        return None
    flat = a.reshape(-1) if a.flags.c_contiguous else a
    kind = _kind(flat)
    return None if kind is None else _ext.value_counts(flat, kind)


def kl_computable(first: k.FirstPass) -> bool:
    """With an Inf or NaN anywhere, min-max scaling yields NaN somewhere, hence KL is NaN."""
    return all(math.isfinite(v) for v in (first.x_min, first.x_max, first.y_min, first.y_max))


def passes(x: np.ndarray, y: np.ndarray, chunk: int, threads: int = 1
           ) -> tuple[k.FirstPass, k.SecondPass] | None:
    """Both passes over the flat, equally long, non-empty ``x`` (NPU) and ``y`` (golden), or
    None when the C kernel cannot take them. ``threads`` > 1 splits the chunks between that
    many threads; the result is the same."""
    if not _enabled() or x.size == 0 or x.size != y.size:
        return None
    kinds = _kind(x), _kind(y)
    if None in kinds:
        return None
    n = x.size
    rows = _rows(n, chunk, len(FIRST_FIELDS))
    _run(_ext.first_pass, x, y, kinds, chunk, rows, (), threads)
    first = _first(rows)
    want_kl = kl_computable(first)
    x_low, y_low = np.float32(first.x_min), np.float32(first.y_min)
    x_span = np.float32(first.x_max) - x_low  # float32 arithmetic, as metrics_kernels
    y_span = np.float32(first.y_max) - y_low
    kl_scale = k._kl_scale(first, n, x_span, y_span) if want_kl else np.float32(1)
    rows = _rows(n, chunk, len(SECOND_FIELDS))
    extra = (np.float32(first.x_sum / n), np.float32(first.y_sum / n),
             math.isfinite(first.x_min) and math.isfinite(first.x_max),
             math.isfinite(first.y_min) and math.isfinite(first.y_max),
             want_kl, x_low, x_span, y_low, y_span, kl_scale)
    _run(_ext.second_pass, x, y, kinds, chunk, rows, tuple(map(_float, extra)), threads)
    second = k.SecondPass(kl_scale=float(kl_scale))
    for name, column in zip(SECOND_FIELDS, rows.T.tolist()):
        total = 0.0
        for value in column:  # chunk by chunk in order: the numpy path's float64 additions
            total += value
        setattr(second, name, total)
    return first, second


def kind_of(dtype: np.dtype) -> int | None:
    """The C kernel's element kind of ``dtype`` (float32/float16/bfloat16, native order), or
    None: the batch path (:func:`batch_passes`) takes only these."""
    if _ext is None or not dtype.isnative:
        return None
    if dtype == np.float32:
        return _ext.KIND_F32
    if dtype == np.float16:
        return _ext.KIND_F16
    return _ext.KIND_BF16 if k._is_bfloat16(dtype) else None


def batch_enabled() -> bool:
    """Whether :func:`batch_passes` can run (the kernel built and not disabled)."""
    return _enabled()


def same_bytes(a: np.ndarray, b: np.ndarray) -> bool | None:
    """Whether two contiguous arrays hold the same bytes (memcmp, the GIL released), or None
    without the kernel."""
    return _ext.same_bytes(a, b) if _enabled() else None


def file_same_bytes(fd: int, offset: int, data: np.ndarray) -> bool | None:
    """Whether the open file ``fd`` holds ``data``'s bytes at ``offset`` (read in chunks and
    compared as they come, the GIL released; a short read is False), or None without the kernel."""
    return _ext.file_same_bytes(fd, offset, data) if _enabled() else None


def batch_passes(items: list[tuple], chunk: int) -> list[tuple[k.FirstPass, k.SecondPass]]:
    """:func:`passes` of many pairs in one kernel call with the GIL released once. An item is
    ``(x, x_kind, index, run, step, y, y_kind[, lengths])``: ``x`` the NPU tensor's bytes in
    device order, ``index`` None when ``x`` is already in logical order, else int32 starts of
    runs: logical element ``run * j + t`` is element ``index[j] + t * step`` of ``x`` (with
    int32 ``lengths``: the logical order is the pieces ``x[index[j]:index[j] + lengths[j]]``
    one after the other); ``y`` the golden's bytes; kinds from :func:`kind_of`. Same FirstPass and SecondPass
    as :func:`passes` of ``x`` in logical order and ``y``, bit for bit (the chunk rows are combined in C
    exactly as here)."""
    out = np.empty((len(items), _ext.BATCH_WIDTH), np.float64)
    _ext.batch_metrics(items, chunk, out)
    nf, ns = len(FIRST_FIELDS), len(SECOND_FIELDS)
    results = []
    for row in out.tolist():
        first = k.FirstPass(*row[:nf])
        first.within_one_thousandth = int(first.within_one_thousandth)
        first.within_five_thousandths = int(first.within_five_thousandths)
        results.append((first, k.SecondPass(*row[nf:nf + ns], kl_scale=row[nf + ns])))
    return results


def bool_counts(x: np.ndarray, y: np.ndarray) -> k.BoolCounts | None:
    """``metrics_kernels.bool_counts`` for two flat bool arrays, or None (see :func:`passes`)."""
    if not _enabled() or x.size != y.size or not (x.flags.c_contiguous and y.flags.c_contiguous):
        return None
    return k.BoolCounts(*_ext.bool_counts(x, y))


def _float(value):
    return float(value) if isinstance(value, np.floating) else value


def _rows(n: int, chunk: int, width: int) -> np.ndarray:
    return np.empty(((n + chunk - 1) // chunk, width), np.float64)


def _run(kernel, x, y, kinds, chunk, rows, extra, threads) -> None:
    """kernel over all chunks, split into ``threads`` runs of whole chunks (the C code starts
    a chunk at each slice's start, so slices must begin on a chunk boundary)."""
    parts = min(max(threads, 1), len(rows))
    if parts == 1:
        kernel(x, y, *kinds, chunk, rows, *extra)
        return
    bounds = [len(rows) * i // parts for i in range(parts + 1)]
    jobs = [(x[a * chunk:b * chunk], y[a * chunk:b * chunk], *kinds, chunk, rows[a:b], *extra)
            for a, b in zip(bounds, bounds[1:])]
    for future in [_executor(parts).submit(kernel, *job) for job in jobs]:
        future.result()


_executors: dict[int, ThreadPoolExecutor] = {}


def _executor(workers: int) -> ThreadPoolExecutor:
    if workers not in _executors:
        _executors[workers] = ThreadPoolExecutor(workers, thread_name_prefix="fused-metrics")
    return _executors[workers]


def _first(rows: np.ndarray) -> k.FirstPass:
    """Chunk rows combined exactly as ``metrics_kernels.first_pass`` combines its chunks."""
    acc = k.FirstPass()
    columns = dict(zip(FIRST_FIELDS, rows.T))
    for name in FIRST_FIELDS:
        if name in _MIN_FIELDS or name in _MAX_FIELDS:
            merge = k._nan_min if name in _MIN_FIELDS else k._nan_max
            value = getattr(acc, name)
            for chunk_value in columns[name].astype(np.float32):  # np.float32, as numpy's
                value = merge(value, chunk_value)
        elif name in _COUNT_FIELDS:
            value = int(columns[name].sum())
        else:
            value = 0.0
            for chunk_value in columns[name].tolist():
                value += chunk_value
        setattr(acc, name, value)
    return acc
