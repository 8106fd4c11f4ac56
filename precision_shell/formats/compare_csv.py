"""Read and write the vendor's vector-compare result CSV (msaccucmp ``result_*.csv``, formats.md §6, A.8.1).

Columns are located by header name, never by position, because the layout varies:
``Index, [OpSequence], OpType, NPUDump, DataType, [Address], GroundTruth, DataType, [Address],
TensorIndex, Shape, [OverFlow], <one column per algorithm>, CompareFailReason`` (the two
``DataType``/``Address`` columns share a name: the first pair after ``NPUDump`` is the NPU side,
the pair after ``GroundTruth`` the golden side), and older CANN wrote ``Index, LeftOp, RightOp,
TensorIndex, CosineSimilarity, ...``. Every column that is not one of the known descriptive
columns is a metric (custom ``alg_*.py`` plug-ins add their own).
"""

from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass, field

from ..atomic_write import write_atomic
from ..safe_text import csv_row, csv_uncell
from ..errors import FormatError
from .input_files import open_regular

__all__ = ["DEFAULT_METRICS", "CompareRow", "read_compare_csv", "rows_equal", "write_compare_cells",
           "write_compare_csv"]

DEFAULT_METRICS = ("CosineSimilarity", "MaxAbsoluteError", "AccumulatedRelativeError",
                   "RelativeEuclideanDistance", "KullbackLeiblerDivergence", "StandardDeviation",
                   "MeanAbsoluteError", "RootMeanSquareError", "MaxRelativeError", "MeanRelativeError")
STD_COLUMN = "StandardDeviation"  # "(mean;std),(mean;std)": text, not a number
# Descriptive columns; the side-specific ones are renamed while reading (see _column_names).
_EXTRA_COLUMNS = ("OpSequence", "NPUDataType", "NPUAddress", "GroundTruthDataType",
                  "GroundTruthAddress", "OverFlow")
_KNOWN = {"Index", "OpType", "NPUDump", "GroundTruth", "TensorIndex", "Shape", "CompareFailReason",
          "LeftOp", "RightOp", STD_COLUMN, *_EXTRA_COLUMNS}


@dataclass
class CompareRow:
    index: int  # fusion-op id: rows of one NPU op share it
    op_type: str  # "" in the old layout
    npu_op: str
    golden_ops: list[str]  # GroundTruth split on ','; [] for "*"
    tensor: str  # TensorIndex as written: "op:output:0" ("NaN" when the op had no result)
    kind: str  # "input" | "output"; "" when TensorIndex is not op:kind:i
    tensor_index: int  # -1 when TensorIndex is not op:kind:i
    shape: tuple[int, ...] | None
    metrics: dict[str, float | None]  # column -> value; NaN cells -> nan; empty/text -> None
    std: str | None  # the StandardDeviation cell; None for NaN/empty
    fail_reason: str
    extra: dict[str, str] = field(default_factory=dict)  # OpSequence, NPUDataType, OverFlow ...
    # metric cells written as this text instead of '%.6f': the vendor's literal "1.0" cosine of
    # two all-zero tensors (formats.md A.8.1); the reader leaves it empty
    texts: dict[str, str] = field(default_factory=dict)


def _column_names(header: list[str]) -> list[str]:
    """Header with the duplicated DataType/Address columns named by side."""
    names, side = [], ""
    for name in header:
        name = name.strip()
        if name in ("NPUDump", "GroundTruth"):
            side = name
        if name in ("DataType", "Address") and side:
            name = ("NPU" if side == "NPUDump" else "GroundTruth") + name
        names.append(name)
    return names


def _metric(cell: str) -> float | None:
    cell = cell.strip()
    if not cell:
        return None
    try:
        return float(cell)  # "0.998000", "nan", "NaN", "inf"
    except ValueError:
        return None


def _std(cell: str) -> str | None:
    cell = cell.strip()
    return None if cell in ("", "NaN") else cell


def _shape(cell: str) -> tuple[int, ...] | None:
    cell = cell.strip()
    if not (cell.startswith("[") and cell.endswith("]")):
        return None
    try:
        return tuple(int(d) for d in cell[1:-1].replace(" ", "").split(",") if d)
    except ValueError:
        return None


def _tensor(text: str) -> tuple[str, int]:
    parts = text.rsplit(":", 2)
    if len(parts) == 3 and parts[1] in ("input", "output"):
        try:
            return parts[1], int(parts[2])
        except ValueError:
            pass
    return "", -1


