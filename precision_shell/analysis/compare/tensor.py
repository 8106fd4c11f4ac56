"""One-pair comparison (the `cp`-style command) and single-tensor statistics, both streaming.

``compare_pair`` adds, on top of the vendor metrics, what a person debugging one tensor wants:
an allclose verdict, the fraction of elements outside ``atol + rtol*|golden|`` and the worst
elements with their positions. Unlike the reference tool's ``cp`` (which zero-pads the shorter
array) shapes must agree exactly: silently padding hides a layout bug.

Element-wise checks here run in float64 on the original values (float64 goldens keep their
digits); everything is chunked, so memmapped tensors larger than RAM work.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from precision_shell.errors import CommandError
from precision_shell.analysis.compare.metrics import DEFAULT_CHUNK, Metrics, as_real_pairs, compute_metrics
from precision_shell.analysis.compare.metrics_kernels import Float32Chunks, check_numeric, scratch

_FP16_MAX = 65504.0
_NAN = float("nan")


class WorstElement(NamedTuple):
    index: tuple[int, ...]  # position in the (unflattened) tensor
    npu: float
    golden: float
    abs_err: float
    rel_err: float  # abs_err / |golden|; Inf where the golden is 0 and the values differ


@dataclass(frozen=True)
class PairComparison:
    metrics: Metrics
    allclose: bool  # every element: |a-b| <= atol + rtol*|b| (equal Infs pass, NaN fails)
    error_ratio: float  # fraction of elements that fail that test (NaN for empty tensors)
    mismatches: int
    worst: list[WorstElement]  # largest abs_err first (NaN counts as largest); exact matches left out
    shape: tuple[int, ...]
    atol: float
    rtol: float


@dataclass(frozen=True)
class TensorStats:
    shape: tuple[int, ...]
    dtype: str
    count: int
    min: float  # min/max/mean/std over the finite values (NaN and +-Inf are counted apart)
    max: float
    mean: float
    std: float  # population std, float64
    nan: int
    pos_inf: int
    neg_inf: int
    zero: int
    fp16_saturated: int | None  # |x| == saturated_at (default float16's 65504); None unless float16 or given
    saturated_at: float = _FP16_MAX   # the largest finite value of the dumped format


class _Float64Chunks:
    """float64 chunks of a flat array; float16/bfloat16 go through the fast float32 path."""

    def __init__(self, flat: np.ndarray, chunk: int, slot: str):
        check_numeric(flat.dtype)
        self._flat = flat
        wide = flat.dtype.kind in "iu" and flat.dtype.itemsize > 2 or flat.dtype == np.float64
        self._via32 = None if wide else Float32Chunks(flat, chunk, slot)
        self._buf = scratch(slot + "64", max(1, min(chunk, flat.size)), np.float64)

    def read(self, start: int, stop: int) -> np.ndarray:
        out = self._buf[: stop - start]
        source = self._via32.read(start, stop) if self._via32 else self._flat[start:stop]
        np.copyto(out, source, casting="unsafe")
        return out


def compare_pair(a: np.ndarray, b: np.ndarray, *, atol: float = 1e-3, rtol: float = 1e-3,
                 top: int = 5, chunk: int = DEFAULT_CHUNK) -> PairComparison:
    """Compare NPU tensor ``a`` with golden ``b`` (same shape). Raises CommandError otherwise.
    Complex tensors are compared part by part (``metrics.as_real_pairs``): a worst element's
    index ends in 0 (real part) or 1 (imaginary part)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        raise CommandError(f"shape {a.shape} does not match {b.shape}")
    metrics = compute_metrics(a, b, chunk=chunk)
    a, b = as_real_pairs(a, b)
    flat_a, flat_b = a.reshape(-1), b.reshape(-1)
    reader_a, reader_b = _Float64Chunks(flat_a, chunk, "npu"), _Float64Chunks(flat_b, chunk, "golden")
    n = flat_a.size
    mismatches = 0
    worst: list[tuple[float, int]] = []  # (-key, flat index): sorts worst first, then by index
    with np.errstate(invalid="ignore", over="ignore"):
        for start in range(0, n, chunk):
            stop = min(start + chunk, n)
            x, y = reader_a.read(start, stop), reader_b.read(start, stop)
            diff = np.abs(x - y)
            close = diff <= atol + rtol * np.abs(y)
            if not np.isfinite(np.maximum.reduce(diff)):  # Inf/NaN: equal Infs are close
                odd = ~(np.isfinite(x) & np.isfinite(y))
                close[odd] = x[odd] == y[odd]
                diff[odd & close] = 0.0  # Inf - Inf is NaN, but equal Infs are no error
            mismatches += diff.size - int(np.count_nonzero(close))
            if top > 0:
                worst = _merge_worst(worst, diff, start, top)
    return PairComparison(
        metrics=metrics, allclose=mismatches == 0,
        error_ratio=mismatches / n if n else _NAN, mismatches=mismatches,
        worst=[_worst_element(i, a.shape, flat_a, flat_b) for _, i in worst],
        shape=tuple(a.shape), atol=atol, rtol=rtol)


