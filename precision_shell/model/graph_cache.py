"""The op graph and its decoded op details as start-up cache entries (plain data, cache_codec.py).

``GRAPH``: an :class:`OpGraph`'s summaries, warnings, text readers and rows (see
``OpGraph.cache_state``), one JSON value per row field (strings as lists, integers packed by
``cache_codec.packed``). Op names appear once: inputs and control
edges name their producer by its row position, repeated values (types, engines, pass lists,
graph names) are kept once in a table. ``GRAPH_DETAILS``: ``OpGraph.detail_rows()``, the op
details decoded in earlier runs, with each distinct tensor descriptor once.

Decoding checks every column (cache_codec.py) and only then builds anything; the rows themselves
are made when first needed (``OpGraph.from_cache_state``), from columns already checked.
"""

from __future__ import annotations

import base64
import os
from operator import le

from precision_shell.formats.graph_scan import OpTextReader
from precision_shell.model.cache_codec import (CacheKind, EntryError, counts, cut, fields, from_table, ints, need,
                                               packed, strings, to_table, unpacked)
from precision_shell.model.op_attrs import LazyAttrs, TensorDesc, valid_serialized_attrs
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
def _encode_graph(graph: OpGraph) -> dict:
    graphs, warnings, readers, rows = graph.cache_state()
    position = {row[4]: i for i, row in enumerate(rows)}  # KeyError: a producer not in the graph
    refs = [ref for row in rows for ref in row[5]]
    descs = _DescTable()
    col: dict = {"name": [row[0] for row in rows], "order": packed([row[3] for row in rows]),
                 "key": [[i, row[4]] for i, row in enumerate(rows) if row[4] != row[0]],
                 "inputs": packed([len(row[5]) for row in rows]),
                 "input_op": packed([-1 if p is None else position[p] for p, _, _ in refs]),
                 "input_output": packed([-1 if o is None else o for _, o, _ in refs]),
                 "input_raw": [[j, raw] for j, (_, _, raw) in enumerate(refs) if raw is not None],
                 "control": packed([len(row[6]) for row in rows]),
                 "control_op": packed([position[key] for row in rows for key in row[6]]),
                 "originals": packed([-1 if row[7] is None else len(row[7]) for row in rows]),
                 "original_names": [n for row in rows if row[7] is not None for n in row[7]],
                 "kernel": [row[9] for row in rows]}
    col["type"], col["types"] = to_table(row[1] for row in rows)
    col["graph"], col["graph_names"] = to_table(row[2] for row in rows)
    col["engine"], col["engines"] = to_table(row[10] for row in rows)
    col["passes"], pass_lists = to_table(tuple(row[8]) for row in rows)
    col["pass_lists"] = [list(p) for p in pass_lists]
    reader_of = {id(r): i for i, r in enumerate(readers)}
    spans, details = [], []
    for i, row in enumerate(rows):
        source = row[11]
        if type(source) is list:  # the holder [details, reader, start, end] of a graph built here
            source = (reader_of[id(source[1])], source[2], source[3]) if source[1] is not None else source[0]
        if isinstance(source, OpDetails):  # from a parsed file: no text span to read them from
            attrs = None if source.attrs is None else base64.b64encode(source.attrs.serialized()).decode()
            details.append([i, source.id, source.stream_id, descs.refs(source.outputs),
                            descs.refs(source.input_descs), attrs])
            source = (-1, 0, 0)
        spans.append(source)
    col["reader"], col["start"], col["end"] = (packed(c) for c in (zip(*spans) if spans else ((), (), ())))
    col["details"], col["descs"] = details, descs.encoded()
    return {"graphs": [[g.name, g.source, g.ops, g.fused_ops, g.passes] for g in graphs], "warnings": warnings,
            # resolved paths: the entry is keyed by resolved paths, and a relative one would not
            # match the key when pshell starts from another folder (the same workspace, reused)
            "readers": [[os.path.realpath(r.path), r.stamp[0], r.stamp[1]] for r in readers], "ops": col}


