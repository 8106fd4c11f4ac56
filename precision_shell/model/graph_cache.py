"""The op graph and its decoded op details as start-up cache entries (plain data, cache_codec.py).

``GRAPH``: an :class:`OpGraph`'s summaries, warnings, text readers and op columns (see
``OpGraph.cache_state``, op_columns.py): each array column as base64 of its raw bytes (read back
with ``memoryview.cast``, no pickle, no number parsed), names in UTF-8 blobs with offsets, inputs
and control edges by producer row, repeated values (types, engines, pass lists, graph names) once
in a table. ``GRAPH_DETAILS``: ``OpGraph.detail_rows()``, the op
details decoded in earlier runs, with each distinct tensor descriptor once.

Decoding checks every column (lengths, ranges, offsets, UTF-8) and only then builds the graph;
an op's node is made when first asked for (op_map.py).
"""

from __future__ import annotations

import base64
import os
from operator import le
from typing import NamedTuple

from precision_shell.formats.graph.columns import pack_ints, unpack_ints
from precision_shell.formats.graph.scan import OpTextReader
from precision_shell.model.cache_codec import (Attached, CacheKind, EntryError, counts, cut, fields, from_table, ints, need,
                                               packed, strings, unpacked)
from precision_shell.model.op_attrs import LazyAttrs, TensorDesc, valid_serialized_attrs
from precision_shell.model.op_columns import OpColumns, StrColumn
from precision_shell.model.op_graph import GraphSummary, OpGraph
from precision_shell.model.op_node import OpDetails

__all__ = ["GRAPH", "GRAPH_DETAILS"]

_INT64 = -(1 << 63)  # lower bound of protobuf int64 fields (id, stream_id, dims)
_STR_OR_NONE, _INT_OR_NONE = {str, type(None)}, {int, type(None)}
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
    # checked a field at a time over all items (a vc's start reads ~10^3-10^5 of them): the same
    # checks and messages as item by item, without ~10 Python calls an item
    need(type(value) is list, "descs: not a list")
    need(all(type(item) is list and len(item) == 9 for item in value), "descs: an item is not 9 fields")
    if not value:
        return []
    index, name, dtype, layout, shape, origin_format, origin_shape, origin_name, origin_index = zip(*value)
    need(set(map(type, name + dtype + layout)) == {str}, "descs: name, dtype or layout not a string")
    need(set(map(type, origin_format)) <= _STR_OR_NONE, "descs: origin_format not a string")
    need(set(map(type, origin_name)) <= _STR_OR_NONE, "descs: origin_name not a string")
    need(set(map(type, origin_index)) <= _INT_OR_NONE, "descs: origin_output_index not an integer")
    need(set(map(type, shape)) == {list}, "descs: shape: not a list")
    ints([d for dims in shape for d in dims], "descs: shape", lo=_INT64)
    origins = [dims for dims in origin_shape if dims is not None]
    need(set(map(type, origins)) <= {list}, "descs: origin_shape: not a list")
    ints([d for dims in origins for d in dims], "descs: origin_shape", lo=_INT64)
    ints(list(index) + [i for i in origin_index if i is not None], "descs: index", lo=_INT64)
    return [TensorDesc(*item[:4], tuple(item[4]), item[5], None if item[6] is None else tuple(item[6]), *item[7:])
            for item in value]


def _desc_lists(sizes, flat, table: list[TensorDesc], what: str, length: int) -> list[list[TensorDesc]]:
    descs = from_table(flat, table, what)
    return cut(counts(sizes, what, length, len(descs)), descs)


# ---- GRAPH ------------------------------------------------------------------------------------------
# Each int column is attached raw (cache_codec.Attached): the narrowest little-endian ints of its
# values or, when narrower, of its differences ("d": offsets and spans take a byte or two an op);
# read back by the kernel's ``unpack`` (graph_columns.unpack_ints: numpy without it) into int64
# ("q") or int32 ("i") memoryviews. Strings are UTF-8 blobs with offsets, flags bytes of 0/1,
# small tables JSON lists.
_INTS = {"name_off": 8, "type_id": 4, "graph_id": 4, "order": 8, "in_off": 8, "in_op": 4, "in_out": 8,
         "ctl_off": 8, "ctl_op": 4, "orig_off": 8, "orig_item_off": 8, "pass_id": 4, "kernel_off": 8,
         "engine_id": 4, "src_reader": 4, "src_start": 8, "src_end": 8}
