"""Compare rows as msprobe's compare-result CSV (26.2): its columns, its cells, its verdicts.

Columns per mode are msprobe's ``CompareConst.COMPARE_RESULT_HEADER`` (tensor),
``SUMMARY_COMPARE_RESULT_HEADER`` (statistics) and ``MD5_COMPARE_RESULT_HEADER``, plus
``NPU_Stack_Info`` (stack mode) and, in tensor mode, ``Data_name``. Cells are written as
msprobe's pandas table writes them (Python ``repr`` of floats, ``N/A`` where a side is missing,
a leading space before ``inf``, stringified Python lists for ``Data_name`` and the stack).

``Result`` / ``Err_message`` come from msprobe's per-API checkers
(``core/compare/indicator_analysis/algorithm.py``): NaN/Inf in the NPU max/min, the 1-per-mille
ratio collapsing from inputs to outputs, requires_grad, scalar-argument, dtype and shape
differences, the cosine drop (warning); in statistics mode the norm relative error checks;
in md5 mode the CRC-32. msprobe flags every bf16-vs-fp32 row ``error`` for the dtype alone;
pshell does not unless ``dtype_is_error`` (what msprobe prints) is asked for.
"""

from __future__ import annotations

import csv
import json
import math
import os
from operator import itemgetter
from typing import Iterable, Iterator

from precision_shell.atomic_write import write_atomic
from precision_shell.safe_text import csv_row
from precision_shell.formats.msprobe.columns import shape_text

from precision_shell.analysis.compare.msprobe.engine import RowResult, md5_cell
from precision_shell.analysis.compare.msprobe.tensor_metrics import METRIC_COLUMNS, N_A
from precision_shell.analysis.compare.msprobe.pairing import Row
from precision_shell.analysis.compare.msprobe.stats_verdicts import (_ALL_IGNORE, _DTYPE, _GRAD, _INF_NAN,
                                                                    _INPUT_IGNORE, _PARAMETERS, _SHAPE, _inf_or_nan,
                                                                    _percent, extreme_percent, judge)

BASIC = ["NPU Name", "Bench Name", "NPU Dtype", "Bench Dtype", "NPU Tensor Shape",
         "Bench Tensor Shape", "NPU Requires_grad", "Bench Requires_grad"]
SUMMARY = ["NPU max", "NPU min", "NPU mean", "NPU l2norm",
           "Bench max", "Bench min", "Bench mean", "Bench l2norm"]
STAT_DIFFS = ["Max diff", "Min diff", "Mean diff", "L2norm diff"]
STAT_RELATIVE = ["MaxRelativeErr", "MinRelativeErr", "MeanRelativeErr", "NormRelativeErr"]
EXTRACT = ["Requires_grad Consistent", "Result", "Err_message"]
STACK, DATA_NAME = "NPU_Stack_Info", "Data_name"


def header(mode: str, stack: bool = True) -> list[str]:
    if mode == "tensor":
        cols = BASIC + list(METRIC_COLUMNS) + SUMMARY + EXTRACT
    elif mode == "statistics":
        cols = BASIC + STAT_DIFFS + STAT_RELATIVE + SUMMARY + EXTRACT
    elif mode == "md5":
        cols = BASIC + ["NPU MD5", "BENCH MD5"] + EXTRACT
    else:
        raise ValueError(f"unknown compare mode {mode!r}")
    return cols + ([STACK] if stack else []) + ([DATA_NAME] if mode == "tensor" else [])


def _dtype_cell(row: Row) -> str:
    return N_A if row.leaf.type is None else row.dtype     # a None leaf has neither


def _shape_cell(row: Row) -> str:
    return shape_text(row.leaf)


def _grad_cell(row: Row) -> str:
    return N_A if row.leaf.requires_grad is None else str(row.leaf.requires_grad)


def _number_cell(value) -> str:
    if isinstance(value, float):
        if math.isinf(value):
            return " inf" if value > 0 else " -inf"
        return repr(value)
    return str(value)


# msprobe turns a NaN statistic into "Nan" and writes float infinities with a leading space
_SUMMARY_TEXT = {"nan": "Nan", "inf": " inf", "-inf": " -inf"}


def table_rows(results: Iterable[RowResult], mode: str, stack: dict[str, tuple[str, ...]] | None = None,
               dtype_is_error: bool = False) -> list[dict[str, str]]:
    """One dict per row, keyed by :func:`header`'s columns; verdicts per API as msprobe's."""
    return list(iter_table_rows(results, mode, stack, dtype_is_error))