def read_compare_csv(path: str | os.PathLike) -> list[CompareRow]:
    """Rows of a vendor compare result CSV (new or old layout); FormatError if it is not one."""
    try:
        with os.fdopen(open_regular(path), newline="", encoding="utf-8-sig") as handle:   # no FIFO hang
            table = list(csv.reader(handle))
    except OSError as exc:
        raise FormatError(path, f"cannot read: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise FormatError(path, f"not a CSV text file: {exc}") from None
    if not table:
        raise FormatError(path, "empty file")
    names = _column_names(table[0])
    col = {name: i for i, name in reversed(list(enumerate(names)))}  # first occurrence wins
    if "Index" not in col or "TensorIndex" not in col:
        raise FormatError(path, "not a compare result CSV: no Index/TensorIndex columns in the header")
    npu_col, golden_col = col.get("NPUDump", col.get("LeftOp")), col.get("GroundTruth", col.get("RightOp"))
    metric_cols = [(name, i) for i, name in enumerate(names) if name and name not in _KNOWN]
    rows = []
    for number, cells in enumerate(table[1:], start=2):
        if not any(cell.strip() for cell in cells):
            continue
        if len(cells) != len(names):  # e.g. an unquoted "(m;s),(m;s)" cell
            raise FormatError(path, f"line {number}: {len(cells)} cells, the header has {len(names)}")
        try:
            index = int(cells[col["Index"]])
        except ValueError:
            raise FormatError(path, f"line {number}: Index {cells[col['Index']]!r} is not an integer") from None
        tensor = cells[col["TensorIndex"]].strip()
        golden = cells[golden_col].strip() if golden_col is not None else ""
        kind, tensor_index = _tensor(tensor)
        rows.append(CompareRow(
            index=index, op_type=cells[col["OpType"]].strip() if "OpType" in col else "",
            npu_op=csv_uncell(cells[npu_col].strip()) if npu_col is not None else "",   # pshell's own CSV
            golden_ops=[g.strip() for g in golden.split(",") if g.strip()] if golden not in ("", "*") else [],
            tensor=tensor, kind=kind, tensor_index=tensor_index,
            shape=_shape(cells[col["Shape"]]) if "Shape" in col else None,
            metrics={name: _metric(cells[i]) for name, i in metric_cols},
            std=_std(cells[col[STD_COLUMN]]) if STD_COLUMN in col else None,
            fail_reason=cells[col["CompareFailReason"]].strip() if "CompareFailReason" in col else "",
            extra={name: cells[col[name]].strip() for name in _EXTRA_COLUMNS if name in col}))
    return rows


def _metric_cell(value: float | None) -> str:
    return "NaN" if value is None else "%.6f" % value  # nan/inf print as numpy does: nan, inf


def _extra(key: str):
    return lambda row: row.extra.get(key, "NaN")


def _shape_cell(row: CompareRow) -> str:
    return "NaN" if row.shape is None else "[" + ",".join(map(str, row.shape)) + "]"


def _columns(metrics, npu_address: bool, golden_address: bool, op_sequence: bool, overflow: bool) -> list:
    """(header name, cell of a CompareRow) in msaccucmp's column order."""
    columns = [("Index", lambda row: str(row.index))]
    if op_sequence:
        columns.append(("OpSequence", _extra("OpSequence")))
    columns += [("OpType", lambda row: row.op_type), ("NPUDump", lambda row: row.npu_op),
                ("DataType", _extra("NPUDataType"))]
    if npu_address:
        columns.append(("Address", _extra("NPUAddress")))
    columns += [("GroundTruth", lambda row: ",".join(row.golden_ops) or "*"),
                ("DataType", _extra("GroundTruthDataType"))]
    if golden_address:
        columns.append(("Address", _extra("GroundTruthAddress")))
    columns += [("TensorIndex", lambda row: row.tensor), ("Shape", _shape_cell)]
    if overflow:
        columns.append(("OverFlow", _extra("OverFlow")))
    for name in metrics:
        if name == STD_COLUMN:
            columns.append((name, lambda row: "NaN" if row.std is None else row.std))
        else:
            columns.append((name, lambda row, name=name: row.texts.get(name) or _metric_cell(row.metrics.get(name))))
    columns.append(("CompareFailReason", lambda row: row.fail_reason))
    return columns


def write_compare_csv(path: str | os.PathLike, rows: list[CompareRow], *,
                      metrics: tuple[str, ...] | list[str] = DEFAULT_METRICS,
                      npu_address: bool = True, golden_address: bool = False,
                      op_sequence: bool = False, overflow: bool = False) -> None:
    """Write rows in the vendor's layout, columns in msaccucmp's order.

    The golden ``Address`` column is left out by default (goldens are ``.npy``, as msaccucmp
    does); ``op_sequence``/``overflow`` add ``OpSequence``/``OverFlow``. Metric cells are
    ``'%.6f'`` (nan/inf as numpy prints them) or ``NaN`` when a row has no value; descriptive
    cells a row lacks (``extra``) are ``NaN``.
    """
    columns = _columns(metrics, npu_address, golden_address, op_sequence, overflow)

    def write(handle) -> None:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow([name for name, _ in columns])
        writer.writerows(csv_row([cell(row) for _, cell in columns]) for row in rows)   # no formulas

    write_atomic(path, write)


def write_compare_cells(path: str | os.PathLike, lines, *, golden_address: bool = False) -> None:
    """As :func:`write_compare_csv` with the default columns (NPU address, no OpSequence or
    OverFlow), for rows given as their cells already (strings, through ``safe_text.csv_row``):
    a caller whose rows share most cells formats them once (``vc``'s CSV)."""
    header = [name for name, _ in _columns(DEFAULT_METRICS, True, golden_address, False, False)]

    def write(handle) -> None:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(lines)

    write_atomic(path, write)


def _same_value(x: float | None, y: float | None) -> bool:
    return x == y or (isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y))


def rows_equal(a: CompareRow, b: CompareRow) -> bool:
    """Row equality in which NaN metrics are equal (dataclass == says nan != nan)."""
    return (a.metrics.keys() == b.metrics.keys()
            and all(_same_value(a.metrics[k], b.metrics[k]) for k in a.metrics)
            and {**vars(a), "metrics": None} == {**vars(b), "metrics": None})