_FLAGS = ("orig_present", "kernel_present")
_BLOBS = ("names", "orig_blob", "kernel_blob")
_TABLES = ("types", "graph_names", "engines", "pass_lists", "key", "input_raw", "details", "descs")
_OPS = tuple(_INTS) + _FLAGS + _BLOBS + _TABLES


def _attached(raw: bytes, blobs: list) -> int:
    blobs.append(bytes(raw))
    return len(blobs) - 1


def _packed_column(values, blobs: list) -> str:
    """``"i{1,2,4,8}:{blob}"`` or ``"di...:{blob}"`` (differences) of an int column."""
    delta, size, raw = pack_ints(values)
    return f"{'d' if delta else ''}i{size}:{_attached(raw, blobs)}"


def _encode_graph(graph: OpGraph) -> Attached:
    graphs, warnings, readers, c = graph.cache_state()
    if c.in_out_big:
        raise OverflowError("an output index beyond int64")  # such a graph stays uncached
    blobs: list = []
    ints = {"name_off": c.names.off, "type_id": c.type_id, "graph_id": c.graph_id, "order": c.order,
            "in_off": c.in_off, "in_op": c.in_op, "in_out": c.in_out, "ctl_off": c.ctl_off, "ctl_op": c.ctl_op,
            "orig_off": c.orig_off, "orig_item_off": c.originals.off, "pass_id": c.pass_id,
            "kernel_off": c.kernels.off, "engine_id": c.engine_id, "src_reader": c.src_reader,
            "src_start": c.src_start, "src_end": c.src_end}
    col: dict = {name: _packed_column(ints[name], blobs) for name in _INTS}
    col.update({"orig_present": _attached(c.orig_present, blobs), "kernel_present": _attached(c.kernel_present, blobs),
                "names": _attached(c.names.blob, blobs), "orig_blob": _attached(c.originals.blob, blobs),
                "kernel_blob": _attached(c.kernels.blob, blobs), "types": c.types, "graph_names": c.graph_names,
                "engines": c.engines, "pass_lists": [list(p) for p in c.pass_lists],
                "key": [[i, k] for i, k in sorted(c.key_override.items())],
                "input_raw": [[j, raw] for j, raw in sorted(c.in_raw.items())]})
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


class _Ints(NamedTuple):
    view: memoryview
    lo: int
    hi: int
    nondecreasing: bool


def _ints(col: dict, name: str, length: int | None, lo: int | None = None, hi: int | None = None) -> _Ints:
    """An int column, ``lo <= v < hi`` (None: unchecked), ``length`` items when given."""
    value = col[name]
    need(type(value) is str and ":" in value, f"{name}: not a packed column")
    code, _, index = value.partition(":")
    delta = code.startswith("d")
    size = code[delta + 1:]
    need(code[delta:delta + 1] == "i" and size in ("1", "2", "4", "8") and index.isascii() and index.isdigit(),
         f"{name}: not a packed column")
    found = unpack_ints(_blob_of(col, name, int(index)), int(size), delta, _INTS[name])
    need(found is not None, f"{name}: value out of range")
    data, vmin, vmax, nondecreasing = found
    view = memoryview(data).cast("q" if _INTS[name] == 8 else "i")
    need(length is None or len(view) == length, f"{name}: {len(view)} items, expected {length}")
    if len(view):
        need((lo is None or vmin >= lo) and (hi is None or vmax < hi), f"{name}: value out of range")
    return _Ints(view, vmin, vmax, nondecreasing)


def _offsets(col: dict, name: str, length: int | None, total: int | None) -> memoryview:
    """Non-decreasing offsets from 0 (to ``total`` when given), ``length + 1`` of them."""
    found = _ints(col, name, None if length is None else length + 1, 0)
    off = found.view
    need(len(off) >= 1 and off[0] == 0 and found.nondecreasing and (total is None or off[-1] == total),
         f"{name}: not offsets")
    return off


def _flags(col: dict, name: str, length: int) -> bytes:
    raw = bytes(_blob_of(col, name, col[name]))
    need(len(raw) == length and not raw.translate(None, b"\x00\x01"), f"{name}: not {length} flags")
    return raw


