"""The statistics of one msprobe ``dump.json`` as columns: one row per leaf, in msprobe's compare
order, as numpy arrays and small text tables -- no :class:`Leaf` or pairing ``Row`` object per row.

A 100k-entry statistics pair has 300k rows a side; a Leaf and a Row each (600k objects per
side) cost ~3 s and most of the memory of a statistics ``vc`` (issue 31). :func:`stats_columns`
walks a rank's entries once: a leaf that is a plain float tensor with four finite float
statistics and no file (nearly every leaf) is read straight from its JSON object into the
columns; any other leaf (None, a plain value, an integer or bool tensor, NaN/Inf or missing
statistics, a data_name) is built as the Leaf the row path builds and its texts are taken from
that Leaf (:func:`stat_texts`, :func:`shape_text`, :func:`dtype_text`), so both paths print the
same cells. :func:`encode` / :func:`decode` move the columns between processes as raw array
bytes and a JSON header (data, never pickled objects). A statistics dump.json read by the C
scanner (:mod:`.scan`) has its columns made while it is read, into the same builder
(:func:`rank_columns` returns those).
"""

from __future__ import annotations

import json
import math
import os
import struct
from array import array
from dataclasses import dataclass, field

import numpy as np

from .leaves import Leaf, leaf_nodes, leaf_of
from .layout import normalize_dtype
from .name_column import NameColumn, as_names

N_A = "N/A"
GRAD_TEXTS = (N_A, "True", "False")          # grad codes: requires_grad None, True, False
NONE_LEAF, TENSOR, PLAIN = 0, 1, 2           # kind codes
_STATE_ORDER = {"input": 0, "parameters": 1, "output": 2}    # msprobe's reorder_index; grads: 3
_ARRAYS = (("row_entry", np.int32), ("kind", np.int8), ("dtype", np.int32), ("dtype_text", np.int32),
           ("shape", np.int32), ("grad", np.int8), ("simple", np.bool_))


@dataclass
class StatsColumns:
    """Rows of one ``dump.json``. Text columns are codes into :attr:`texts`."""
    entry_names: list[str]
    names: NameColumn                # msprobe's row name (its tensor file's stem, or ENTRY.PATH)
    row_entry: np.ndarray            # int32: the row's entry (index into entry_names)
    kind: np.ndarray                 # int8: NONE_LEAF | TENSOR | PLAIN
    dtype: np.ndarray                # int32: the normalized dtype name ("" when unknown)
    dtype_text: np.ndarray           # int32: msprobe's dtype text (pairing's Row.dtype)
    shape: np.ndarray                # int32: the shape cell
    grad: np.ndarray                 # int8: GRAD_TEXTS index
    simple: np.ndarray               # bool: a float tensor with four finite statistics
    stats: np.ndarray                # (n, 4) float64 Max/Min/Mean/Norm of simple rows (NaN else)
    texts: list[str]
    cells: dict[int, tuple[str, str, str, str]] = field(default_factory=dict)  # other rows' stat texts
    values: dict[int, tuple] = field(default_factory=dict)     # other rows' Leaf max/min/mean/norm
    # per row, "\n"-terminated: its Max,Min,Mean,Norm JSON texts joined by "," when each is what
    # repr() prints (the CSV copies them), else "" -- made by the C scanner; None: not known.
    # ASCII bytes (a str copy of ~22 MB a side at 100k entries is made a chunk at a time)
    summary: bytes | None = None
    summary_end: np.ndarray | None = None      # int64: where each row's line ends (its "\n")

    def statistics(self, row: int) -> tuple:
        """(max, min, mean, norm) of a row as its Leaf has them (floats, or None)."""
        found = self.values.get(row)
        return found if found is not None else tuple(self.stats[row].tolist())

    def __len__(self) -> int:
        return len(self.names)

    def summary_slice(self, lo: int, hi: int) -> list[str] | None:
        """The summary texts of rows ``lo:hi`` ("" for a row without), or None."""
        if self.summary is None or hi <= lo:
            return None
        start = int(self.summary_end[lo - 1]) + 1 if lo else 0
        return self.summary[start:int(self.summary_end[hi - 1])].decode("ascii").split("\n")

    def summary_rows(self, rows: np.ndarray) -> list[str] | None:
        """The summary texts of the rows ``rows`` (any order), or None."""
        if self.summary is None:
            return None
        if len(rows) and rows[0] >= 0 and np.array_equal(rows, np.arange(rows[0], rows[0] + len(rows))):
            return self.summary_slice(int(rows[0]), int(rows[0]) + len(rows))     # a run: one decode
        ends = self.summary_end[rows]
        starts = np.where(rows > 0, self.summary_end[rows - 1] + 1, 0)
        text = self.summary
        return [text[a:b].decode("ascii") for a, b in zip(starts.tolist(), ends.tolist())]


