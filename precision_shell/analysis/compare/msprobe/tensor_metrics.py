"""msprobe's tensor-mode metrics of one pair, as ``msprobe compare`` (26.2) computes them
(the rows streamed and the statistics and md5 modes: :mod:`.engine`).

Tensor mode follows msprobe's own code path exactly (``pytorch/compare/utils.py::read_pt_data``,
``core/compare/npy_compare.py::ValidateTensor``, ``algorithm/builtin_algorithm/alg_*.py``,
``core/compare/utils.py::get_relative_err``):

- the loaded arrays have bf16/fp8 widened to float32 and are ``np.squeeze``-d (so ``[1, 8]``
  and ``[8]`` compare, and a one-element tensor becomes 0-d);
- checks in order: NPU side empty -> every metric ``unsupported``; shapes differ -> ``shape
  unmatched``; 0-d -> Cosine/EucDist/ratios ``unsupported`` (max errors still computed, NaN/Inf
  not handled); NaN/Inf at different positions -> every metric ``N/A``, at the same positions
  -> zeroed on both sides first;
- Cosine: float64 dot over float64 norms; both norms <= float64 eps -> 1.0, one -> ``Nan``; a
  NaN result -> ``Nan``; rounded to 12 decimals, then to 6 when above 0.9999; fewer than two
  elements -> ``unsupported``;
- EucDist: float64 ``||n - b||``, unrounded; MaxAbsErr: float64 ``max|n - b|``;
- MaxRelativeErr and the ratios: ``|(n - b) / b|`` in ``result_type(n, b, float32)`` (float32
  for fp16/bf16/fp32 pairs, float64 for ints, bools and fp64), that type's eps added to both
  sides where the golden is 0; ratio = count(err < 0.001 resp. 0.005) / n; 12 decimals.

The element-wise definitions differ from msaccucmp's (float32 differences, its own cosine
branches) in :mod:`.metrics`, so its kernels are not reused here. Each pair is computed in one
pass over chunks in float64 (a few chunk-sized buffers, whatever the tensor's size; sums in
another order than msprobe's BLAS, so EucDist agrees to ~1e-15 rather than bit for bit) and
released before the next pair is loaded (:func:`.engine.compare_pairs` is a generator).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from precision_shell.analysis.compare.msprobe.kernel import kernel_sums

METRIC_COLUMNS = ("Cosine", "EucDist", "MaxAbsErr", "MaxRelativeErr",
                  "One Thousandth Err Ratio", "Five Thousandths Err Ratio")
# msprobe's texts for a metric it does not compute (N/A and Nan: the statistics modes' too)
UNSUPPORTED, SHAPE_UNMATCHED, N_A, NAN = "unsupported", "shape unmatched", "N/A", "Nan"
_F64_EPS = float(np.finfo(float).eps)
# 1 Mi elements: ~8 float64/float32 chunk buffers (~50 MB) and few enough Python round trips
DEFAULT_CHUNK = 1 << 20
_FLOAT_TYPES = (np.dtype(np.half), np.dtype(np.single), np.dtype(np.double), np.dtype(np.longdouble))
_WIDENED = {np.dtype(ml_dtypes.bfloat16), np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e5m2),
            np.dtype(ml_dtypes.float8_e4m3fnuz), np.dtype(ml_dtypes.float8_e5m2fnuz)}


@dataclass
class TensorMetrics:
    """msprobe's six tensor-mode metrics (numbers, or its texts), and its messages."""
    cosine: float | str
    euc_dist: float | str
    max_abs_err: float | str
    max_relative_err: float | str
    one_thousandth: float | str
    five_thousandths: float | str
    message: str = ""

    def cells(self) -> list[float | str]:
        return [self.cosine, self.euc_dist, self.max_abs_err, self.max_relative_err,
                self.one_thousandth, self.five_thousandths]

    @classmethod
    def all(cls, text: str, message: str) -> TensorMetrics:
        return cls(*([text] * 6), message=message)