def iter_table_rows(results: Iterable[RowResult], mode: str, stack: dict[str, tuple[str, ...]] | None = None,
                    dtype_is_error: bool = False) -> Iterator[dict[str, str]]:
    """:func:`table_rows` one entry's rows at a time (a pairing keeps each entry's rows together),
    so writing a CSV holds one entry's cells, not 300k rows of them."""
    group: list[dict] = []
    seen_entries: set[str] = set()
    for result in results:
        t, g = result.pair.target, result.pair.golden
        if group and group[0]["_entry"] != t.entry.name:
            yield from _finished(group, mode, dtype_is_error)
            group = []
        cells = {"NPU Name": t.name, "Bench Name": g.name if g else N_A,
                 "NPU Dtype": _dtype_cell(t), "Bench Dtype": _dtype_cell(g) if g else N_A,
                 "NPU Tensor Shape": _shape_cell(t), "Bench Tensor Shape": _shape_cell(g) if g else N_A,
                 "NPU Requires_grad": _grad_cell(t), "Bench Requires_grad": _grad_cell(g) if g else N_A}
        for column, text in zip(SUMMARY, result.summary):     # formatted once, by compare_pairs
            cells[column] = _SUMMARY_TEXT.get(text, text)
        if mode == "tensor":
            metric_cells = result.metrics.cells() if result.metrics else [N_A] * 6
            cells.update({c: _number_cell(v) for c, v in zip(METRIC_COLUMNS, metric_cells)})
            cells[DATA_NAME] = str([t.leaf.data_name or "-1", (g.leaf.data_name or "-1") if g else N_A])
        elif mode == "statistics":
            diffs = result.stats.diffs if result.stats else [N_A] * 4
            rel = result.stats.relative if result.stats else [N_A] * 4
            cells.update(dict(zip(STAT_DIFFS, diffs)))
            cells.update(dict(zip(STAT_RELATIVE, rel)))
        else:
            cells["NPU MD5"] = md5_cell(t.leaf)
            cells["BENCH MD5"] = md5_cell(g.leaf) if g else N_A
        cells["Requires_grad Consistent"] = str(cells["NPU Requires_grad"] == cells["Bench Requires_grad"])
        first = t.entry.name not in seen_entries
        seen_entries.add(t.entry.name)
        frames = (stack or {}).get(t.entry.name)
        cells[STACK] = str(list(frames)) if first and frames else N_A
        cells["_metrics"], cells["_entry"] = result.metrics, t.entry.name    # for the verdicts; dropped
        group.append(cells)
    if group:
        yield from _finished(group, mode, dtype_is_error)


def _finished(group: list[dict], mode: str, dtype_is_error: bool) -> list[dict]:
    _verdicts(group, mode, dtype_is_error)
    for cells in group:
        del cells["_metrics"], cells["_entry"]
    return group


def write_compare_csv(path: str | os.PathLike, rows: Iterable[dict[str, str]], mode: str,
                      stack: bool = True) -> None:
    cols = header(mode, stack)
    every, pick = set(cols), itemgetter(*cols)

    def write(f) -> None:
        writer = csv.writer(f)
        writer.writerow(cols)
        # table_rows fills every column: picked in C; a row missing some gets N/A there
        # a name or data_name from the dump starting with = + - @ is text, not a formula
        writer.writerows(csv_row(pick(cells) if cells.keys() >= every else [cells.get(c, N_A) for c in cols])
                         for cells in rows)

    write_atomic(path, write)     # a reader never sees half a CSV


# --- msprobe's per-API verdicts -------------------------------------------------------------------

_ORDER = {"pass": 0, "warning": 1, "error": 2}


def _flag(cells: dict, level: str, message: str) -> None:
    if _ORDER[level] > _ORDER[cells["Result"]]:
        cells["Result"] = level
    cells["_msgs"].append(f"{level}: {message}")


def _extreme(rows: list[dict], column: str, is_min: bool) -> float:
    """msprobe's ``get_min_or_max_value``: numbers and percentages only, 1.0 / 0.0 if none."""
    value = 1.0 if is_min else 0.0
    for cells in rows:
        v = cells.get(column)
        metric = cells["_metrics"]
        if metric is not None and column in METRIC_COLUMNS:
            v = metric.cells()[METRIC_COLUMNS.index(column)]
        if isinstance(v, str):
            if not v.endswith("%"):
                continue
            v = _percent(v)
        value = min(value, v) if is_min else max(value, v)
    return value


