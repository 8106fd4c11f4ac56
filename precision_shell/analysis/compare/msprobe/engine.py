"""Compare paired msprobe rows as ``msprobe compare`` (26.2) does: tensor, statistics, md5.

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
released before the next pair is loaded (:func:`compare_pairs` is a generator).

Statistics mode compares the dumped Max/Min/Mean/Norm with msprobe's ``CalcStatsDiff`` rules;
md5 mode compares the CRC-32 strings.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field
from typing import Iterator

import ml_dtypes
import numpy as np

from precision_shell.errors import PshellError
from precision_shell.formats.msprobe.dump import Leaf
from precision_shell.formats.msprobe.columns import stat_text
from precision_shell.analysis.compare.msprobe.kernel import BufferedLoader, kernel_sums, ordered_map
from precision_shell.analysis.compare.msprobe.pairing import Pairing, Row, RowPair

METRIC_COLUMNS = ("Cosine", "EucDist", "MaxAbsErr", "MaxRelativeErr",
                  "One Thousandth Err Ratio", "Five Thousandths Err Ratio")
STAT_NAMES = ("max", "min", "mean", "l2norm")
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


# --- statistics and md5 modes -------------------------------------------------------------------

stat_cell = stat_text   # msprobe's text for one of Max/Min/Mean/Norm of a row (one rule)


# a statistic's cell: (text, class of the text as msprobe's CalcStatsDiff sees it, its number)
_Cell = tuple[str, str, "float | None"]


def _cell(text: str) -> _Cell:
    kind = _classify(text)
    return text, kind, float(text) if kind == "num" else None


def stat_cells(leaf: Leaf) -> list[_Cell]:
    """The four statistics of a row (:data:`STAT_NAMES` order), each formatted once. A float
    statistic of a float tensor (nearly every cell) is classified from its value, not by
    parsing its text back (``repr`` round-trips, so the number is the same)."""
    plain = leaf.is_tensor and leaf.dtype != "bool" and not (leaf.dtype or "").startswith(("int", "uint"))
    cells = []
    for value in (leaf.max, leaf.min, leaf.mean, leaf.norm) if plain else ():
        if value is None:
            cells.append(("None", "other", None))
        elif value - value == 0:     # finite
            cells.append((repr(value), "num", value))
        else:
            cells.append(_cell(repr(value)))
    return cells or [_cell(stat_cell(leaf, which)) for which in STAT_NAMES]


def _classify(text: str) -> str:
    low = text.lower()
    if low == "nan":
        return "nan"
    if low == "inf":
        return "inf"
    if low == "-inf":
        return "-inf"
    if low not in ("true", "false"):
        try:
            float(text)
            return "num"
        except ValueError:
            pass
    if any(d in low for d in ("npu", "cpu", "cuda")):
        return "device"
    return "na" if text == N_A else "other"


_STATIC = {("inf", "num"): "inf", ("inf", "-inf"): "inf", ("-inf", "num"): "-inf", ("-inf", "inf"): "-inf",
           ("num", "inf"): "-inf", ("num", "-inf"): "inf", ("device", "device"): N_A}


def stat_diff(npu: str, bench: str) -> tuple[str, str]:
    """(diff, relative error) cells of one statistic, msprobe's ``CalcStatsDiff`` rules."""
    return _diff(_cell(npu), _cell(bench))


def _diff(npu: _Cell, bench: _Cell) -> tuple[str, str]:
    if npu[0] == bench[0]:
        return "0", "0"
    a, b = npu[1], bench[1]
    if a == "num" and b == "num":
        x, y = npu[2], bench[2]
        diff = x - y
        return repr(diff), ("inf" if y == 0 else repr(abs(diff / y * 100)) + "%")
    if "na" in (a, b):
        return N_A, N_A
    if "nan" in (a, b) and {a, b} <= {"nan", "num", "inf", "-inf"}:
        return NAN, NAN
    if (a, b) in _STATIC:
        return _STATIC[(a, b)], _STATIC[(a, b)]
    if {"device", "other"} & {a, b}:
        return "Diff", "Diff"
    return N_A, N_A


@dataclass
class StatsDiff:
    diffs: list[str]          # Max diff, Min diff, Mean diff, L2norm diff
    relative: list[str]       # MaxRelativeErr, MinRelativeErr, MeanRelativeErr, NormRelativeErr