def format_value(value) -> float:
    """msprobe's ``format_value``: 12 decimals."""
    return float("{:.12f}".format(value))


def prepare(array: np.ndarray) -> np.ndarray:
    """What msprobe's file reader hands the compare, minus the bf16/fp8 widening (done per
    chunk, :func:`_widen`): the array squeezed (a view, no copy)."""
    return np.squeeze(np.asarray(array))


def _widen(array: np.ndarray) -> np.ndarray:
    return array.astype(np.float32) if array.dtype in _WIDENED else array


def _relative_kind(n: np.dtype, b: np.dtype) -> np.dtype:
    """The dtype msprobe's ``get_relative_err`` computes in: ``result_type(n, b, float32)``
    after bf16/fp8 became float32 and anything not a float became float64."""
    def kind(d: np.dtype) -> np.dtype:
        d = np.dtype(np.float32) if d in _WIDENED else d
        return d if d in _FLOAT_TYPES else np.dtype(float)
    return np.result_type(kind(n), kind(b), np.float32)


def tensor_metrics(npu: np.ndarray, bench: np.ndarray, *, chunk: int = DEFAULT_CHUNK) -> TensorMetrics:
    """The six metrics of one loaded pair, msprobe's way (module docstring), in one pass over
    ``chunk``-element slices: a few chunk-sized float64 buffers, whatever the tensor's size."""
    n, b = prepare(npu), prepare(bench)
    if n.size == 0:
        return TensorMetrics.all(UNSUPPORTED, "This is empty data, can not compare.")
    if n.shape != b.shape:
        return TensorMetrics.all(SHAPE_UNMATCHED, "Shape of NPU and bench tensor do not match. Skipped.")
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if n.ndim == 0:
            return _scalar_metrics(_widen(n), _widen(b))
        rel_kind = _relative_kind(n.dtype, b.dtype)
        fast = kernel_sums(n.reshape(-1), b.reshape(-1)) if rel_kind == np.float32 else None
        sums = _Sums(*fast) if fast is not None else _chunked_sums(n.reshape(-1), b.reshape(-1), rel_kind, chunk)
    if sums is None:
        return TensorMetrics.all(N_A, "The position of inf or nan in NPU and bench Tensor do not match.")
    message = "Dtype of NPU and bench tensor do not match." if _widen(n[:0]).dtype != _widen(b[:0]).dtype else ""
    cosine, cos_msg = _cosine(sums, n.size)
    max_abs, abs_msg = _checked(sums.max_abs, "MaxAbsError")
    max_rel, rel_msg = _checked(sums.max_rel, "MaxRelativeError")
    return TensorMetrics(cosine, math.sqrt(sums.sq_diff), max_abs, max_rel,
                         format_value(sums.within_1 / n.size), format_value(sums.within_5 / n.size),
                         message + cos_msg + abs_msg + rel_msg)


@dataclass
class _Sums:
    dot: float = 0.0
    xx: float = 0.0
    yy: float = 0.0
    sq_diff: float = 0.0
    max_abs: float = 0.0
    max_rel: float = 0.0
    within_1: int = 0
    within_5: int = 0


