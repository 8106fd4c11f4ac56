"""The op graph and its decoded op details as start-up cache entries (plain data, cache_codec.py).

``GRAPH``: an :class:`OpGraph`'s summaries, warnings, text readers and op columns (see
``OpGraph.cache_state``, op_columns.py): each array column as base64 of its raw bytes (read back
with ``np.frombuffer``, no pickle, no number parsed), names in UTF-8 blobs with offsets, inputs
and control edges by producer row, repeated values (types, engines, pass lists, graph names) once
in a table. ``GRAPH_DETAILS``: ``OpGraph.detail_rows()``, the op
details decoded in earlier runs, with each distinct tensor descriptor once.

Decoding checks every column (lengths, ranges, offsets, UTF-8) and only then builds the graph;
an op's node is made when first asked for (op_map.py).
"""

from __future__ import annotations

import base64
import os

import numpy as np

from precision_shell.formats.graph_scan import OpTextReader
from precision_shell.model.cache_codec import (Attached, CacheKind, EntryError, counts, cut, fields, from_table, ints, need,
                                               packed, strings, unpacked)
from precision_shell.model.op_attrs import LazyAttrs, TensorDesc, valid_serialized_attrs
from precision_shell.model.op_columns import OpColumns, StrColumn
from precision_shell.model.op_graph import GraphSummary, OpGraph
from precision_shell.model.op_node import OpDetails

__all__ = ["GRAPH", "GRAPH_DETAILS"]

_INT64 = -(1 << 63)  # lower bound of protobuf int64 fields (id, stream_id, dims)
MAX_OPS = 1 << 24  # far beyond any graph; a larger count in an entry is damage, not a graph
_OPS = ("name", "key", "type", "types", "graph", "graph_names", "order", "inputs", "input_op",
        "input_output", "input_raw", "control", "control_op", "originals", "original_names", "passes",
        "pass_lists", "kernel", "engine", "engines", "reader", "start", "end", "details", "descs")


# ---- tensor descriptors: one table per entry, each distinct descriptor once ----------------------
class _DescTable:
    def __init__(self) -> None:
        self.index: dict[TensorDesc, int] = {}

    def refs(self, descs: list[TensorDesc]) -> list[int]:
        index = self.index
        return [index.setdefault(d, len(index)) for d in descs]

    def encoded(self) -> list:
        return [[d.index, d.name, d.dtype, d.layout, list(d.shape), d.origin_format,
                 None if d.origin_shape is None else list(d.origin_shape), d.origin_name,
                 d.origin_output_index] for d in self.index]


def _descs(value) -> list[TensorDesc]:
    need(type(value) is list, "descs: not a list")
    out = []
    for item in value:
        need(type(item) is list and len(item) == 9, "descs: an item is not 9 fields")
        index, name, dtype, layout, shape, origin_format, origin_shape, origin_name, origin_index = item
        need(type(name) is str and type(dtype) is str and type(layout) is str,
             "descs: name, dtype or layout not a string")
        need(origin_format is None or type(origin_format) is str, "descs: origin_format not a string")
        need(origin_name is None or type(origin_name) is str, "descs: origin_name not a string")
        need(origin_index is None or type(origin_index) is int, "descs: origin_output_index not an integer")
        ints(shape, "descs: shape", lo=_INT64)
        if origin_shape is not None:
            origin_shape = tuple(ints(origin_shape, "descs: origin_shape", lo=_INT64))
        ints([index] + ([origin_index] if origin_index is not None else []), "descs: index", lo=_INT64)
        out.append(TensorDesc(index, name, dtype, layout, tuple(shape), origin_format, origin_shape,
                              origin_name, origin_index))
    return out


def _desc_lists(sizes, flat, table: list[TensorDesc], what: str, length: int) -> list[list[TensorDesc]]:
    descs = from_table(flat, table, what)
    return cut(counts(sizes, what, length, len(descs)), descs)


