"""The in-memory op graph: every op of every GraphDef of the loaded GE models (formats.md §3).

Naming rule: an op is keyed (in ``OpGraph.ops``, as the networkx node, in ``InputRef.producer``
and ``control_inputs``) by its GE name. Names are unique within one GraphDef; when a later graph
holds an op whose name is already taken, that op is keyed ``"{graph name}/{op name}"``
(``OpNode.key``; ``OpNode.name`` stays the real GE name used in dump file names). Inputs are
resolved within the op's own graph first. When the same GraphDef name comes from several files
(one Build dump per compile), the last one given wins (formats.md §3.6 "prefer the highest
counter") and a warning is recorded.

Edges (§3.4): ``OpDef.input`` holds one ``"producer:out"`` per data input anchor in anchor order
(``""`` = unconnected optional input), then ``"producer:-1"`` per control edge; split on the LAST
':'. ``input_desc[i]`` belongs to data anchor i. Bad references never raise: they are recorded in
``OpGraph.warnings`` and the edge is dropped.

The ops are kept as columns (op_columns.py): from the C scan and link directly (graph_load.py),
else from the rows this builder resolves op by op; an ``OpNode`` is made when first asked for.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property, partial

from ..formats.graph.scan import ScannedGraph, special_attrs
from ..formats.quoting import shown
from .op_attrs import TensorDesc
from .op_edges import EdgeView
from .op_columns import OpColumns
from .op_map import OpMap
from .op_node import InputRef, OpDetails, OpNode, details_of
from ..gc_pause import gc_paused

__all__ = ["GraphSummary", "InputRef", "OpGraph", "OpNode", "TensorDesc"]


@dataclass
class GraphSummary:
    name: str
    source: str  # file the graph came from
    ops: int
    fused_ops: int
    passes: list[str]  # distinct fusion pass names, sorted




def _split_input(raw: str) -> tuple[str, int] | None:
    """``"a/b:0"`` -> ("a/b", 0) (split on the LAST ':'); a name without ':' is output 0."""
    name, colon, index = raw.rpartition(":")
    if not colon:
        return raw, 0
    try:
        return name, int(index)
    except ValueError:
        return None


_NO_CONTROL: list[str] = []  # shared by every op without control inputs (never mutated)

# An op record, what both sources give the builder:
# (name, type, raw inputs, original names or None, passes, kernel, engine, detail holder)
OpRecord = tuple


def _graphdef_records(graph, memo: dict) -> Iterable[OpRecord]:
    """Records of a parsed ``GraphDef``: details decoded now, the message is not kept."""
    for op in graph.op:
        original, passes, kernel, engine = special_attrs(op.name, op.attr)
        yield (op.name, op.type, op.input, original, passes, kernel, engine,
               [details_of(op, memo), None, 0, 0])


def _scanned_records(graph: ScannedGraph, reader) -> Iterable[OpRecord]:
    """Records of a scanned graph: details read from the op's text span on first use."""
    for op in graph.ops:
        yield (op.name, op.type, op.inputs, op.original_ops, op.passes, op.kernel, op.engine,
               [None, reader, op.start, op.end])


