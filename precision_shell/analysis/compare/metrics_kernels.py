"""Chunked numpy kernels behind :func:`precision_shell.analysis.compare.metrics.compute_metrics`.

Design (why it looks like this):

* The vendor engine (msaccucmp) casts both tensors to float32 and evaluates each metric with
  whole-array numpy expressions: ~40 full-size temporaries and one pass per metric. We walk the
  data in chunks that fit the L2 cache and feed every metric from the same chunk, in two passes:
  pass 1 (min/max, sums, errors, relative errors, thousandth ratios) and pass 2 (KL divergence,
  which needs the global min/max, and the centred second moments for the standard deviation).
* Element-wise work is float32, exactly the vendor's operations (``x / y - 1``, ``(x - min) /
  range``...), so the per-element values are bit-identical to the vendor's. Every sum is
  accumulated in float64 (``np.add.reduce(..., dtype=float64)``): the float32 pairwise sums the
  vendor uses drift by ~1e-8 relative, which is enough to flip a 6th decimal and would make the
  result depend on the chunk size. We deliberately avoid BLAS ``dot``: with OpenBLAS threads on a
  2-core box it sometimes stalls for ~100x its normal time waiting for a sleeping thread.
* numpy's float16 -> float32 cast is a scalar loop (~2 ns/element, the single most expensive
  step); :class:`Float32Chunks` does it with four vectorised integer ops instead (see ``_fp16``).
"""

from __future__ import annotations

import math
import sys
import threading
import warnings
from dataclasses import dataclass

import numpy as np

from precision_shell.errors import CommandError

F64_EPS = float(np.finfo(np.float64).eps)  # msaccucmp ConstManager.FLOAT_EPSILON
F32_EPS = np.float32(np.finfo(np.float32).eps)  # KL floor; msprobe's zero-golden nudge
ONE_THOUSANDTH = np.float32(0.001)  # msprobe thresholds, compared in float32 like numpy does
FIVE_THOUSANDTHS = np.float32(0.005)

# float16 bits placed in a float32's low exponent/mantissa bits, then scaled by 2**(127-15).
_FP16_SCALE = np.float32(2.0**112)
_FP16_KEEP = np.uint32(0x8FFFFFFF)  # sign bit + exponent/mantissa; drops sign-extension copies
_FP16_NONFINITE = 65536.0  # any fp16 Inf/NaN lands at |v| >= 2**16; finite fp16 stays <= 65504


_pool = threading.local()


def scratch(name: str, size: int, dtype: type, fill: float | None = None) -> np.ndarray:
    """A chunk-sized work array kept per thread between compares.

    Fresh buffers cost more than the arithmetic on mid-size tensors: a compare needs ~5 MiB
    of them, and glibc returns freed blocks of that size to the kernel, so every call would
    page-fault them in again (~1300 faults, several ms here). Callers use distinct names for
    buffers that are alive at the same time; ``fill`` is applied only when (re)allocating, so
    a filled buffer must stay read-only.
    """
    pool = _pool.__dict__
    buf = pool.get(name)
    if buf is None or buf.size < size or buf.dtype != dtype:
        buf = np.empty(max(size, 1), dtype)
        if fill is not None:
            buf.fill(fill)
        pool[name] = buf
    return buf[:size]


def _is_bfloat16(dtype: np.dtype) -> bool:
    # a bfloat16 dtype exists only once ml_dtypes is loaded: asked about a float64 golden, a
    # float16/float32 run need not import it (~4 ms)
    ml_dtypes = sys.modules.get("ml_dtypes")
    return ml_dtypes is not None and dtype == np.dtype(ml_dtypes.bfloat16)


def check_numeric(dtype: np.dtype) -> None:
    """Raise CommandError unless values of ``dtype`` can be compared as numbers."""
    if dtype.kind in "biufc" or _is_bfloat16(dtype):
        return
    if dtype.kind == "V" and np.can_cast(dtype, np.float32, "unsafe"):
        return  # other ml_dtypes floats (float8...) register casts to float32
    raise CommandError(f"cannot compare values of dtype {dtype}")