# ---- GRAPH ------------------------------------------------------------------------------------------
# Each column: base64 of its raw little-endian array bytes (np.frombuffer reads it back, no
# number is parsed); strings as one UTF-8 blob with int64 offsets; small tables as JSON lists.
_ARRAYS = {"name_off": "<i8", "type_id": "<i4", "graph_id": "<i4", "order": "<i8", "in_off": "<i8",
           "in_op": "<i4", "in_out": "<i8", "ctl_off": "<i8", "ctl_op": "<i4", "orig_present": "|b1",
           "orig_off": "<i8", "orig_item_off": "<i8", "pass_id": "<i4", "kernel_present": "|b1",
           "kernel_off": "<i8", "engine_id": "<i4", "src_reader": "<i4", "src_start": "<i8", "src_end": "<i8"}
_BLOBS = ("names", "orig_blob", "kernel_blob")
_TABLES = ("types", "graph_names", "engines", "pass_lists", "key", "input_raw", "details", "descs")
_OPS = tuple(_ARRAYS) + _BLOBS + _TABLES


_NARROW = ("<i1", "<i2", "<i4", "<i8")


def _narrowest(values: np.ndarray) -> np.dtype:
    lo, hi = (int(values.min()), int(values.max())) if len(values) else (0, 0)
    return next(np.dtype(t) for t in _NARROW if t == "<i8" or np.iinfo(t).min <= lo and hi <= np.iinfo(t).max)


def _packed_array(array: np.ndarray, blobs: list) -> str:
    """``"{dtype}:{blob}"``: the column as the narrowest ints holding it, in attached blob
    ``blob``; ``"d{dtype}:{blob}"``: its differences, when those are narrower (offsets, spans: a
    byte or two an op instead of 8)."""
    values = array.astype(np.int64)
    diffs = np.diff(values, prepend=0)
    plain, delta = _narrowest(values), _narrowest(diffs)
    prefix, chosen = ("d", diffs.astype(delta)) if delta.itemsize < plain.itemsize else ("", values.astype(plain))
    blobs.append(chosen.tobytes())
    return f"{prefix}{chosen.dtype.str[1:]}:{len(blobs) - 1}"


def _attached(raw: bytes, blobs: list) -> int:
    blobs.append(raw)
    return len(blobs) - 1


def _encode_graph(graph: OpGraph) -> Attached:
    graphs, warnings, readers, c = graph.cache_state()
    blobs: list = []
    col: dict = {"names": _attached(c.names.blob, blobs), "name_off": c.names.off, "type_id": c.type_id, "graph_id": c.graph_id,
                 "order": c.order, "in_off": c.in_off, "in_op": c.in_op, "in_out": c.in_out, "ctl_off": c.ctl_off,
                 "ctl_op": c.ctl_op, "orig_present": c.orig_present, "orig_off": c.orig_off,
                 "orig_blob": _attached(c.originals.blob, blobs), "orig_item_off": c.originals.off, "pass_id": c.pass_id,
                 "kernel_present": c.kernel_present, "kernel_blob": _attached(c.kernels.blob, blobs), "kernel_off": c.kernels.off,
                 "engine_id": c.engine_id, "src_reader": c.src_reader, "src_start": c.src_start, "src_end": c.src_end,
                 "types": c.types, "graph_names": c.graph_names, "engines": c.engines,
                 "pass_lists": [list(p) for p in c.pass_lists], "key": [[i, k] for i, k in sorted(c.key_override.items())],
                 "input_raw": [[j, raw] for j, raw in sorted(c.in_raw.items())]}
    for name, dtype in _ARRAYS.items():
        col[name] = _packed_array(np.asarray(col[name], dtype=dtype), blobs)
    descs = _DescTable()
    details = []
    for i, source in sorted(c.sources.items()):
        if type(source) is list:  # the holder [details, None, 0, 0] of an op of a parsed file
            source = source[0]
        attrs = None if source.attrs is None else base64.b64encode(source.attrs.serialized()).decode()
        details.append([i, source.id, source.stream_id, descs.refs(source.outputs), descs.refs(source.input_descs),
                        attrs])
    col["details"], col["descs"] = details, descs.encoded()
    # sources resolved, as the readers' paths: the entry serves launches from any folder
    return Attached({"graphs": [[g.name, os.path.realpath(g.source), g.ops, g.fused_ops, g.passes] for g in graphs],
                     "warnings": warnings,
                     # resolved paths: the entry is keyed by resolved paths, and a relative one would
                     # not match the key when pshell starts from another folder (the same workspace)
                     "readers": [[os.path.realpath(r.path), r.stamp[0], r.stamp[1]] for r in readers],
                     "ops": col}, blobs)