def _summary_ends(blob: bytes | memoryview, rows: int) -> np.ndarray | None:
    ends = np.flatnonzero(np.frombuffer(blob, dtype=np.uint8) == 10)
    return ends if len(ends) == rows else None


def dtype_text(leaf: Leaf) -> str:
    """msprobe's dtype text of a row: the dumped dtype string, or the type of a plain value."""
    if leaf.is_tensor:
        return leaf.dtype_raw or leaf.dtype or "None"    # recovered leaves: numpy's name
    if leaf.type is None:
        return "None"
    if leaf.type in ("torch.Size", "slice", "ellipsis", "torch.ProcessGroup"):
        return leaf.type
    return str(type(leaf.value))


def shape_text(leaf: Leaf) -> str:
    """msprobe's shape cell."""
    if leaf.is_tensor:
        return str(list(leaf.shape))
    if leaf.type is None:
        return N_A
    if leaf.type == "torch.Size":
        return str(leaf.value)
    if leaf.type == "slice":
        return str(np.shape(np.array(leaf.value)))
    return "[]"


def plain_float(leaf: Leaf) -> bool:
    """A tensor whose statistics print as ``repr`` of floats."""
    dtype = leaf.dtype
    return leaf.is_tensor and dtype != "bool" and not (dtype or "").startswith(("int", "uint"))


def stat_text(leaf: Leaf, which: str) -> str:
    """msprobe's text for one of Max/Min/Mean/Norm of a row (``NPU max`` etc.)."""
    if not leaf.is_tensor:
        value = leaf.value
        if leaf.type is None:
            return "None"
        return str(value) if not isinstance(value, float) else repr(value)
    value = getattr(leaf, "norm" if which == "l2norm" else which)
    if value is None:
        return "None"
    value = float(value)
    if not math.isfinite(value):     # NaN/Inf in dump.json, even on an integer leaf: a value
        return repr(value)
    if leaf.dtype == "bool":
        return str(bool(value))
    if leaf.dtype and leaf.dtype.startswith(("int", "uint")) and value == int(value):
        return str(int(value))
    return repr(value)


def stat_texts(leaf: Leaf) -> tuple[str, str, str, str]:
    if plain_float(leaf):
        return tuple("None" if v is None else repr(v) for v in (leaf.max, leaf.min, leaf.mean, leaf.norm))
    return tuple(stat_text(leaf, which) for which in ("max", "min", "mean", "l2norm"))


def row_name(entry: str, leaf: Leaf) -> str:
    """msprobe's row name of a leaf: its tensor file's stem when it has one (msprobe's
    ``gen_op_item`` names rows after ``data_name``), else ``ENTRY.PATH``."""
    if leaf.data_name:
        return leaf.data_name.rsplit(".", 1)[0]
    return f"{entry}.{leaf.path}"


