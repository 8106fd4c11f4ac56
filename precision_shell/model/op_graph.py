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
"""

from __future__ import annotations

import gc
from collections.abc import Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property

from .op_attrs import (KERNEL_LIB, KERNEL_SUFFIX, ORIGINAL_OP_NAMES, PASS_NAME, LazyAttrs,
                       TensorDesc, decode_attr, string_list, tensor_desc, text)

__all__ = ["GraphSummary", "InputRef", "OpGraph", "OpNode", "TensorDesc"]


@dataclass
class InputRef:
    """Data input anchor ``index`` of an op and what feeds it."""

    index: int
    producer: str | None  # key of the producing op; None if unconnected or unresolved
    producer_output: int | None
    desc: TensorDesc | None
    raw: str = ""  # the OpDef.input text ("a/b:0", "" when unconnected)


@dataclass
class OpNode:
    name: str  # GE op name, as in dump file names
    type: str
    graph: str  # name of the GraphDef holding the op
    order: int  # position in the graph's op list = execution order
    id: int
    stream_id: int
    inputs: list[InputRef]
    control_inputs: list[str]  # keys of ops with a control edge into this one
    outputs: list[TensorDesc]
    attrs: Mapping[str, object]  # decoded on first use (op_attrs.LazyAttrs)
    original_ops: list[str]  # _datadump_original_op_names ([] when present but empty)
    has_original_attr: bool
    passes: list[str]  # pass_name (s or list.s): fusion passes that produced the op
    kernel: str | None  # {name}_kernelname or any *_kernelname attr
    engine: str | None  # _ge_attr_op_kernel_lib_name
    key: str = ""  # unique key in OpGraph.ops (== name unless taken by an earlier graph)

    @property
    def is_fused(self) -> bool:
        return len(self.original_ops) > 1 or bool(self.passes)

    def golden_names(self) -> list[str]:
        """Framework ops whose golden tensors this op is compared with (formats.md §3.5)."""
        return list(self.original_ops) if self.has_original_attr else [self.name]


@dataclass
class GraphSummary:
    name: str
    source: str  # file the graph came from
    ops: int
    fused_ops: int
    passes: list[str]  # distinct fusion pass names, sorted


@contextmanager
def _gc_paused():
    """Building 100k+ small objects: cyclic GC passes over them would cost more than the build."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _split_input(raw: str) -> tuple[str, int] | None:
    """``"a/b:0"`` -> ("a/b", 0) (split on the LAST ':'); a name without ':' is output 0."""
    name, colon, index = raw.rpartition(":")
    if not colon:
        return raw, 0
    try:
        return name, int(index)
    except ValueError:
        return None


def _names(value) -> list[str]:
    """A names attr GE writes as ``list.s`` (or as ``s``): the non-empty names."""
    if value.WhichOneof("value") == "list":
        return [name for name in map(text, value.list.s) if name]  # direct: it runs for every op
    return string_list(decode_attr(value))


def _op_node(op, graph_name: str, order: int, memo: dict) -> OpNode:
    attrs = op.attr
    original = attrs.get(ORIGINAL_OP_NAMES)  # .get: indexing a message map would insert the key
    passes = attrs.get(PASS_NAME)
    kernel = attrs.get(op.name + KERNEL_SUFFIX)
    if kernel is None:
        kernel = next((attrs[k] for k in attrs if k.endswith(KERNEL_SUFFIX)), None)
    engine = attrs.get(KERNEL_LIB)
    return OpNode(
        name=op.name, type=op.type, graph=graph_name, order=order, id=op.id,
        stream_id=op.stream_id, inputs=[], control_inputs=[],
        outputs=[tensor_desc(i, d, memo) for i, d in enumerate(op.output_desc)], attrs=LazyAttrs(attrs),
        original_ops=_names(original) if original is not None else [],
        has_original_attr=original is not None,
        passes=_names(passes) if passes is not None else [],
        kernel=text(kernel.s) or None if kernel is not None else None,
        engine=text(engine.s) or None if engine is not None else None)