def _merge_worst(worst: list[tuple[float, int]], diff: np.ndarray, offset: int,
                 top: int) -> list[tuple[float, int]]:
    key = np.where(np.isnan(diff), np.inf, diff)  # NaN ranks with Inf, above every number
    candidates = np.flatnonzero(key > 0) if key.size <= top else None
    if candidates is None:
        part = np.argpartition(key, key.size - top)[key.size - top:]
        candidates = part[key[part] > 0]
    merged = worst + [(-float(key[i]), offset + int(i)) for i in candidates]
    merged.sort()
    return merged[:top]


def _worst_element(flat_index: int, shape: tuple[int, ...], a: np.ndarray,
                   b: np.ndarray) -> WorstElement:
    x, y = _as_float(a[flat_index]), _as_float(b[flat_index])
    err = abs(x - y)
    if y != 0:
        rel = err / abs(y)
    else:
        rel = 0.0 if err == 0 else (math.inf if err == err else _NAN)
    index = tuple(int(i) for i in np.unravel_index(flat_index, shape)) if shape else ()
    return WorstElement(index, x, y, err, rel)


def _as_float(value) -> float:
    return float(np.asarray(value).astype(np.float64))


def tensor_stats(arr: np.ndarray, *, chunk: int = DEFAULT_CHUNK, saturation: float | None = None) -> TensorStats:
    """Counts and moments of one tensor in one chunked pass (memmaps stay on disk). A complex
    tensor's statistics cover its real and imaginary parts as floats (two values per element).
    ``saturation``: count |x| equal to it (a low-precision dump's largest finite value, its
    saturation code); float16 tensors count 65504 without it."""
    arr = np.asarray(arr)
    flat = arr.reshape(-1)
    if flat.dtype.kind == "c":
        flat = np.ascontiguousarray(flat).view(flat.real.dtype)
    reader = _Float64Chunks(flat, chunk, "npu")
    is_fp16 = arr.dtype == np.float16 or saturation is not None
    limit = _FP16_MAX if saturation is None else float(saturation)
    lo, hi = math.inf, -math.inf
    count_f = 0  # finite values seen
    mean, m2 = 0.0, 0.0  # running mean and centred sum of squares of the finite values
    nan = pos_inf = neg_inf = zero = saturated = 0
    n = flat.size
    for start in range(0, n, chunk):
        stop = min(start + chunk, n)
        values = reader.read(start, stop)
        with np.errstate(invalid="ignore", over="ignore"):  # Inf + -Inf while probing
            chunk_sum = float(np.add.reduce(values))
        zero += int(np.count_nonzero(values == 0))
        if is_fp16:
            saturated += int(np.count_nonzero(np.abs(values) == limit))
        if not math.isfinite(chunk_sum):  # some Inf/NaN: count them, keep the finite rest
            nan += int(np.count_nonzero(np.isnan(values)))
            pos_inf += int(np.count_nonzero(values == math.inf))
            neg_inf += int(np.count_nonzero(values == -math.inf))
            values = values[np.isfinite(values)]
            chunk_sum = float(np.add.reduce(values))
        if not values.size:
            continue
        lo = min(lo, float(np.minimum.reduce(values)))
        hi = max(hi, float(np.maximum.reduce(values)))
        # Chan et al.'s pairwise update: exact centring per chunk, no E[x^2]-E[x]^2 cancellation
        c_mean = chunk_sum / values.size
        c_m2 = float(np.add.reduce(np.square(values - c_mean)))
        total = count_f + values.size
        delta = c_mean - mean
        mean += delta * values.size / total
        m2 += c_m2 + delta * delta * count_f * values.size / total
        count_f = total
    return TensorStats(
        shape=tuple(arr.shape), dtype=str(arr.dtype), count=n,
        min=lo if count_f else _NAN, max=hi if count_f else _NAN,
        mean=mean if count_f else _NAN, std=math.sqrt(m2 / count_f) if count_f else _NAN,
        nan=nan, pos_inf=pos_inf, neg_inf=neg_inf, zero=zero,
        fp16_saturated=saturated if is_fp16 else None, saturated_at=limit)
