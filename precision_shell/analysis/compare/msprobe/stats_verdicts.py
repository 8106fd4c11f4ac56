"""msprobe's per-API verdicts of a statistics-mode compare (``Result`` / ``Err_message``), as
array work over a chunk of rows: the one implementation both statistics paths use (the column
CSV, :func:`.stats_table.judged_columns`, and the row path's ``export``,
:func:`.csv_layout.iter_table_rows`).

msprobe's checkers (``core/compare/indicator_analysis/algorithm.py``) run per API entry, in this
order, each appending to a row's messages: InfNanErrChecker, RelativeErrChecker,
RequiresGradErrChecker, ParametersErrChecker, DTypeErrChecker (only with ``dtype_is_error``),
ShapeErrChecker, RelativeWarnChecker. The entry-level conditions (the API's ignore lists, the
largest NormRelativeErr of its inputs and outputs) are reductions over each entry's rows
(``np.maximum.reduceat``); each checker is one boolean mask over the chunk; only the rows some
checker flags get messages. Before, a Python loop per entry took ~0.4 s of each CSV half.
"""

from __future__ import annotations

import json

import numpy as np

from .tensor_metrics import N_A

NO_MESSAGES = json.dumps([])
_ALL_IGNORE = {"empty", "empty_like", "numpy", "to", "__setitem__", "empty_with_format",
               "new_empty_strided", "new_empty", "empty_strided"}
_INPUT_IGNORE = {"_reduce_scatter_base", "_all_gather_base", "all_to_all_single", "batch_isend_irecv"}
# column positions in a statistics row (csv_layout.header("statistics"))
(_NAME, _BENCH, _NDTYPE, _BDTYPE, _NSHAPE, _BSHAPE, _NGRAD, _BGRAD) = range(8)
_REL, _SUMMARY = 12, 16       # diffs at 8-11
_NMAX, _NMIN, _BMAX, _BMIN = _SUMMARY, _SUMMARY + 1, _SUMMARY + 4, _SUMMARY + 5
_NORM_REL = _REL + 3

_INF_NAN = "There is nan/inf/-inf in the maximum or minimum value of NPU."
_RELATIVE = "The NormRelativeErr of output is greater than 0.5."
_GRAD = "The Required_Grad of NPU and Bench are inconsistent"
_PARAMETERS = "The scalar parameters of NPU and Bench are inconsistent."
_DTYPE = "The dtype of NPU and Bench are inconsistent."
_SHAPE = "The shape of NPU and Bench are inconsistent."
_WARN = "The norm relative error of output is 10 times that of input."


def _inf_or_nan(text: str) -> bool:
    return text.strip().lower() in ("inf", "-inf", "nan")


def _percent(text: str) -> float:
    try:
        return float(text.strip("%")) / 100
    except ValueError:
        return 0.0


def extreme_percent(text: str) -> float:
    """A NormRelativeErr cell as msprobe's ``get_min_or_max_value`` counts it: its percentage
    as a fraction, -1.0 for a cell that is none (below the 0.0 it starts from; NaN too:
    ``max()`` passes it over)."""
    if not text.endswith("%"):
        return -1.0
    value = _percent(text)
    return value if value == value else -1.0


def _mask(flags: list[bool] | np.ndarray) -> np.ndarray:
    return np.asarray(flags, dtype=bool)