class OpGraph:
    """Ops of one or more GE models, with data and control edges (``nx``, a MultiDiGraph)."""

    def __init__(self) -> None:
        self.ops: dict[str, OpNode] = {}
        self.graphs: list[GraphSummary] = []
        self.warnings: list[str] = []
        # key -> (consumer key, output index, consumer input index), filled while linking
        self._consumers: dict[str, list[tuple[str, int, int]]] = {}
        self._sorted_names: list[str] | None = None

    @classmethod
    def from_models(cls, models: list[tuple[str, object]]) -> "OpGraph":
        """Build from ``(source path, ge.proto.ModelDef)`` pairs, in file-counter order."""
        self = cls()
        latest: dict[str, tuple[str, object]] = {}  # GraphDef name -> (source, GraphDef)
        for source, model in models:
            for graph in model.graph:
                if graph.name in latest:
                    self.warnings.append(f"graph {graph.name!r} appears again in {source}: "
                                         f"using it instead of {latest[graph.name][0]}")
                    del latest[graph.name]  # re-inserted below: the order of the copy used
                latest[graph.name] = (str(source), graph)
        self._memo = {}  # identical tensor descriptors -> one TensorDesc (build time only)
        with _gc_paused():
            pending = [self._add_graph(name, source, graph) for name, (source, graph) in latest.items()]
            for local, nodes in pending:
                for node, op in nodes:
                    self._link(node, op, local)
        del self._memo
        return self

    def _add_graph(self, graph_name: str, source: str, graph) -> tuple[dict[str, str], list]:
        local: dict[str, str] = {}  # op name -> key, within this graph
        nodes = []
        for order, op in enumerate(graph.op):
            if op.name in local:
                self.warnings.append(f"graph {graph_name!r}: op name {op.name!r} repeated; "
                                     "keeping the first")
                continue
            node = _op_node(op, graph_name, order, self._memo)
            node.key = op.name if op.name not in self.ops else f"{graph_name}/{op.name}"
            local[op.name] = node.key
            self.ops[node.key] = node
            nodes.append((node, op))
        self.graphs.append(GraphSummary(
            name=graph_name, source=source, ops=len(nodes),
            fused_ops=sum(node.is_fused for node, _ in nodes),
            passes=sorted({p for node, _ in nodes for p in node.passes})))
        return local, nodes

    def _resolve(self, name: str, local: dict[str, str]) -> str | None:
        key = local.get(name)
        if key is None and name in self.ops and self.ops[name].name == name:
            key = name  # an op of another graph with that exact name
        return key

    def _link(self, node: OpNode, op, local: dict[str, str]) -> None:
        """Fill node.inputs / control_inputs and the consumer index."""
        descs = op.input_desc
        for raw in op.input:
            parsed = _split_input(raw) if raw else None
            if parsed is not None and parsed[1] == -1:  # control edge
                key = self._resolve(parsed[0], local)
                if key is None:
                    self.warnings.append(f"op {node.key!r}: control input from missing op "
                                         f"{parsed[0]!r}")
                else:
                    node.control_inputs.append(key)
                continue
            index = len(node.inputs)
            ref = InputRef(index=index, producer=None, producer_output=None,
                           desc=tensor_desc(index, descs[index], self._memo) if index < len(descs) else None,
                           raw=raw)
            node.inputs.append(ref)
            if not raw:
                continue  # unconnected optional input
            if parsed is None or parsed[1] < 0:
                self.warnings.append(f"op {node.key!r}: cannot read input {raw!r}")
                continue
            key = self._resolve(parsed[0], local)
            if key is None:
                self.warnings.append(f"op {node.key!r}: input {index} from missing op {parsed[0]!r}")
                continue
            ref.producer, ref.producer_output = key, parsed[1]
            self._consumers.setdefault(key, []).append((node.key, parsed[1], index))

    @cached_property
    def nx(self):
        """The networkx MultiDiGraph: node = op key (attr "op" = OpNode); edges kind="data"
        (src_output, dst_input) or kind="control". Built, and networkx imported (~0.3 s), on
        first use: start-up pays for neither."""
        import networkx

        graph = networkx.MultiDiGraph()
        with _gc_paused():
            graph.add_nodes_from((key, {"op": node}) for key, node in self.ops.items())
            for key, node in self.ops.items():
                graph.add_edges_from((ref.producer, key, {"kind": "data", "src_output": ref.producer_output,
                                                          "dst_input": ref.index})
                                     for ref in node.inputs if ref.producer is not None)
                graph.add_edges_from((src, key, {"kind": "control"}) for src in node.control_inputs)
        return graph

    def __getstate__(self) -> dict:
        """Pickled for the start-up cache without the derived networkx view."""
        state = dict(self.__dict__)
        state.pop("nx", None)
        return state

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
        self.ops[name]  # KeyError for an unknown op, like producers()
        rank = self._exec_rank
        found = sorted(self._consumers.get(name, ()), key=lambda c: (rank[c[0]], c[2], c[1]))
        return [(self.ops[key], output, index) for key, output, index in found]

    @cached_property
    def _exec_rank(self) -> dict[str, int]:
        return {node.key: i for i, node in enumerate(self.in_exec_order())}

    def in_exec_order(self) -> list[OpNode]:
        """All ops: graph by graph (in load order), each in its op-list order."""
        return list(self.ops.values())  # insertion order is exactly that

    def sorted_names(self) -> list[str]:
        """Op keys sorted, built once (completion and substring search)."""
        if self._sorted_names is None:
            self._sorted_names = sorted(self.ops)
        return self._sorted_names