class OpGraph:
    """Ops of one or more GE models, with data and control edges (``nx``, a MultiDiGraph)."""

    def __init__(self) -> None:
        self._ops: dict[str, OpNode] = {}  # while building: keys in order (placeholders)
        self._column_data: OpColumns | None = None  # the ops (op_columns.py)
        self._column_maker: Callable[[], OpColumns] | None = None  # from the cache: made on first use
        self._rows_lock = threading.Lock()
        self._map: OpMap | None = None
        self._pass_lists: dict[tuple, list[str]] = {}
        self._map_lock = threading.Lock()  # the REPL's completion warm-up thread uses ``ops`` too
        self.graphs: list[GraphSummary] = []
        self.warnings: list[str] = []
        self.readers: list = []  # formats.graph.scan.OpTextReader of each scanned file
        self._sorted_names: list[str] | None = None

    @classmethod
    def from_models(cls, models: list[tuple[str, object]]) -> "OpGraph":
        """Build from ``(source path, ge.proto.ModelDef)`` pairs, in file-counter order."""
        memo: dict = {}  # identical tensor descriptors -> one TensorDesc
        return cls.from_sources([(str(source), graph.name, partial(_graphdef_records, graph, memo))
                                 for source, model in models for graph in model.graph])

    @classmethod
    def from_scans(cls, scans: list[tuple[str, list[ScannedGraph], object]]) -> "OpGraph":
        """Build from ``(source path, scanned graphs, OpTextReader)`` (formats.graph.scan)."""
        return cls.from_sources([(str(source), g.name, partial(_scanned_records, g, reader))
                                 for source, graphs, reader in scans for g in graphs],
                                [reader for _, _, reader in scans])

    @classmethod
    def from_sources(cls, graphs: list[tuple[str, str, Callable[[], Iterable[OpRecord]]]],
                     readers: list | None = None) -> "OpGraph":
        """``(source, graph name, records)`` per GraphDef. When the same GraphDef name comes from
        several files (one Build dump per compile), the last one given wins (formats.md §3.6).
        ``readers``: the OpTextReader of each scanned file the records read details from."""
        self = cls()
        self.readers = list(readers or ())
        latest: dict[str, tuple[str, Callable]] = {}
        for source, name, records in graphs:
            if name in latest:
                self.warnings.append(f"graph {name!r} appears again in {source}: "
                                     f"using it instead of {latest[name][0]}")
                del latest[name]  # re-inserted below: the order of the copy used
            latest[name] = (source, records)
        with gc_paused():
            pending = [self._add_graph(name, source, records()) for name, (source, records) in latest.items()]
            names = {key: record[0] for _, rows in pending for key, _, record in rows}
            out = []
            for graph_name, rows in pending:
                local = {record[0]: key for key, _, record in rows}
                out += [self._row(graph_name, key, order, record, local, names) for key, order, record in rows]
        self._column_data, self._ops = OpColumns.from_rows(out, self.readers), {}  # nodes: OpMap
        return self

    def _add_graph(self, graph_name: str, source: str, records: Iterable[OpRecord]) -> tuple[str, list]:
        """Claim a key for every op of the graph (inputs are linked once all graphs are in)."""
        local: set[str] = set()
        rows = []
        fused, passes = 0, set()
        for order, record in enumerate(records):
            name = record[0]
            if name in local:
                self.warnings.append(f"graph {graph_name!r}: op name {name!r} repeated; keeping the first")
                continue
            local.add(name)
            key = name if name not in self._ops else f"{graph_name}/{name}"
            self._ops[key] = None  # placeholder: keeps the execution order of the dict
            rows.append((key, order, record))
            if record[4] or (record[3] is not None and len(record[3]) > 1):
                fused += 1
            passes.update(record[4])
        self.graphs.append(GraphSummary(name=graph_name, source=source, ops=len(rows), fused_ops=fused,
                                        passes=sorted(passes)))
        return graph_name, rows

    def _row(self, graph_name: str, key: str, order: int, record: OpRecord, local: dict,
             names: dict) -> tuple:
        """The row (see op_columns.py) of ``record`` with its inputs resolved (formats.md §3.4):
        ``OpDef.input`` holds one ``"producer:out"`` per data anchor (``""`` = unconnected optional
        input), then ``"producer:-1"`` per control edge. Inputs resolve within the op's graph
        first. Bad references never raise: they go to ``warnings`` and the edge is dropped."""
        name, op_type, raw_inputs, original, passes, kernel, engine, lazy = record
        inputs: list[tuple] = []
        control: list[str] = []
        for raw in raw_inputs:
            name_, colon, index = raw.rpartition(":")
            if colon and index.isdigit() and index.isascii() and len(index) <= 18:  # "producer:N", fast
                producer = local.get(name_)
                if producer is None and names.get(name_) == name_:
                    producer = name_
                if producer is None:
                    self.warnings.append(f"op {key!r}: input {len(inputs)} from missing op {name_!r}")
                    inputs.append((None, None, raw))
                else:  # raw None: it is "producer:output" (spelled out again in _make_nodes)
                    out = int(index)
                    inputs.append((producer, out, None if producer == name_ and
                                   (index == "0" or index[0] != "0") else raw))
                continue
            parsed = _split_input(raw) if raw else None
            producer = out = None
            if parsed is not None:
                producer = local.get(parsed[0])
                if producer is None and names.get(parsed[0]) == parsed[0]:
                    producer = parsed[0]  # an op of another graph with that exact name
                if parsed[1] == -1:  # control edge
                    if producer is None:
                        self.warnings.append(f"op {key!r}: control input from missing op {parsed[0]!r}")
                    else:
                        control.append(producer)
                    continue
                if parsed[1] < 0:
                    self.warnings.append(f"op {key!r}: cannot read input {shown(raw)}")
                    producer = None
                elif producer is None:
                    self.warnings.append(f"op {key!r}: input {len(inputs)} from missing op {parsed[0]!r}")
                else:
                    out = parsed[1]
            elif raw:
                self.warnings.append(f"op {key!r}: cannot read input {shown(raw)}")
            inputs.append((producer, out, raw))
        return (name, op_type, graph_name, order, key, inputs, control or _NO_CONTROL,
                list(original) if original is not None else None, self._passes_list(passes), kernel,
                engine, lazy)

    def _passes_list(self, passes) -> list[str]:
        """One list object per distinct pass list (most ops share a few; nobody mutates them)."""
        key = tuple(passes)
        found = self._pass_lists.get(key)
        if found is None:
            found = self._pass_lists[key] = list(key)
        return found

    def consumer_edges(self, key: str) -> list[tuple[str, int, int]]:
        """(consumer key, output index, consumer input index) of each data edge out of ``key``."""
        i = self.ops.row_of(key)
        if i is None:
            return []
        columns = self._columns
        return [(columns.key(c), output, index) for c, output, index in columns.consumer_rows(i)]

    def control_consumers(self, key: str) -> list[str]:
        """Keys of the ops with a control edge from ``key``, in graph order."""
        i = self.ops.row_of(key)
        if i is None:
            return []
        columns = self._columns
        return [columns.key(c) for c in columns.control_consumer_rows(i)]

    @cached_property
    def edges(self) -> EdgeView:
        """in_edges / out_edges / edges as networkx gives them, without building ``nx``."""
        return EdgeView(self)

    @cached_property
    def nx(self):
        """The networkx MultiDiGraph: node = op key (attr "op" = OpNode); edges kind="data"
        (src_output, dst_input) or kind="control". Built, and networkx imported (~0.3 s), on
        first use: start-up pays for neither."""
        import networkx

        graph = networkx.MultiDiGraph()
        with gc_paused():
            graph.add_nodes_from((key, {"op": node}) for key, node in self.ops.items())
            for key, node in self.ops.items():
                graph.add_edges_from((ref.producer, key, {"kind": "data", "src_output": ref.producer_output,
                                                          "dst_input": ref.index})
                                     for ref in node.inputs if ref.producer is not None)
                graph.add_edges_from((src, key, {"kind": "control"}) for src in node.control_inputs)
        return graph

    @property
    def ops(self) -> OpMap:
        """key -> OpNode, in execution order (graph by graph, each in its op-list order); a
        node is made when first asked for."""
        if self._map is None:
            with self._map_lock:
                if self._map is None:
                    self._map = OpMap(self._columns, self.readers)
        return self._map

    @property
    def op_count(self) -> int:
        return sum(g.ops for g in self.graphs)

    # ---- details decoded in earlier runs (the session's details cache) -----------------------
    def detail_rows(self) -> list:
        """Per op, in order: (id, stream_id, outputs, input_descs) when decoded from a scanned
        file, else None. Attrs are left out: only ``ni`` shows them, read again from the span."""
        return [node.lazy[0][:4] if node.lazy[1] is not None and node.lazy[0] is not None else None
                for node in self.ops.values()]

    def want_all_details(self) -> None:
        """A command about to read every op's details (``vc``'s planning) asks for the details
        cache now, before any op is decoded one by one (op_node.load_details asks it only after
        BULK_AFTER ops: a command about one op must not load them all)."""
        for reader in self.readers:
            hook = reader.before_bulk
            if hook is not None:
                reader.before_bulk = None
                hook()

    def set_detail_rows(self, rows: list) -> None:
        """Fill undecoded holders from :meth:`detail_rows` of an earlier run of the same files."""
        nodes = list(self.ops.values())
        if len(rows) != len(nodes):
            return
        for node, row in zip(nodes, rows):
            lazy = node.lazy
            if row is not None and lazy[0] is None and lazy[1] is not None:
                lazy[0] = OpDetails(*row, None)  # OpNode.attrs reads the attrs when asked

    # ---- start-up cache ---------------------------------------------------------------------
    # The ops are columns (op_columns.py); graph_cache.py keeps them as raw array bytes.
    @property
    def _columns(self) -> OpColumns:
        if self._column_maker is not None:
            with self._rows_lock:  # the REPL's completion warm-up thread may ask first
                if self._column_maker is not None:
                    self._column_data, self._column_maker = self._column_maker(), None
        return self._column_data

    def cache_state(self) -> tuple[list[GraphSummary], list[str], list, OpColumns]:
        """(graph summaries, warnings, readers, columns): what the start-up cache keeps."""
        return self.graphs, self.warnings, self.readers, self._columns

    @classmethod
    def from_cache_state(cls, graphs: list[GraphSummary], warnings: list[str], readers: list,
                         make_columns: Callable[[], OpColumns] | OpColumns) -> "OpGraph":
        """The graph :meth:`cache_state` described. Start-up (``info``, the prompt) reads only
        the summaries and warnings, so the columns may be made when first needed."""
        self = cls()
        self.graphs, self.warnings, self.readers = graphs, warnings, readers
        if isinstance(make_columns, OpColumns):
            self._column_data = make_columns
        else:
            self._column_maker = make_columns
        return self

    # ---- queries -------------------------------------------------------------------------------
    def find(self, text: str) -> list[OpNode]:
        """Ops matching ``text``: the op whose key it is exactly, else every op whose key
        contains it (case-sensitive, else case-insensitive), in key order. Callers use a single
        hit and list the candidates when there are several."""
        if text in self.ops:
            return [self.ops[text]]
        names = self.sorted_names()
        hits = [n for n in names if text in n]
        if not hits:
            lowered = text.lower()
            hits = [n for n in names if lowered in n.lower()]
        return [self.ops[n] for n in hits]

    def producers(self, name: str) -> list[tuple[OpNode, int, int]]:
        """(producer op, its output index, this op's input index) per connected data input."""
        node = self.ops[name]
        return [(self.ops[ref.producer], ref.producer_output, ref.index)
                for ref in node.inputs if ref.producer is not None]

    def consumers(self, name: str) -> list[tuple[OpNode, int, int]]:
        """(consumer op, this op's output index, consumer input index), in execution order."""
        i = self.ops.row_of(name)
        if i is None:
            raise KeyError(name)  # like producers()
        ops = self.ops
        return [(ops.node_at(c), output, index) for c, output, index in self._columns.consumer_rows(i)]

    def in_exec_order(self) -> list[OpNode]:
        """All ops: graph by graph (in load order), each in its op-list order."""
        return list(self.ops.values())  # insertion order is exactly that

    def sorted_names(self) -> list[str]:
        """Op keys sorted, built once (completion and substring search)."""
        if self._sorted_names is None:
            self._sorted_names = sorted(self._columns.keys())  # no key -> op dict for this
        return self._sorted_names