def stats_compare(target: Leaf, golden: Leaf) -> StatsDiff:
    return _stats_diff(stat_cells(target), stat_cells(golden))


def _stats_diff(target: list[_Cell], golden: list[_Cell]) -> StatsDiff:
    cells = [_diff(t, g) for t, g in zip(target, golden)]
    return StatsDiff([c[0] for c in cells], [c[1] for c in cells])


def md5_cell(leaf: Leaf) -> str:
    """The row's CRC-32: dumped for tensors; msprobe computes one over ``str(value)`` for a
    plain value; a None leaf has none (``N/A``)."""
    if leaf.md5:
        return leaf.md5
    if leaf.type is None:
        return N_A
    return f"{zlib.crc32(str(leaf.value).encode()):08x}"


# --- streaming over a pairing -------------------------------------------------------------------

@dataclass
class RowResult:
    """One compared row: the pair and what its mode computed (None where not computed)."""
    pair: RowPair
    metrics: TensorMetrics | None = None
    stats: StatsDiff | None = None
    md5_equal: bool | None = None
    errors: list[str] = field(default_factory=list)    # files that could not be read
    # NPU max/min/mean/l2norm then Bench ones as msprobe prints them (N/A without a golden)
    summary: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.pair.target.name


def _row_has_file(row: Row | None) -> bool:
    return row is not None and row.leaf.file is not None


def compare_pairs(pairing: Pairing, mode: str) -> Iterator[RowResult]:
    """Each row of ``pairing`` compared in ``mode`` (tensor | statistics | md5), in order: in
    tensor mode two threads load and compare pairs (:mod:`.framework_kernel`), each pair's
    files read into the thread's reused buffers, so memory holds a few tensors at a time."""
    if mode == "tensor":
        load = BufferedLoader()

        def tensor_row(pair: RowPair) -> tuple[TensorMetrics, list[str]]:
            errors: list[str] = []
            return _tensor_row(pair, errors, load), errors
        tensor_rows = ordered_map(tensor_row, pairing.pairs)
    for pair in pairing.pairs:
        target, golden = pair.target, pair.golden
        t_cells = stat_cells(target.leaf)
        g_cells = stat_cells(golden.leaf) if golden is not None else None
        result = RowResult(pair, summary=[c[0] for c in t_cells] + ([c[0] for c in g_cells] if g_cells else [N_A] * 4))
        if mode == "md5":
            result.md5_equal = golden is not None and md5_cell(target.leaf) == md5_cell(golden.leaf)
        elif golden is not None:
            result.stats = _stats_diff(t_cells, g_cells)
        if mode == "tensor":
            result.metrics, result.errors = next(tensor_rows)
        yield result


def _tensor_row(pair: RowPair, errors: list[str], load) -> TensorMetrics:
    """msprobe's ``CompareRealData.compare_by_op`` for one row; ``load(leaf, side)``
    reads a leaf's values (side 0 target, 1 golden)."""
    target, golden = pair.target, pair.golden
    if golden is None:
        return TensorMetrics.all(UNSUPPORTED, "Bench api/module unmatched.")
    if not _row_has_file(target):
        return TensorMetrics.all(UNSUPPORTED, "NPU does not have data file.")
    if not _row_has_file(golden):
        return TensorMetrics.all(UNSUPPORTED, "Bench does not have data file.")
    try:
        npu, bench = load(target.leaf, 0), load(golden.leaf, 1)
    except PshellError as e:
        errors.append(str(e))
        return TensorMetrics.all(UNSUPPORTED, f"Dump file: {target.leaf.data_name} or "
                                              f"{golden.leaf.data_name} not found or read failed.")
    return tensor_metrics(npu, bench)


def is_failing(metrics: TensorMetrics | None, threshold: float) -> bool:
    """A tensor fails when its cosine is at or below ``threshold`` or could not be computed for
    NaN/Inf (``Nan``, or ``N/A`` for NaN/Inf at different places); a one-element tensor, whose
    cosine msprobe does not compute, fails when its max abs error is not finite."""
    if metrics is None:
        return False
    cos = metrics.cosine
    if isinstance(cos, float):
        return cos != cos or cos <= threshold
    if cos in (NAN, N_A):
        return True
    if cos == UNSUPPORTED:
        m = metrics.max_abs_err
        return m in (NAN, N_A) or (isinstance(m, float) and not math.isfinite(m))
    return False