def _blob_of(col: dict, name: str, index) -> memoryview:
    blobs = col["_blobs"]
    need(type(index) is int and 0 <= index < len(blobs), f"{name}: not an attached blob")
    return blobs[index]


def _array(col: dict, name: str, length: int | None, lo: int | None = None, hi: int | None = None) -> np.ndarray:
    value = col[name]
    need(type(value) is str and ":" in value, f"{name}: not a packed column")
    code, _, index = value.partition(":")
    delta = code.startswith("d")
    need("<" + code[delta:] in _NARROW and index.isdigit() and index.isascii(), f"{name}: not a packed column")
    raw = _blob_of(col, name, int(index))
    stored = np.dtype("<" + code[delta:])
    need(len(raw) % stored.itemsize == 0, f"{name}: not whole items")
    dtype = np.dtype(_ARRAYS[name])
    array = np.frombuffer(raw, dtype=stored)
    if delta:
        with np.errstate(over="ignore"):
            array = np.cumsum(array, dtype=np.int64)
    if dtype.kind == "b":
        need(not len(array) or (int(array.min()) >= 0 and int(array.max()) <= 1), f"{name}: not booleans")
        array = array.astype(bool)
    elif array.dtype != dtype:
        if len(array):
            info = np.iinfo(dtype)
            need(int(array.min()) >= info.min and int(array.max()) <= info.max, f"{name}: value out of range")
        array = array.astype(dtype)
    need(length is None or len(array) == length, f"{name}: {len(array)} items, expected {length}")
    if len(array) and dtype.kind == "i":
        need((lo is None or int(array.min()) >= lo) and (hi is None or int(array.max()) < hi), f"{name}: value out of range")
    return array


def _offsets(col: dict, name: str, length: int, total: int) -> np.ndarray:
    """``length + 1`` non-decreasing offsets from 0 to ``total``."""
    off = _array(col, name, length + 1, 0, total + 1)
    need(off[0] == 0 and off[-1] == total and bool(np.all(off[1:] >= off[:-1])), f"{name}: not offsets")
    return off


def _blob(col: dict, name: str) -> bytes:
    raw = bytes(_blob_of(col, name, col[name]))
    try:
        raw.decode("utf-8")
    except ValueError:
        raise EntryError(f"{name}: not UTF-8") from None
    return raw