_STATISTICS_JUDGED = BASIC + STAT_DIFFS + STAT_RELATIVE + SUMMARY     # the columns stats_verdicts.judge reads


def _statistics_verdicts(group: list[dict], dtype_is_error: bool) -> None:
    """The statistics verdicts of one entry's rows: :func:`.stats_verdicts.judge`, the rules
    the column-wise CSV uses, on this group's cells."""
    cols = [[cells[column] for cells in group] for column in _STATISTICS_JUDGED]
    percent = [extreme_percent(cells["NormRelativeErr"]) for cells in group]
    results, messages = judge(cols, [False] * len(group), percent, [(0, len(group), group[0]["_entry"])],
                              dtype_is_error)
    for cells, result, message in zip(group, results, messages):
        cells["Result"], cells["Err_message"] = result, message


def _verdicts(group: list[dict], mode: str, dtype_is_error: bool) -> None:
    if mode == "statistics":
        _statistics_verdicts(group, dtype_is_error)
        return
    for cells in group:
        cells["Result"], cells["_msgs"] = "pass", []
    outputs = [c for c in group if ".output." in c["NPU Name"]]
    inputs = [c for c in group if ".output." not in c["NPU Name"]]
    if mode == "md5":
        for c in group:
            if c["NPU MD5"] != c["BENCH MD5"]:
                if {c["NPU MD5"], c["BENCH MD5"]} & {N_A, "Nan", ""}:
                    _flag(c, "warning", "The parameter of NPU does not match the bench.")
                else:
                    _flag(c, "error", "The CRC-32 value of NPU differs from that of the bench.")
        _finish(group)
        return
    parts = inputs[0]["NPU Name"].split(".") if inputs else []
    api = parts[1] if len(parts) >= 2 else ""
    ignore = "all" if api in _ALL_IGNORE else "input" if api in _INPUT_IGNORE else ""
    checked = [] if ignore == "all" else outputs if ignore == "input" else inputs + outputs
    for c in checked:     # InfNanErrChecker
        if not (_inf_or_nan(c["Bench max"]) or _inf_or_nan(c["Bench min"])) and \
                (_inf_or_nan(c["NPU max"]) or _inf_or_nan(c["NPU min"])):
            _flag(c, "error", _INF_NAN)
    if not ignore:
        if mode == "tensor" and outputs:    # OneThousandthErrChecker
            if _extreme(inputs, "One Thousandth Err Ratio", True) > 0.9 and \
                    _extreme(outputs, "One Thousandth Err Ratio", True) < 0.1:
                _flag(outputs[0], "error", "The input/parameters of One Thousandth Err Ratio > 0.9 "
                                           "while the output < 0.6.")
    for c in checked:     # RequiresGradErrChecker
        # a missing requires_grad reads N/A and counts (a None golden leaf against a tensor)
        if c["Bench Name"] != N_A and c["NPU Requires_grad"] != c["Bench Requires_grad"]:
            _flag(c, "error", _GRAD)
    if not ignore:
        for c in inputs:      # ParametersErrChecker
            if c["Bench Name"] != N_A and "class" in c["NPU Dtype"] and "class" in c["Bench Dtype"] \
                    and c["NPU Tensor Shape"] == "[]" and c["NPU max"] != c["Bench max"]:
                _flag(c, "error", _PARAMETERS)
    for c in checked:
        if c["Bench Name"] == N_A:
            continue
        if dtype_is_error and "qkv" not in c["Bench Name"] and "gate_up" not in c["Bench Name"] \
                and c["NPU Dtype"] != c["Bench Dtype"]:      # DTypeErrChecker
            _flag(c, "error", _DTYPE)
        if c["NPU Tensor Shape"] != c["Bench Tensor Shape"]:    # ShapeErrChecker
            _flag(c, "error", _SHAPE)
    if not ignore and outputs:      # CosineWarnChecker (statistics: _statistics_verdicts)
        low_in, low_out = _extreme(inputs, "Cosine", True), _extreme(outputs, "Cosine", True)
        if low_in > 0.9 and low_in - low_out > 0.1:
            _flag(outputs[0], "warning", "The input/parameters of Cosine > 0.9, and "
                                         "input/parameters - output > 0.1")
    _finish(group)


def _finish(group: list[dict]) -> None:
    for c in group:
        c["Err_message"] = json.dumps(c.pop("_msgs"))