class Float32Chunks:
    """Float32 copies (or views) of consecutive slices of one flat array.

    ``read`` returns an array the caller must treat as read-only: for float32 sources it is a
    view of the source itself (a memmap stays a memmap; nothing is copied).
    """

    def __init__(self, flat: np.ndarray, chunk: int, slot: str):
        """``slot`` names the pooled conversion buffer (see ``scratch``)."""
        check_numeric(flat.dtype)
        self._flat = flat
        # (min, max) of the last chunk when the conversion already had to compute them
        self.range: tuple[np.float32, np.float32] | None = None
        # set once a full pass saw no Inf/NaN: the float16 path may then skip its check
        self.known_finite = False
        dtype = flat.dtype
        if dtype == np.float32:
            self._read, self._buf = self._view, None
            return
        if dtype == np.float16:
            self._read = self._fp16
        elif _is_bfloat16(dtype):
            self._read = self._bf16
        else:
            self._read = self._cast
        self._buf = scratch(slot, max(1, min(chunk, flat.size)), np.float32)

    def read(self, start: int, stop: int) -> np.ndarray:
        self.range = None
        return self._read(start, stop)

    def _view(self, start: int, stop: int) -> np.ndarray:
        return self._flat[start:stop]

    def _fp16(self, start: int, stop: int) -> np.ndarray:
        values = self._buf[: stop - start]
        bits = values.view(np.int32)
        np.copyto(bits, self._flat[start:stop].view(np.int16))  # sign-extends: bit 31 = sign
        ubits = bits.view(np.uint32)
        np.left_shift(ubits, np.uint32(13), out=ubits)
        np.bitwise_and(ubits, _FP16_KEEP, out=ubits)
        np.multiply(values, _FP16_SCALE, out=values)  # exact, subnormals included
        if self.known_finite:
            return values
        low, high = np.minimum.reduce(values), np.maximum.reduce(values)
        if low <= -_FP16_NONFINITE or high >= _FP16_NONFINITE:
            # Inf/NaN present: rare, so let numpy's exact (slow) cast handle the whole chunk.
            np.copyto(values, self._flat[start:stop])
            low, high = np.minimum.reduce(values), np.maximum.reduce(values)
        self.range = (low, high)
        return values

    def _bf16(self, start: int, stop: int) -> np.ndarray:
        values = self._buf[: stop - start]
        bits = values.view(np.uint32)
        np.copyto(bits, self._flat[start:stop].view(np.uint16))
        np.left_shift(bits, np.uint32(16), out=bits)  # bfloat16 is the top half of a float32
        return values

    def _cast(self, start: int, stop: int) -> np.ndarray:
        values = self._buf[: stop - start]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # complex -> real drops the imaginary part, as astype
            np.copyto(values, self._flat[start:stop], casting="unsafe")
        return values


def sum64(values: np.ndarray) -> float:
    return float(np.add.reduce(values, dtype=np.float64))


def _product_sum(x: np.ndarray, y: np.ndarray, work: np.ndarray, finite: bool) -> float:
    """sum(x*y) over float32 products, redone in float64 if a product overflowed float32
    (|values| beyond ~1.8e19) although the inputs are finite: the vendor's cosine and standard
    deviation do not overflow there (it normalises first, resp. works in float64)."""
    total = sum64(np.multiply(x, y, out=work))
    if finite and not math.isfinite(total):
        total = float(np.add.reduce(x.astype(np.float64) * y.astype(np.float64)))
    return total


def _centred_square_sum(values: np.ndarray, shift: np.float32, work: np.ndarray,
                        finite: bool) -> float:
    dev = np.subtract(values, shift, out=work)
    total = sum64(np.multiply(dev, dev, out=dev))
    if finite and not math.isfinite(total):  # see _product_sum
        wide = values.astype(np.float64) - float(shift)
        total = float(np.add.reduce(wide * wide))
    return total


def _nan_max(a: float, b: float) -> float:
    """max() that keeps NaN, like np.max over the whole array would."""
    return a if (a != a or a >= b) else b


def _nan_min(a: float, b: float) -> float:
    return a if (a != a or a <= b) else b


@dataclass
class FirstPass:
    """Everything one pass over (x = NPU, y = golden) float32 chunks can give."""

    x_min: float = np.inf
    x_max: float = -np.inf
    y_min: float = np.inf
    y_max: float = -np.inf
    x_sum: float = 0.0
    y_sum: float = 0.0
    xy_sum: float = 0.0  # sum of float32 products x*y
    sq_diff_sum: float = 0.0  # sum of (x-y)^2 in float32 (overflows to Inf like the vendor's)
    abs_diff_sum: float = 0.0
    max_abs_diff: float = -np.inf
    rel_sum: float = 0.0  # msaccucmp r_i = |x/y - 1| where |y| > eps else 0
    max_rel: float = -np.inf
    within_one_thousandth: int = 0  # msprobe |x-y|/|y| < 0.001 (zero golden nudged by eps)
    within_five_thousandths: int = 0


class _PassBuffers:
    """The first pass's chunk-sized work arrays."""

    def __init__(self, size: int):
        self.diff = scratch("diff", size, np.float32)
        self.work = scratch("work", size, np.float32)
        self.extra = scratch("extra", size, np.float32)
        self.keep = scratch("keep", size, np.int32)  # all-ones / all-zeros bit masks
        self.flags = scratch("flags", size, np.bool_)
        self.zero = scratch("zero", size, np.bool_)


