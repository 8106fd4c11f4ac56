"""The comparison metrics of the vendor engine (msaccucmp), computed the vendor's way, fast.

Semantics follow formats.md §6 and A.8.2-A.8.4, checked against msaccucmp's own sources
(``msprobe/msaccucmp/algorithm_manager/algorithm_manager.py`` and ``builtin_algorithm/alg_*.py``):
both tensors flattened; lengths must match; both cast to float32 unless both are bool; NaN/Inf
are not filtered but propagate; "scalar" shapes (sum of dims == number of dims) force cosine 1.

The two extra ratios are msprobe's "One Thousandth Err Ratio" / "Five Thousandths Err Ratio"
(``msprobe/core/compare/utils.py`` ``get_relative_err`` + ``calc_err_ratio``, used by
``alg_one_thousand_error.py`` / ``alg_five_thousand_error.py``): relative error
``|(x - y) / y|`` in float32, where the golden is exactly 0 both sides get float32 eps added
first; ratio = count(error < 0.001 resp. 0.005) / n, a NaN error counting as "not within";
"unsupported" (NaN here) for 0-d tensors and for fewer than 2 elements.

Complex tensors have no vendor definition (msaccucmp's ``astype("float32")`` silently keeps the
real part). Here they are compared as their real and imaginary parts (:func:`as_real_pairs`):
each complex element is two values, so every metric covers both parts (the cosine is
Re<x, y> / (|x| |y|), the errors are per part) and ``count`` is twice the number of elements;
the scalar-shape and ratio rules look at the complex tensor's own shape.

Element-wise values are the vendor's float32 ones (so |x-y| or (x-y)^2 overflow to Inf exactly
where the vendor's do); sums are float64, closer to the exact value than the vendor's float32
sums. One deliberate difference: for |values| beyond ~1.8e19 the vendor's float32 norms
overflow and its cosine (and RED) become meaningless (0 or NaN); ours stay correct.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from precision_shell.errors import CommandError
from precision_shell.analysis.compare import fused_metrics
from precision_shell.analysis.compare import metrics_kernels as k

METRIC_COLUMNS = (
    "CosineSimilarity", "MaxAbsoluteError", "AccumulatedRelativeError",
    "RelativeEuclideanDistance", "KullbackLeiblerDivergence", "StandardDeviation",
    "MeanAbsoluteError", "RootMeanSquareError", "MaxRelativeError", "MeanRelativeError",
)
RATIO_COLUMNS = ("One Thousandth Err Ratio", "Five Thousandths Err Ratio")  # msprobe's headers
JSON_KEYS = {
    "CosineSimilarity": "cosine",
    "MaxAbsoluteError": "max_abs_error",
    "AccumulatedRelativeError": "accumulated_relative_error",
    "RelativeEuclideanDistance": "relative_euclidean_distance",
    "KullbackLeiblerDivergence": "kl_divergence",
    "StandardDeviation": "standard_deviation",  # as_json: {mean_npu, std_npu, mean_golden, std_golden}
    "MeanAbsoluteError": "mean_abs_error",
    "RootMeanSquareError": "rmse",
    "MaxRelativeError": "max_relative_error",
    "MeanRelativeError": "mean_relative_error",
    "One Thousandth Err Ratio": "one_thousandth_err_ratio",
    "Five Thousandths Err Ratio": "five_thousandths_err_ratio",
}
STD_KEYS = ("mean_npu", "std_npu", "mean_golden", "std_golden")
# 128 Ki elements measured fastest among 32 Ki .. 1 Mi (bench/metrics_kernel.py, 2-core EPYC):
# smaller chunks pay more per-chunk Python overhead (~50 numpy calls per chunk), 1 Mi is ~1.5x
# slower because the ~7 chunk-sized float32 buffers no longer stay in cache between the calls.
DEFAULT_CHUNK = 1 << 17

_NAN = float("nan")
# CompareFailReason of a "scalar" shape, whose cosine is forced to 1 (alg_CosineSimilarity.py)
SCALAR_REASON = "This tensor is scalar."
_STD_MIN = 0.001  # the vendor prints |v| < 0.001 as 0.000 in the StandardDeviation cell


@dataclass(frozen=True)
class Metrics:
    """One compared tensor pair. A metric is NaN where the vendor prints ``NaN`` or ``nan``:
    ``not_computed`` holds the JSON keys the vendor could not compute (cell ``NaN``); other NaN
    values are numeric results (cell ``nan``)."""

    cosine: float
    max_abs_error: float
    accumulated_relative_error: float
    relative_euclidean_distance: float
    kl_divergence: float
    mean_npu: float
    std_npu: float
    mean_golden: float
    std_golden: float
    mean_abs_error: float
    rmse: float
    max_relative_error: float
    mean_relative_error: float
    one_thousandth_err_ratio: float
    five_thousandths_err_ratio: float
    count: int
    not_computed: frozenset[str] = frozenset()
    cosine_both_zero: bool = False  # both norms ~0: the vendor prints the literal "1.0"
    reasons: tuple[str, ...] = ()  # vendor-style CompareFailReason fragments

    @classmethod
    def unavailable(cls, reason: str = "", count: int = 0) -> Metrics:
        """An all-``NaN`` row, e.g. for a pair whose sizes differ or whose file is missing."""
        keys = frozenset(JSON_KEYS.values())
        return cls(*([_NAN] * 15), count=count, not_computed=keys,
                   reasons=(reason,) if reason else ())

    def vendor_cells(self) -> list[str]:
        """The 10 metric cells exactly as msaccucmp writes them (``METRIC_COLUMNS`` order)."""
        cells = []
        for column in METRIC_COLUMNS:
            key = JSON_KEYS[column]
            if key in self.not_computed:
                cells.append("NaN")
            elif key == "standard_deviation":
                cells.append("({};{}),({};{})".format(*(_std_text(getattr(self, name))
                                                       for name in STD_KEYS)))
            elif key == "cosine" and self.cosine_both_zero:
                cells.append("1.0")
            else:
                cells.append("{:.6f}".format(getattr(self, key)))
        return cells

    def as_json(self) -> dict:
        """snake_case keys (``JSON_KEYS`` values, plus ``count``); NaN becomes None."""
        out: dict = {}
        for key in JSON_KEYS.values():
            if key == "standard_deviation":
                out[key] = {name: _json_number(getattr(self, name)) for name in STD_KEYS}
            else:
                out[key] = _json_number(getattr(self, key))
        out["count"] = self.count
        return out


def _std_text(value: float) -> str:
    return "%.3f" % (0.0 if abs(value) < _STD_MIN else value)


def _json_number(value: float) -> float | None:
    return None if value != value else float(value)


def as_real_pairs(npu: np.ndarray, golden: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both tensors as real values when either is complex: shape + (2,), the last axis holding
    the real (0) and imaginary (1) part; a real tensor facing a complex one gets imaginary parts
    of 0. Complex data is viewed in place (no copy when contiguous)."""
    if npu.dtype.kind != "c" and golden.dtype.kind != "c":
        return npu, golden
    return _real_pairs(npu), _real_pairs(golden)