def judge(cols: list[list[str]], simple: list[bool] | np.ndarray, percent: list[float] | np.ndarray,
          bounds: list[tuple[int, int, str]], dtype_is_error: bool) -> tuple[list[str], list[str]]:
    """(Result, Err_message) of each row of a chunk. ``cols``: its columns up to Bench l2norm
    (csv_layout's statistics header); ``simple``: rows whose two sides are float tensors with
    four finite statistics (their max/min cells cannot be inf/nan: not looked at; False is
    always right); ``percent``: each row's NormRelativeErr as :func:`extreme_percent`;
    ``bounds``: (start, end, entry name) of each entry, covering the chunk in order."""
    n = len(cols[_NAME])
    results, messages = ["pass"] * n, [NO_MESSAGES] * n
    if not n:
        return results, messages
    names, bench = cols[_NAME], cols[_BENCH]
    starts = np.array([b[0] for b in bounds], dtype=np.int64)
    lengths = np.diff(np.append(starts, n))
    output = _mask([".output." in name for name in names])
    index = np.arange(n)
    # the API name: the second dotted part of the entry's first input row's name
    first_input = np.minimum.reduceat(np.where(output, n, index), starts)
    ignore = []      # per entry: 2 all, 1 inputs, 0 none
    for row in first_input.tolist():
        parts = names[row].split(".") if row < n else []
        api = parts[1] if len(parts) >= 2 else ""
        ignore.append(2 if api in _ALL_IGNORE else 1 if api in _INPUT_IGNORE else 0)
    ignore_row = np.repeat(np.array(ignore, dtype=np.int8), lengths)
    checked = (ignore_row == 0) | ((ignore_row == 1) & output)
    judged = ignore_row == 0          # the checkers an ignored API skips altogether
    percent = np.asarray(percent, dtype=np.float64)
    max_in = np.maximum(0.0, np.maximum.reduceat(np.where(output, 0.0, percent), starts))
    max_out = np.maximum(0.0, np.maximum.reduceat(np.where(output, percent, 0.0), starts))
    paired = _mask([b != N_A for b in bench])

    flags: list[tuple[np.ndarray, str, str]] = []
    # InfNanErrChecker
    inf_nan = np.zeros(n, dtype=bool)
    n_max, n_min, b_max, b_min = cols[_NMAX], cols[_NMIN], cols[_BMAX], cols[_BMIN]
    for i in np.flatnonzero(checked & ~np.asarray(simple, dtype=bool)).tolist():
        inf_nan[i] = not (_inf_or_nan(b_max[i]) or _inf_or_nan(b_min[i])) and (_inf_or_nan(n_max[i]) or _inf_or_nan(n_min[i]))
    flags.append((inf_nan, "error", _INF_NAN))
    # RelativeErrChecker: outputs of an entry whose inputs' largest NormRelativeErr is < 0.1
    relative = np.zeros(n, dtype=bool)
    norm_rel = cols[_NORM_REL]
    quiet_inputs = np.repeat(np.abs(max_in) < 0.1, lengths)
    for i in np.flatnonzero(judged & output & quiet_inputs).tolist():
        relative[i] = abs(_percent(norm_rel[i])) > 0.5
    flags.append((relative, "error", _RELATIVE))
    # RequiresGradErrChecker
    n_grad, b_grad = cols[_NGRAD], cols[_BGRAD]
    flags.append((checked & paired & _mask([a != b for a, b in zip(n_grad, b_grad)]), "error", _GRAD))
    # ParametersErrChecker: scalar class arguments (shape "[]") with different values
    n_dtype, b_dtype, n_shape, b_shape = cols[_NDTYPE], cols[_BDTYPE], cols[_NSHAPE], cols[_BSHAPE]
    parameters = np.zeros(n, dtype=bool)
    scalar = judged & ~output & paired & _mask([s == "[]" for s in n_shape])
    for i in np.flatnonzero(scalar).tolist():
        parameters[i] = "class" in n_dtype[i] and "class" in b_dtype[i] and n_max[i] != b_max[i]
    flags.append((parameters, "error", _PARAMETERS))
    if dtype_is_error:      # DTypeErrChecker
        dtype = checked & paired & _mask([a != b and "qkv" not in g and "gate_up" not in g
                                          for a, b, g in zip(n_dtype, b_dtype, bench)])
        flags.append((dtype, "error", _DTYPE))
    # ShapeErrChecker
    flags.append((checked & paired & _mask([a != b for a, b in zip(n_shape, b_shape)]), "error", _SHAPE))
    # RelativeWarnChecker: on the entry's first output row
    first_output = np.minimum.reduceat(np.where(output, index, n), starts)
    abs_in, abs_out = np.abs(max_in), np.abs(max_out)
    with np.errstate(divide="ignore", invalid="ignore"):
        louder = np.where(abs_in == 0, abs_out > 0.1, abs_out / np.where(abs_in == 0, 1.0, abs_in) > 10)
    warn = np.zeros(n, dtype=bool)
    warn[first_output[(np.array(ignore) == 0) & (first_output < n) & louder]] = True
    flags.append((warn, "warning", _WARN))

    flagged = np.zeros(n, dtype=bool)
    for mask, _, _ in flags:
        flagged |= mask
    for i in np.flatnonzero(flagged).tolist():
        found = [f"{level}: {message}" for mask, level, message in flags if mask[i]]
        results[i] = "error" if any(text.startswith("error") for text in found) else "warning"
        messages[i] = json.dumps(found)
    return results, messages