def first_pass(xs: Float32Chunks, ys: Float32Chunks, n: int, chunk: int) -> FirstPass:
    acc = FirstPass()
    bufs = _PassBuffers(max(1, min(chunk, n)))
    for start in range(0, n, chunk):
        stop = min(start + chunk, n)
        x = xs.read(start, stop)
        x_low, x_high = xs.range or (np.minimum.reduce(x), np.maximum.reduce(x))
        y = ys.read(start, stop)
        y_low, y_high = ys.range or (np.minimum.reduce(y), np.maximum.reduce(y))
        acc.x_min, acc.x_max = _nan_min(acc.x_min, x_low), _nan_max(acc.x_max, x_high)
        acc.y_min, acc.y_max = _nan_min(acc.y_min, y_low), _nan_max(acc.y_max, y_high)
        acc.x_sum += sum64(x)
        acc.y_sum += sum64(y)
        finite = all(math.isfinite(v) for v in (x_low, x_high, y_low, y_high))
        _errors(x, y, stop - start, bufs, acc, finite)
    return acc


def _errors(x: np.ndarray, y: np.ndarray, m: int, bufs: _PassBuffers, acc: FirstPass,
            finite: bool) -> None:
    """Absolute/relative errors of one chunk, accumulated into ``acc``."""
    diff, work, flags = bufs.diff[:m], bufs.work[:m], bufs.flags[:m]
    acc.xy_sum += _product_sum(x, y, work, finite)
    np.subtract(x, y, out=diff)
    acc.sq_diff_sum += sum64(np.multiply(diff, diff, out=work))
    np.abs(diff, out=diff)
    acc.max_abs_diff = _nan_max(acc.max_abs_diff, np.maximum.reduce(diff))
    acc.abs_diff_sum += sum64(diff)

    abs_y = np.abs(y, out=work)
    # No zero, tiny or NaN golden in the chunk: the common case, no masking needed.
    clean = np.minimum.reduce(abs_y) > F64_EPS
    keep = None
    if not clean:  # the vendor's r_i is 0 where not |y| > eps: an and-mask of all-ones bits
        keep = np.greater(abs_y, F64_EPS, out=bufs.keep[:m])
        np.negative(keep, out=keep)
    # |x-y|/|y| equals msprobe's |(x-y)/y| bit for bit (IEEE division is sign-symmetric).
    # Where y == 0 it is Inf or NaN, so never "within"; those are counted by _zero_golden.
    ratio = np.divide(diff, abs_y, out=work)
    acc.within_one_thousandth += np.count_nonzero(np.less(ratio, ONE_THOUSANDTH, out=flags))
    acc.within_five_thousandths += np.count_nonzero(np.less(ratio, FIVE_THOUSANDTHS, out=flags))
    if not clean:
        _zero_golden(x, y, m, bufs, acc)

    rel = np.divide(x, y, out=diff)  # the vendor's form: abs(x / y - 1), in float32
    np.subtract(rel, np.float32(1), out=rel)
    np.abs(rel, out=rel)
    if keep is not None:  # bitwise, so Inf/NaN at masked places become +0.0 too
        np.bitwise_and(rel.view(np.int32), keep, out=rel.view(np.int32))
    acc.max_rel = _nan_max(acc.max_rel, np.maximum.reduce(rel))
    acc.rel_sum += sum64(rel)


def _zero_golden(x: np.ndarray, y: np.ndarray, m: int, bufs: _PassBuffers, acc: FirstPass) -> None:
    """msprobe's ratios where the golden is exactly 0: both sides get float32 eps added, so the
    error is |((x + eps) - eps) / eps|, "within" only for |x| below ~1e-10."""
    zero = np.equal(y, 0, out=bufs.zero[:m])
    count = np.count_nonzero(zero)
    if not count:
        return
    if count * 16 < m:  # sparse zeros: gather them
        where = np.flatnonzero(zero)
        err = np.abs((x[where] + F32_EPS) - F32_EPS) / F32_EPS
        acc.within_one_thousandth += np.count_nonzero(err < ONE_THOUSANDTH)
        acc.within_five_thousandths += np.count_nonzero(err < FIVE_THOUSANDTHS)
        return
    err, flags = bufs.extra[:m], bufs.flags[:m]  # dense zeros (ReLU outputs): whole chunk
    np.add(x, F32_EPS, out=err)
    np.subtract(err, F32_EPS, out=err)
    np.abs(err, out=err)
    np.divide(err, F32_EPS, out=err)
    def within(threshold: np.float32) -> int:
        return np.count_nonzero(np.logical_and(np.less(err, threshold, out=flags), zero, out=flags))

    acc.within_one_thousandth += within(ONE_THOUSANDTH)
    acc.within_five_thousandths += within(FIVE_THOUSANDTHS)