def _decode_graph(value, key: tuple) -> OpGraph:
    """``key``: (path, size, mtime) of each graph file (load_cache.file_key)."""
    need(isinstance(value, Attached), "graph: no attached columns")
    value, blobs = value
    graphs, warnings, readers, col = fields(value, "graph", ("graphs", "warnings", "readers", "ops"))
    summaries = [_summary(g) for g in _list(graphs, "graphs")]
    strings(warnings, "warnings")
    readers = [_reader(r, key) for r in _list(readers, "readers")]
    col = dict(zip(_OPS, fields(col, "ops", _OPS)), _blobs=blobs)
    types, graph_names = strings(col["types"], "types"), strings(col["graph_names"], "graph_names")
    engines = strings(col["engines"], "engines")
    pass_lists = [strings(p, "pass_lists") for p in _list(col["pass_lists"], "pass_lists")]
    names_raw = _blob(col, "names")
    type_id = _array(col, "type_id", None, 0, len(types))
    n = len(type_id)
    need(n < MAX_OPS, "name: too many ops")
    need(sum(g.ops for g in summaries) == n, "graphs: op counts do not add up")
    names = StrColumn(names_raw, _offsets(col, "name_off", n, len(names_raw)))
    key_override = {}
    for item in _list(col["key"], "key"):
        need(type(item) is list and len(item) == 2 and type(item[1]) is str, "key: not [row, key]")
        key_override[ints(item[:1], "key", 1, 0, n)[0]] = item[1]
    in_off = _array(col, "in_off", n + 1, 0)
    m = int(in_off[-1]) if n else 0
    in_off = _offsets(col, "in_off", n, m)
    in_op = _array(col, "in_op", m, -1, n)
    in_out = _array(col, "in_out", m, -1)
    need(bool(np.all((in_out >= 0) | (in_op < 0))), "input_output: a producer without output")
    in_raw = {}
    for item in _list(col["input_raw"], "input_raw"):
        need(type(item) is list and len(item) == 2 and type(item[1]) is str, "input_raw: not [input, raw]")
        in_raw[ints(item[:1], "input_raw", 1, 0, m)[0]] = item[1]
    need(all(j in in_raw for j in np.flatnonzero(in_op < 0).tolist()), "input_raw: an unresolved input without text")
    ctl_off = _array(col, "ctl_off", n + 1, 0)
    ctl_off = _offsets(col, "ctl_off", n, int(ctl_off[-1]) if n else 0)
    ctl_op = _array(col, "ctl_op", int(ctl_off[-1]), 0, n)
    orig_blob = _blob(col, "orig_blob")
    orig_item_off = _array(col, "orig_item_off", None, 0)
    originals = StrColumn(orig_blob, _offsets(col, "orig_item_off", len(orig_item_off) - 1, len(orig_blob)))
    orig_off = _offsets(col, "orig_off", n, len(originals))
    kernel_blob = _blob(col, "kernel_blob")
    kernels = StrColumn(kernel_blob, _offsets(col, "kernel_off", n, len(kernel_blob)))
    src_reader = _array(col, "src_reader", n, -1, len(readers))
    src_start, src_end = _array(col, "src_start", n, 0), _array(col, "src_end", n, 0)
    limits = np.array([r.stamp[0] for r in readers] + [0], dtype=np.int64)  # [-1]: ops with details
    need(bool(np.all(src_start <= src_end)) and bool(np.all(src_end <= limits[src_reader])),
         "start, end: a span outside its file")
    columns = OpColumns(
        names=names, key_override=key_override, type_id=type_id, types=types,
        graph_id=_array(col, "graph_id", n, 0, len(graph_names)), graph_names=graph_names,
        order=_array(col, "order", n, 0), in_off=in_off, in_op=in_op, in_out=in_out, in_raw=in_raw,
        ctl_off=ctl_off, ctl_op=ctl_op, orig_present=_array(col, "orig_present", n), orig_off=orig_off,
        originals=originals, pass_id=_array(col, "pass_id", n, 0, len(pass_lists)), pass_lists=pass_lists,
        kernel_present=_array(col, "kernel_present", n), kernels=kernels,
        engine_id=_array(col, "engine_id", n, -1, len(engines)), engines=engines,
        src_reader=src_reader, src_start=src_start, src_end=src_end,
        sources=_sources(col, n, src_reader))
    return OpGraph.from_cache_state(summaries, warnings, readers, columns)


def _list(value, what: str) -> list:
    need(type(value) is list, f"{what}: not a list")
    return value


def _summary(item) -> GraphSummary:
    need(type(item) is list and len(item) == 5, "graphs: an item is not 5 fields")
    name, source, ops, fused, passes = item
    need(type(name) is str and type(source) is str, "graphs: name or source not a string")
    ints([ops, fused], "graphs: counts")
    return GraphSummary(name, source, ops, fused, strings(passes, "graphs: passes"))