class _Builder:
    """Rows appended as tuples (row_entry, dtype, dtype_text, shape, grad) and their four
    statistics; rows taken from a Leaf (the odd ones) are patched in at the end."""

    def __init__(self) -> None:
        self.entry_names: list[str] = []
        self.names: list[str] = []
        self.rows = array("i")        # 5 ints a row: row_entry, dtype, dtype_text, shape, grad
        self.stats = array("d")       # 4 floats a row
        self.codes: dict[str, int] = {"": 0}
        self.cells: dict[int, tuple[str, str, str, str]] = {}
        self.odd: dict[int, tuple[int, bool]] = {}         # row -> (kind, simple) of Leaf rows
        self.values: dict[int, tuple] = {}
        self.raw_dtypes: dict[str, tuple[int, int] | None] = {}    # dtype string -> codes, None: not plain
        self.shapes: dict[str, int | None] = {}                    # str(list) -> code, None: not a shape
        self.summary: bytes | None = None    # the C scanner's (StatsColumns.summary)

    def code(self, text: str) -> int:
        found = self.codes.get(text)
        if found is None:
            found = self.codes[text] = len(self.codes)
        return found

    def add_entry(self, name: str, kind: str, sources, tensor_dir: str) -> None:
        """``sources``: (path, JSON object, None, or built Leaf) of the entry's leaves in dump order."""
        at = len(self.entry_names)
        self.entry_names.append(name)
        if kind != "parameters_grad":
            states = [_STATE_ORDER.get(path.partition(".")[0], 0) for path, _ in sources]
            if states != sorted(states):
                sources = [sources[i] for i in sorted(range(len(sources)), key=states.__getitem__)]
        names, rows, stats = self.names, self.rows, self.stats
        raw_dtypes, shapes = self.raw_dtypes, self.shapes
        for path, node in sources:
            if type(node) is dict and "value" not in node and "data_name" not in node:
                raw, shape = node.get("dtype"), node.get("shape")
                high, low, mean, norm = node.get("Max"), node.get("Min"), node.get("Mean"), node.get("Norm")
                if type(raw) is str and type(shape) is list and type(high) is float and type(low) is float \
                        and type(mean) is float and type(norm) is float \
                        and high - high == 0 and low - low == 0 and mean - mean == 0 and norm - norm == 0:
                    dtype_codes = raw_dtypes.get(raw, False)
                    if dtype_codes is False:
                        dtype_codes = raw_dtypes[raw] = self._dtype_codes(raw)
                    text = str(shape)
                    shape_code = shapes.get(text, False)
                    if shape_code is False:
                        shape_code = shapes[text] = self._shape_code(shape, text)
                    if dtype_codes is not None and shape_code is not None:
                        rg = node.get("requires_grad")
                        names.append(f"{name}.{path}")
                        rows.extend((at, *dtype_codes, shape_code, 1 if rg is True else 2 if rg is False else 0))
                        stats.extend((high, low, mean, norm))
                        continue
            leaf = node if isinstance(node, Leaf) else Leaf(path, None) if node is None else \
                leaf_of(node, path, tensor_dir)
            self._add_leaf(name, at, leaf)

    def _dtype_codes(self, raw: str) -> tuple[int, int] | None:
        """(normalized, text) codes of a dtype string of a plain float tensor; None otherwise."""
        dtype = normalize_dtype(raw)
        if dtype == "bool" or (dtype or "").startswith(("int", "uint")):
            return None
        return self.code(dtype or ""), self.code(raw or dtype or "None")

    def _scan_dtype_codes(self, raw: str) -> tuple[int, int] | None:
        """:meth:`_dtype_codes` for the C scanner, None also for a dtype the reader warns about
        (unknown): such an entry is read by the reader's checks, not the scanner."""
        return None if normalize_dtype(raw) is None else self._dtype_codes(raw)

    def _shape_code(self, shape: list, text: str) -> int | None:
        if len(shape) > 64 or any(type(d) is not int or d < 0 for d in shape):
            return None
        return self.code(text)

    def _add_leaf(self, entry: str, at: int, leaf: Leaf) -> None:
        row = len(self.names)
        self.names.append(row_name(entry, leaf))
        rg = leaf.requires_grad
        self.rows.extend((at, self.code(leaf.dtype or "") if leaf.is_tensor else 0, self.code(dtype_text(leaf)),
                          self.code(shape_text(leaf)), 0 if rg is None else 1 if rg else 2))
        values = (leaf.max, leaf.min, leaf.mean, leaf.norm)
        simple = plain_float(leaf) and all(v is not None and math.isfinite(v) for v in values)
        self.odd[row] = (NONE_LEAF if leaf.type is None else TENSOR if leaf.is_tensor else PLAIN, simple)
        self.values[row] = values
        if simple:
            self.stats.extend(values)
        else:
            self.stats.extend((math.nan,) * 4)
            self.cells[row] = stat_texts(leaf)

    def finish(self) -> StatsColumns:
        n = len(self.names)
        table = np.frombuffer(self.rows, dtype=np.int32).reshape(n, 5)
        kind, simple = np.full(n, TENSOR, dtype=np.int8), np.ones(n, dtype=bool)
        for row, (k, ok) in self.odd.items():
            kind[row], simple[row] = k, ok
        stats = np.frombuffer(self.stats, dtype=float).reshape(-1, 4).copy()
        ends = None if self.summary is None else _summary_ends(self.summary, n)
        names, self.names = NameColumn.of(self.names), []
        return StatsColumns(self.entry_names, names, row_entry=table[:, 0].copy(), kind=kind,
                            dtype=table[:, 1].copy(), dtype_text=table[:, 2].copy(), shape=table[:, 3].copy(),
                            grad=table[:, 4].astype(np.int8), simple=simple, stats=stats,
                            texts=list(self.codes), cells=self.cells, values=self.values,
                            summary=None if ends is None else self.summary, summary_end=ends)


