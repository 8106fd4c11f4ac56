"""Compare paired msprobe rows as ``msprobe compare`` (26.2) does: tensor, statistics, md5.

Tensor mode computes msprobe's six metrics of each loaded pair (:mod:`.tensor_metrics`, which
says how they follow msprobe's code).

Statistics mode compares the dumped Max/Min/Mean/Norm with msprobe's ``CalcStatsDiff`` rules;
md5 mode compares the CRC-32 strings.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field
from typing import Iterator

from precision_shell.errors import PshellError
from precision_shell.formats.msprobe.dump import Leaf
from precision_shell.formats.msprobe.columns import stat_text
from precision_shell.analysis.compare.msprobe.kernel import BufferedLoader, ordered_map
from precision_shell.analysis.compare.msprobe.pairing import Pairing, Row, RowPair
from precision_shell.analysis.compare.msprobe.tensor_metrics import (
    N_A, NAN, UNSUPPORTED, TensorMetrics, tensor_metrics,
)

STAT_NAMES = ("max", "min", "mean", "l2norm")


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