def _decode_graph(value, key: tuple) -> OpGraph:
    """``key``: (path, size, mtime) of each graph file (load_cache.file_key)."""
    graphs, warnings, readers, col = fields(value, "graph", ("graphs", "warnings", "readers", "ops"))
    summaries = [_summary(g) for g in _list(graphs, "graphs")]
    strings(warnings, "warnings")
    readers = [_reader(r, key) for r in _list(readers, "readers")]
    col = dict(zip(_OPS, fields(col, "ops", _OPS)))
    names = strings(col["name"], "name")
    n = len(names)
    need(n < MAX_OPS, "name: too many ops")
    need(sum(g.ops for g in summaries) == n, "graphs: op counts do not add up")
    keys = list(names)
    for item in _list(col["key"], "key"):
        need(type(item) is list and len(item) == 2 and type(item[1]) is str, "key: not [row, key]")
        keys[ints(item[:1], "key", 1, 0, n)[0]] = item[1]
    need(len(set(keys)) == n, "key: keys repeat")
    types = from_table(col["type"], strings(col["types"], "types"), "type", n)
    graph_names = from_table(col["graph"], strings(col["graph_names"], "graph_names"), "graph", n)
    order = unpacked(col["order"], "order", n, None)
    input_counts, input_ops, input_outputs, input_raw = _inputs(col, n)
    control_ops = unpacked(col["control_op"], "control_op", hi=n)
    control_counts = counts(col["control"], "control", n, len(control_ops))
    original_names = strings(col["original_names"], "original_names")
    original_counts = counts(col["originals"], "originals", n, len(original_names), nullable=True)
    pass_lists = [strings(p, "pass_lists") for p in _list(col["pass_lists"], "pass_lists")]
    passes = from_table(col["passes"], pass_lists, "passes", n)
    strings(col["kernel"], "kernel", n, nullable=True)
    engines = from_table(col["engine"], strings(col["engines"], "engines", nullable=True), "engine", n)
    sources = _sources(col, n, readers)

    def make_rows() -> list:  # from the columns checked above: cannot fail
        no_control: list[str] = []  # shared by every op without control inputs (never mutated)
        control = [[keys[p] for p in c] if c else no_control for c in cut(control_counts, control_ops)]
        refs = [(keys[p], o, raw) if p >= 0 else (None, None, raw)
                for p, o, raw in zip(input_ops, input_outputs, input_raw)]
        return list(zip(names, types, graph_names, order, keys, cut(input_counts, refs), control,
                        cut(original_counts, original_names), passes, col["kernel"], engines, sources))

    return OpGraph.from_cache_state(summaries, warnings, readers, make_rows)


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


def _inputs(col: dict, n: int) -> tuple[list, list, list, list]:
    """Inputs per op; per input of every op in turn: producer position (-1: unresolved), output
    (-1: none), raw text (None: it is "producer:output")."""
    ops = unpacked(col["input_op"], "input_op", lo=-1, hi=n)
    outputs = unpacked(col["input_output"], "input_output", len(ops), -1)  # -1: none (unresolved)
    per_op = counts(col["inputs"], "inputs", n, len(ops))
    raw = [None] * len(ops)
    for item in _list(col["input_raw"], "input_raw"):
        need(type(item) is list and len(item) == 2 and type(item[1]) is str, "input_raw: not [input, raw]")
        raw[ints(item[:1], "input_raw", 1, 0, len(ops))[0]] = item[1]
    if -1 in ops:  # an unresolved input is known by its raw text only
        need(all(raw[j] is not None for j, p in enumerate(ops) if p < 0), "input_raw: an unresolved input without text")
    if -1 in outputs:
        need(all(ops[j] < 0 for j, o in enumerate(outputs) if o < 0), "input_output: a producer without output")
    return per_op, ops, outputs, raw


def _sources(col: dict, n: int, readers: list[OpTextReader]) -> list:
    """Per op (reader index, start, end) of its text span, or its OpDetails."""
    reader = unpacked(col["reader"], "reader", n, -1, len(readers))
    start, end = unpacked(col["start"], "start", n), unpacked(col["end"], "end", n, None)  # end >= start below
    limits = [r.stamp[0] for r in readers] + [0]  # [-1]: ops with details have no span
    need(all(map(le, start, end)) and all(map(le, end, map(limits.__getitem__, reader))),
         "start, end: a span outside its file")
    sources = list(zip(reader, start, end))
    details = _list(col["details"], "details")
    need(len(details) == reader.count(-1), "details: not one per op without a text span")
    table = _descs(col["descs"])
    blobs = []
    for item in details:
        need(type(item) is list and len(item) == 6, "details: an item is not 6 fields")
        i, op_id, stream_id, outputs, input_descs, attrs = item
        ints([i], "details: row", 1, 0, n)
        ints([op_id, stream_id], "details: id, stream_id", lo=_INT64)
        need(reader[i] == -1 and type(sources[i]) is tuple, "details: an op with a text span, or twice")
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