def stats_columns(entries) -> StatsColumns:
    """The columns of a rank's entries (:class:`.dump.Entry`), in dump order."""
    builder = _Builder()
    for entry in entries:
        builder.add_entry(entry.name, entry.kind, entry.leaf_sources(), entry.tensor_dir)
    return builder.finish()


try:
    from . import _stats_scan as _scanner
except ImportError:     # not built (optional extension): the Python builder, same columns
    _scanner = None


def scanner_usable() -> bool:
    return _scanner is not None and os.environ.get("PSHELL_NO_EXT") != "1"


def rank_columns(rank) -> StatsColumns:
    """The columns of a :class:`.dump.RankDump`: those the C scanner made while reading
    its dump.json (:mod:`.scan`), else :func:`stats_columns` of its entries."""
    if rank.columns is not None:
        return rank.columns
    return stats_columns(rank.entries)


# --- between processes: a JSON header and raw array bytes ----------------------------------------

_LENGTH = struct.Struct("<Q")


def encode(columns: StatsColumns) -> list[bytes]:
    """The byte chunks of ``columns`` (:func:`decode` reads them back)."""
    names = as_names(columns.names)
    entries = "\x00".join(columns.entry_names)
    nul = "\x00" in entries
    arrays = [np.ascontiguousarray(getattr(columns, name), dtype=dtype) for name, dtype in _ARRAYS]
    arrays.append(np.ascontiguousarray(columns.stats, dtype="<f8"))
    header = {"rows": len(columns.names), "entries": len(columns.entry_names), "texts": columns.texts,
              "cells": [[row, *texts] for row, texts in columns.cells.items()],
              "values": [[row, *values] for row, values in columns.values.items()]}
    if nul:      # an entry name holding NUL: the entry names go in the header as JSON strings instead
        header["entry_names"] = columns.entry_names
        blobs = [names.blob, b""]
    else:
        blobs = [names.blob, entries.encode("utf-8", "surrogatepass")]
    blobs.append(np.ascontiguousarray(names.off, dtype="<i8").tobytes())
    blobs += [a.tobytes() for a in arrays]
    if columns.summary is not None:
        header["summary"] = True
        blobs.append(columns.summary)
    header["sizes"] = [len(b) for b in blobs]
    head = json.dumps(header).encode()
    return [_LENGTH.pack(len(head)), head, *blobs]


def decode(data: bytes | memoryview) -> StatsColumns:
    """The columns :func:`encode` wrote; ValueError when the bytes are not such a message."""
    view = memoryview(data)
    if len(view) < _LENGTH.size:
        raise ValueError("no header")
    (size,), at = _LENGTH.unpack_from(view), _LENGTH.size
    header = json.loads(bytes(view[at:at + size]))
    at += size
    blobs = []
    for length in header["sizes"]:
        if at + length > len(view):
            raise ValueError("cut short")
        blobs.append(view[at:at + length])
        at += length
    rows, count = header["rows"], header["entries"]
    if "entry_names" in header:
        entry_names = header["entry_names"]
    else:
        entry_names = str(blobs[1], "utf-8", "surrogatepass").split("\x00") if count else []
    off = np.frombuffer(blobs[2], dtype="<i8").astype(np.int64)
    if len(off) != rows + 1 or (rows and (off[0] != 0 or off[-1] != len(blobs[0]) or np.any(np.diff(off) < 0))):
        raise ValueError("name offsets disagree")
    names = NameColumn(bytes(blobs[0]), off)
    arrays = {name: np.frombuffer(blob, dtype=dtype).copy() for (name, dtype), blob in zip(_ARRAYS, blobs[3:])}
    summary = ends = None
    if header.get("summary"):
        summary_blob, blobs = blobs[-1], blobs[:-1]
        ends = _summary_ends(summary_blob, rows)
        if ends is None:
            raise ValueError("summary rows disagree")
        summary = bytes(summary_blob)
        if not summary.isascii():
            raise ValueError("summary not ASCII")
    stats = np.frombuffer(blobs[-1], dtype="<f8").astype(float).reshape(-1, 4)
    if len(names) != rows or len(entry_names) != count or any(len(a) != rows for a in arrays.values()) \
            or len(stats) != rows:
        raise ValueError("row counts disagree")
    cells = {int(row): tuple(texts) for row, *texts in header["cells"]}
    values = {int(row): tuple(v) for row, *v in header["values"]}
    return StatsColumns(entry_names, names, stats=stats, texts=header["texts"], cells=cells, values=values,
                        summary=summary, summary_end=ends, **arrays)