def _chunked_sums(x: np.ndarray, y: np.ndarray, rel_kind: np.dtype, chunk: int) -> _Sums | None:
    """Accumulate every metric's sums and maxima; None when NaN/Inf sit at different places.
    NaN/Inf at the same places are zeroed on both sides (msprobe's ``handle_inf_nan``).
    Dot products use einsum, not BLAS: the same float64 sums, several times faster than this
    machine's OpenBLAS ddot, and summed in a different order only."""
    acc = _Sums()
    eps = rel_kind.type(np.finfo(rel_kind).eps)
    size = min(chunk, x.size)
    xs, ys, diff = np.empty(size), np.empty(size), np.empty(size)
    for start in range(0, x.size, chunk):
        m = min(chunk, x.size - start)
        xv, yv, dv = xs[:m], ys[:m], diff[:m]
        # widened to float32 first: ml_dtypes' direct bf16 -> float64 cast is ~10x slower
        np.copyto(xv, _widen(x[start:start + m]), casting="unsafe")
        np.copyto(yv, _widen(y[start:start + m]), casting="unsafe")
        if not (np.isfinite(xv).all() and np.isfinite(yv).all()):
            if not (np.array_equal(np.isinf(xv), np.isinf(yv)) and np.array_equal(np.isnan(xv), np.isnan(yv))):
                return None
            xv[~np.isfinite(xv)] = 0
            yv[~np.isfinite(yv)] = 0
        acc.dot += float(np.einsum("i,i->", xv, yv))
        acc.xx += float(np.einsum("i,i->", xv, xv))
        acc.yy += float(np.einsum("i,i->", yv, yv))
        np.subtract(xv, yv, out=dv)
        acc.sq_diff += float(np.einsum("i,i->", dv, dv))
        np.abs(dv, out=dv)
        acc.max_abs = _nan_max(acc.max_abs, float(dv.max()))
        # the relative error in msprobe's dtype: rel_kind holds every value of both sides exactly
        xr, yr = xv.astype(rel_kind), yv.astype(rel_kind)
        zero = yr == 0
        if zero.any():
            xr[zero] += eps
            yr[zero] += eps
        np.subtract(xr, yr, out=xr)
        np.divide(xr, yr, out=xr)
        np.abs(xr, out=xr)
        acc.max_rel = _nan_max(acc.max_rel, float(xr.max()))
        acc.within_1 += int(np.count_nonzero(xr < 0.001))
        acc.within_5 += int(np.count_nonzero(xr < 0.005))
    return acc


def _nan_max(a: float, b: float) -> float:
    return a if a != a else b if b != b else max(a, b)


def _checked(value: float, what: str) -> tuple[float | str, str]:
    if value != value:
        return NAN, f"Cannot compare by {what}, the data contains nan/inf/-inf in dump data."
    return format_value(value), ""


def _cosine(sums: _Sums, size: int) -> tuple[float | str, str]:
    if size == 1:
        return UNSUPPORTED, "This is a 1-d tensor of length 1."
    a_norm, b_norm = math.sqrt(sums.xx), math.sqrt(sums.yy)
    if a_norm <= _F64_EPS and b_norm <= _F64_EPS:
        return 1.0, ""
    if a_norm <= _F64_EPS:
        return NAN, "Cannot compare by Cosine Similarity, All the data is Zero in npu dump data."
    if b_norm <= _F64_EPS:
        return NAN, "Cannot compare by Cosine Similarity, All the data is Zero in Bench dump data."
    cos = sums.dot / (a_norm * b_norm)
    if cos != cos:
        return NAN, "Cannot compare by Cosine Similarity, the dump data has NaN."
    value = format_value(cos)
    return (round(value, 6) if value > 0.9999 else value), ""


def _scalar_metrics(n: np.ndarray, b: np.ndarray) -> TensorMetrics:
    """A 0-d pair: msprobe skips the NaN/Inf handling and computes only the two max errors,
    the absolute one in the arrays' own dtype (its ``flatten_numpy`` leaves 0-d arrays alone)."""
    if n.dtype == bool:
        n, b = n.astype(float), b.astype(float)
    kind = _relative_kind(n.dtype, b.dtype)
    x, y = n.astype(kind), b.astype(kind)
    if y == 0:
        x, y = x + np.finfo(kind).eps, y + np.finfo(kind).eps
    max_abs, abs_msg = _checked(float(np.abs(n - b)), "MaxAbsError")
    max_rel, rel_msg = _checked(float(np.abs((x - y) / y)), "MaxRelativeError")
    message = ("This is type of 0-d tensor, can not calculate 'Cosine', 'EucDist', "
               "'One Thousandth Err Ratio' and 'Five Thousandths Err Ratio'. ")
    return TensorMetrics(UNSUPPORTED, UNSUPPORTED, max_abs, max_rel, UNSUPPORTED, UNSUPPORTED,
                         message + abs_msg + rel_msg)