def _reader(item, key: tuple) -> OpTextReader:
    """A reader of one of the graph files the entry was made from (ops are read from its spans)."""
    need(type(item) is list and len(item) == 3 and type(item[0]) is str, "readers: an item is not [path, size, mtime]")
    path, size, mtime = item
    need((os.path.realpath(path), size, mtime) in key, "readers: not a graph file of the key")
    return OpTextReader(path, (size, mtime))


def _sources(col: dict, n: int, src_reader: np.ndarray) -> dict:
    """row -> OpDetails of each op without a text span (from a parsed file)."""
    details = _list(col["details"], "details")
    need(len(details) == int(np.count_nonzero(src_reader < 0)), "details: not one per op without a text span")
    table = _descs(col["descs"])
    blobs, sources = [], {}
    for item in details:
        need(type(item) is list and len(item) == 6, "details: an item is not 6 fields")
        i, op_id, stream_id, outputs, input_descs, attrs = item
        ints([i], "details: row", 1, 0, n)
        ints([op_id, stream_id], "details: id, stream_id", lo=_INT64)
        need(src_reader[i] == -1 and i not in sources, "details: an op with a text span, or twice")
        need(attrs is None or type(attrs) is str, "details: attrs not a string")
        if attrs is not None:
            try:
                attrs = base64.b64decode(attrs, validate=True)
            except ValueError:
                raise EntryError("details: attrs not base64") from None
            blobs.append(attrs)
        sources[i] = OpDetails(op_id, stream_id, [table[k] for k in ints(outputs, "details: outputs", hi=len(table))],
                               [table[k] for k in ints(input_descs, "details: inputs", hi=len(table))],
                               None if attrs is None else LazyAttrs(attrs))
    need(valid_serialized_attrs(blobs), "details: attrs are not serialized NamedAttrs")
    return sources


GRAPH = CacheKind("graph", _encode_graph, _decode_graph)


# ---- GRAPH_DETAILS ----------------------------------------------------------------------------------
_DETAILS = ("ops", "rows", "id", "stream_id", "outputs", "output_descs", "inputs", "input_descs", "descs")


def _encode_details(rows: list) -> dict:
    """``rows``: per op None or (id, stream_id, outputs, input_descs) (OpGraph.detail_rows)."""
    present = [(i, row) for i, row in enumerate(rows) if row is not None]
    descs = _DescTable()
    return {"ops": len(rows), "rows": packed([i for i, _ in present]), "id": packed([r[0] for _, r in present]),
            "stream_id": packed([r[1] for _, r in present]), "outputs": packed([len(r[2]) for _, r in present]),
            "output_descs": packed([k for _, r in present for k in descs.refs(r[2])]),
            "inputs": packed([len(r[3]) for _, r in present]),
            "input_descs": packed([k for _, r in present for k in descs.refs(r[3])]), "descs": descs.encoded()}


def _decode_details(value, key: tuple) -> list:
    col = dict(zip(_DETAILS, fields(value, "graph_details", _DETAILS)))
    n = ints([col["ops"]], "ops", hi=MAX_OPS)[0]
    present = unpacked(col["rows"], "rows", hi=n)
    need(all(map(int.__lt__, present, present[1:])), "rows: not in order")
    m = len(present)
    table = _descs(col["descs"])
    outputs = _desc_lists(col["outputs"], col["output_descs"], table, "outputs", m)
    input_descs = _desc_lists(col["inputs"], col["input_descs"], table, "inputs", m)
    rows = [None] * n
    for i, row in zip(present, zip(unpacked(col["id"], "id", m, None), unpacked(col["stream_id"], "stream_id", m, None),
                                   outputs, input_descs)):
        rows[i] = row
    return rows


GRAPH_DETAILS = CacheKind("graph_details", _encode_details, _decode_details)