def _real_pairs(a: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "c":
        a = np.ascontiguousarray(a)
        return a.view(a.real.dtype).reshape(a.shape + (2,))
    out = np.zeros(a.shape + (2,), a.dtype if a.dtype.kind in "fV" else np.float64)
    out[..., 0] = a
    return out


def compute_metrics(npu: np.ndarray, golden: np.ndarray, *, chunk: int = DEFAULT_CHUNK) -> Metrics:
    """All vendor metrics plus msprobe's thousandth ratios for one pair, in two chunked passes.

    ``npu``/``golden`` may be memmaps of any numeric dtype; only a few chunk-sized buffers are
    allocated. Raises CommandError when the element counts differ.
    """
    if chunk < 1:
        raise ValueError("chunk must be positive")
    npu, golden = np.asarray(npu), np.asarray(golden)
    scalar_shape = sum(npu.shape) == len(npu.shape)  # the vendor's get_shape_type
    x, y = npu.reshape(-1), golden.reshape(-1)
    n = x.size
    if n != y.size:
        raise CommandError(f"npu data size ({n}) does not match the golden data size ({y.size})")
    ratio_ok = n >= 2 and npu.ndim > 0  # msprobe: 0-d or single-element tensors unsupported
    x, y = (a.reshape(-1) for a in as_real_pairs(x, y))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        if x.dtype == np.bool_ and y.dtype == np.bool_:
            return _bool_metrics(x, y, chunk, scalar_shape, ratio_ok)
        return _float_metrics(x, y, chunk, scalar_shape, ratio_ok)


def _cosine(xy: float, xx: float, yy: float, scalar_shape: bool) -> tuple[float, str | None, bool]:
    """(value, reason if not computed, both-zero flag), the vendor's branches in its order."""
    if scalar_shape:
        return 1.0, None, False
    x_norm, y_norm = math.sqrt(xx), math.sqrt(yy)  # sums of squares: >= 0, inf or NaN
    if x_norm <= k.F64_EPS and y_norm < k.F64_EPS:
        return 1.0, None, True
    if math.sqrt(x_norm) <= k.F64_EPS:
        return _NAN, "Cannot compare by Cosine Similarity. All the data is zero in npu.", False
    if math.sqrt(y_norm) <= k.F64_EPS:
        return _NAN, "Cannot compare by Cosine Similarity. All the data is zero in golden.", False
    value = xy / (x_norm * y_norm)  # NaN stays NaN: the vendor's min(NaN, 1.0) keeps NaN
    return (value if value != value else min(value, 1.0)), None, False


def _ratio(count: int, n: int, ok: bool) -> float:
    return int(count) / n if ok else _NAN


def _bool_metrics(x: np.ndarray, y: np.ndarray, chunk: int, scalar_shape: bool,
                  ratio_ok: bool) -> Metrics:
    # msaccucmp runs only CosineSimilarity and RelativeEuclideanDistance on bool pairs. Its
    # cosine works in float64 (np.linalg.norm promotes bool); its RED squares the golden (int8)
    # and returns 0 when that sum is 0, otherwise `x - y` on bools raises -> NaN.
    counts = fused_metrics.bool_counts(x, y) or k.bool_counts(x, y, chunk)
    cosine, cos_reason, both_zero = _cosine(float(counts.both_true), float(counts.x_true),
                                            float(counts.y_true), scalar_shape)
    not_computed = set(JSON_KEYS.values()) - {"cosine", "relative_euclidean_distance",
                                              "one_thousandth_err_ratio",
                                              "five_thousandths_err_ratio"}
    reasons = [cos_reason or SCALAR_REASON] if cos_reason or scalar_shape else []
    red = 0.0
    if counts.y_true:
        red = _NAN
        not_computed.add("relative_euclidean_distance")
        reasons.append("RelativeEuclideanDistance: numpy boolean subtract is not supported.")
    if cos_reason:
        not_computed.add("cosine")
    # as float values, msprobe's relative error is 0 exactly where the two bools are equal
    within = _ratio(counts.equal, x.size, ratio_ok)
    return Metrics(cosine, _NAN, _NAN, red, _NAN, _NAN, _NAN, _NAN, _NAN, _NAN, _NAN, _NAN, _NAN,
                   within, within, x.size, frozenset(not_computed), both_zero, tuple(reasons))


def _empty_metrics(scalar_shape: bool) -> Metrics:
    # What the vendor prints for two empty tensors: max() of nothing raises (NaN), mean() of
    # nothing is nan, sums are 0, both norms are 0 (cosine "1.0").
    cosine_both_zero = not scalar_shape
    return Metrics(1.0, _NAN, 0.0, 0.0, _NAN, _NAN, _NAN, _NAN, _NAN, _NAN, _NAN, _NAN, _NAN,
                   _NAN, _NAN, 0,
                   frozenset({"max_abs_error", "kl_divergence", "max_relative_error"}),
                   cosine_both_zero, ("The dump data size is 0.",))


def _float_metrics(x: np.ndarray, y: np.ndarray, chunk: int, scalar_shape: bool,
                   ratio_ok: bool) -> Metrics:
    n = x.size
    if n == 0:
        return _empty_metrics(scalar_shape)
    fused = fused_metrics.passes(x, y, chunk)  # the C kernel: same bits, ~3x faster
    if fused is None:  # not built, PSHELL_NO_EXT=1, or a dtype it does not take
        xs, ys = k.Float32Chunks(x, chunk, "npu"), k.Float32Chunks(y, chunk, "golden")
        first = k.first_pass(xs, ys, n, chunk)
        second = k.second_pass(xs, ys, n, chunk, first, want_kl=fused_metrics.kl_computable(first))
    else:
        first, second = fused
    return metrics_from_passes(first, second, n, scalar_shape, ratio_ok)


def scalar_and_ratio(shape: tuple[int, ...]) -> tuple[bool, bool]:
    """(the vendor's "scalar" shape, msprobe's ratios supported) of an NPU tensor's shape, as
    :func:`compute_metrics` decides them."""
    return sum(shape) == len(shape), math.prod(shape) >= 2 and len(shape) > 0


def metrics_from_passes(first: k.FirstPass, second: k.SecondPass, n: int, scalar_shape: bool,
                        ratio_ok: bool) -> Metrics:
    """The Metrics of a float pair of ``n`` (> 0) elements from its two passes (numpy, the C
    kernel, or its batch call: all give the same passes)."""
    want_kl = fused_metrics.kl_computable(first)

    mean_x, mean_y = first.x_sum / n, first.y_sum / n
    std_x, xx = _spread(second.x_dev_sq_sum, mean_x, n)
    std_y, yy = _spread(second.y_dev_sq_sum, mean_y, n)
    not_computed: set[str] = set()
    reasons: list[str] = []
    cosine, cos_reason, both_zero = _cosine(first.xy_sum, xx, yy, scalar_shape)
    if cos_reason:
        not_computed.add("cosine")
        reasons.append(cos_reason)
    elif scalar_shape:
        reasons.append(SCALAR_REASON)
    red = 0.0 if math.sqrt(yy) <= k.F64_EPS else math.sqrt(first.sq_diff_sum / yy)
    kl = _NAN
    if want_kl:
        # sum p*log(p/q) with p = a/A, q = b/B  ==  sum(a*log(a/b*c))/A + log(B/(A*c)) for any
        # c > 0, so one pass suffices (c ~ B/A, see metrics_kernels._kl_scale). KL >= 0 by
        # Gibbs' inequality: a result below 0 or within rounding of the two terms is 0, as the
        # vendor's |result| < eps rule intends (ones vs zeros: the vendor gets exactly 0).
        head = second.kl_log_sum / second.kl_a_sum
        tail = math.log(second.kl_b_sum / (second.kl_a_sum * second.kl_scale))
        kl = head + tail
        if kl < max(k.F64_EPS, 1e-12 * (abs(head) + abs(tail))):
            kl = 0.0
    return Metrics(
        cosine=cosine,
        max_abs_error=float(first.max_abs_diff),
        accumulated_relative_error=first.rel_sum,
        relative_euclidean_distance=red,
        kl_divergence=kl,
        mean_npu=mean_x, std_npu=std_x, mean_golden=mean_y, std_golden=std_y,
        mean_abs_error=first.abs_diff_sum / n,
        rmse=math.sqrt(first.sq_diff_sum / n) if first.sq_diff_sum >= 0 else _NAN,
        max_relative_error=float(first.max_rel),
        mean_relative_error=first.rel_sum / n,
        one_thousandth_err_ratio=_ratio(first.within_one_thousandth, n, ratio_ok),
        five_thousandths_err_ratio=_ratio(first.within_five_thousandths, n, ratio_ok),
        count=n, not_computed=frozenset(not_computed), cosine_both_zero=both_zero,
        reasons=tuple(reasons),
    )


def _spread(dev_sq_sum: float, mean: float, n: int) -> tuple[float, float]:
    """(population std, sum of squares) from squares centred on float32(mean).

    sum (v - s)^2 = sum (v - mean)^2 + n (mean - s)^2, and s = float32(mean) differs from the
    float64 mean by at most half a float32 ulp, so the correction is tiny but kept exact.
    """
    if not math.isfinite(mean):
        return _NAN, _NAN if mean != mean else math.inf
    shift = float(np.float32(mean))
    m2 = max(dev_sq_sum - n * (mean - shift) ** 2, 0.0) if dev_sq_sum == dev_sq_sum else _NAN
    return math.sqrt(m2 / n) if m2 == m2 else _NAN, m2 + n * mean * mean