@dataclass
class SecondPass:
    x_dev_sq_sum: float = 0.0  # sum of (x - x_shift)^2, x_shift = float32(mean x)
    y_dev_sq_sum: float = 0.0
    kl_a_sum: float = 0.0  # sums of the floored min-max scaled values a (NPU) and b (golden)
    kl_b_sum: float = 0.0
    kl_log_sum: float = 0.0  # sum of a * log(a / b * kl_scale)
    kl_scale: float = 1.0  # float32 estimate of B / A, see _kl_scale


def _scaled(values: np.ndarray, low: np.float32, span: np.float32, floor: np.ndarray,
            out: np.ndarray) -> np.ndarray:
    """The vendor's KL normalisation: (v - min) / (max - min), unchanged if max == min, then
    floored at float32 eps (so the sum is never 0)."""
    if span != 0:
        np.subtract(values, low, out=out)
        np.divide(out, span, out=out)
        values = out
    return np.maximum(values, floor, out=out)  # an array floor: 4x faster than a scalar one


def _kl_scale(first: FirstPass, n: int, x_span: np.float32, y_span: np.float32) -> np.float32:
    """An estimate of B/A (sums of the scaled values) from the first pass.

    KL = sum(a*log(a/b*c))/A + log(B/(A*c)) holds for any c > 0. With c ~ B/A the float32
    log works on p/q ~ 1, where it is accurate to ~1e-8 absolute; with c = 1 a tensor that
    equals the golden up to a scale factor would carry float32 log's relative error of
    log(B/A) (~1e-6) into KL. The estimate ignores the eps floor, hence the lower bound.
    """
    def scaled_sum(total: float, low: float, span: np.float32) -> float:
        estimate = (total - n * low) / float(span) if span != 0 else total
        return max(estimate, n * float(F32_EPS))

    scale = scaled_sum(first.y_sum, first.y_min, y_span) / scaled_sum(first.x_sum, first.x_min, x_span)
    scale32 = np.float32(scale)
    return scale32 if math.isfinite(scale32) and scale32 > 0 else np.float32(1)


def second_pass(xs: Float32Chunks, ys: Float32Chunks, n: int, chunk: int, first: FirstPass,
                *, want_kl: bool) -> SecondPass:
    acc = SecondPass()
    size = max(1, min(chunk, n))
    a_buf, b_buf = scratch("diff", size, np.float32), scratch("extra", size, np.float32)
    work_buf = scratch("work", size, np.float32)
    floor_buf = scratch("kl_floor", size, np.float32, fill=F32_EPS)
    xs.known_finite = math.isfinite(first.x_min) and math.isfinite(first.x_max)
    ys.known_finite = math.isfinite(first.y_min) and math.isfinite(first.y_max)
    x_shift, y_shift = np.float32(first.x_sum / n), np.float32(first.y_sum / n)
    x_low, y_low = np.float32(first.x_min), np.float32(first.y_min)
    x_span = np.float32(first.x_max) - x_low  # float32 arithmetic, as the vendor
    y_span = np.float32(first.y_max) - y_low
    kl_scale = _kl_scale(first, n, x_span, y_span) if want_kl else np.float32(1)
    acc.kl_scale = float(kl_scale)
    for start in range(0, n, chunk):
        stop = min(start + chunk, n)
        m = stop - start
        x, work = xs.read(start, stop), work_buf[:m]
        acc.x_dev_sq_sum += _centred_square_sum(x, x_shift, work, xs.known_finite)
        a = _scaled(x, x_low, x_span, floor_buf[:m], a_buf[:m]) if want_kl else None
        y = ys.read(start, stop)
        acc.y_dev_sq_sum += _centred_square_sum(y, y_shift, work, ys.known_finite)
        if a is None:
            continue
        b = _scaled(y, y_low, y_span, floor_buf[:m], b_buf[:m])
        acc.kl_a_sum += sum64(a)
        acc.kl_b_sum += sum64(b)
        ratio = np.multiply(np.divide(a, b, out=work), kl_scale, out=work)
        log_ratio = np.log(ratio, out=ratio)
        acc.kl_log_sum += sum64(np.multiply(log_ratio, a, out=work))
    return acc


@dataclass
class BoolCounts:
    x_true: int = 0
    y_true: int = 0
    both_true: int = 0
    equal: int = 0


def bool_counts(x: np.ndarray, y: np.ndarray, chunk: int) -> BoolCounts:
    counts = BoolCounts()
    flags_buf = scratch("flags", max(1, min(chunk, x.size)), np.bool_)
    for start in range(0, x.size, chunk):
        xc, yc = x[start:start + chunk], y[start:start + chunk]
        flags = flags_buf[: xc.size]
        counts.x_true += np.count_nonzero(xc)
        counts.y_true += np.count_nonzero(yc)
        counts.both_true += np.count_nonzero(np.logical_and(xc, yc, out=flags))
        counts.equal += np.count_nonzero(np.equal(xc, yc, out=flags))
    return counts