def _blob(col: dict, name: str) -> bytes:
    raw = bytes(_blob_of(col, name, col[name]))
    try:
        raw.isascii() or raw.decode("utf-8")
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
    type_id = _ints(col, "type_id", None, 0, len(types)).view
    n = len(type_id)
    need(n < MAX_OPS, "name: too many ops")
    need(sum(g.ops for g in summaries) == n, "graphs: op counts do not add up")
    names_raw = _blob(col, "names")
    names = StrColumn(names_raw, _offsets(col, "name_off", n, len(names_raw)))
    key_override = {}
    for item in _list(col["key"], "key"):
        need(type(item) is list and len(item) == 2 and type(item[1]) is str, "key: not [row, key]")
        key_override[ints(item[:1], "key", 1, 0, n)[0]] = item[1]
    in_off = _offsets(col, "in_off", n, None)
    m = in_off[-1]
    in_op = _ints(col, "in_op", m, -1, n)
    in_out = _ints(col, "in_out", m, -1).view
    in_raw = {}
    for item in _list(col["input_raw"], "input_raw"):
        need(type(item) is list and len(item) == 2 and type(item[1]) is str, "input_raw: not [input, raw]")
        in_raw[ints(item[:1], "input_raw", 1, 0, m)[0]] = item[1]
    if in_op.lo < 0:  # an unresolved input is known by its text only
        need(all(j in in_raw for j, p in enumerate(in_op.view) if p < 0), "input_raw: an unresolved input without text")
    ctl_off = _offsets(col, "ctl_off", n, None)
    ctl_op = _ints(col, "ctl_op", ctl_off[-1], 0, n).view
    orig_blob = _blob(col, "orig_blob")
    originals = StrColumn(orig_blob, _offsets(col, "orig_item_off", None, len(orig_blob)))
    orig_off = _offsets(col, "orig_off", n, len(originals))
    kernel_blob = _blob(col, "kernel_blob")
    kernels = StrColumn(kernel_blob, _offsets(col, "kernel_off", n, len(kernel_blob)))
    reader_col = _ints(col, "src_reader", n, -1, len(readers))
    src_reader = reader_col.view
    src_start, src_end = _ints(col, "src_start", n, 0).view, _ints(col, "src_end", n, 0)
    sizes = [r.stamp[0] for r in readers]
    if len(set(sizes)) <= 1:  # every span in a file of that size (ops with details: end 0)
        within = not sizes or src_end.hi <= sizes[0]
    else:
        within = all(e <= (sizes[r] if r >= 0 else 0) for r, e in zip(src_reader, src_end.view))
    need(within and all(map(le, src_start, src_end.view)), "start, end: a span outside its file")
    columns = OpColumns(
        names=names, key_override=key_override, type_id=type_id, types=types,
        graph_id=_ints(col, "graph_id", n, 0, len(graph_names)).view, graph_names=graph_names,
        order=_ints(col, "order", n, 0).view, in_off=in_off, in_op=in_op.view, in_out=in_out, in_raw=in_raw,
        ctl_off=ctl_off, ctl_op=ctl_op, orig_present=_flags(col, "orig_present", n), orig_off=orig_off,
        originals=originals, pass_id=_ints(col, "pass_id", n, 0, len(pass_lists)).view, pass_lists=pass_lists,
        kernel_present=_flags(col, "kernel_present", n), kernels=kernels,
        engine_id=_ints(col, "engine_id", n, -1, len(engines)).view, engines=engines,
        src_reader=src_reader, src_start=src_start, src_end=src_end.view,
        sources=_sources(col, n, src_reader if reader_col.lo < 0 else None))
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


def _sources(col: dict, n: int, src_reader: memoryview | None) -> dict:
    """row -> OpDetails of each op without a text span (from a parsed file); ``src_reader``:
    None when every op has one."""
    details = _list(col["details"], "details")
    without = 0 if src_reader is None else sum(r < 0 for r in src_reader)
    need(len(details) == without, "details: not one per op without a text span")
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
    # (no attrs kept, as for a scanned graph: nothing to check, and protobuf is not imported)
    need(not blobs or valid_serialized_attrs(blobs), "details: attrs are not serialized NamedAttrs")
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
