"""Graph-mode GE dumps as a :class:`~.base.Run`: the ops of the loaded graph in execution order,
their tensors as the graph describes them, the graph's data edges (exact), values read from
the active dump set's files, and the golden ``.npy`` of each output (:class:`GePairing`).

Built on the session's parts (``graph``, ``dumps``, ``golden``), which load as before; this
adapter reads nothing until asked. Without a graph, the ops are the dumped ones in file
(timestamp) order and their tensors come from the dump headers.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from ...errors import CommandError
from ...formats.dump_names import escape_op_name
from ..tensor_ref import tensor_name
from .base import Edge, Stats, TensorInfo, downstream_of


@dataclass(frozen=True)
class GeTensor:
    name: str            # OP:output:N | OP:input:N
    op: str
    io: str
    index: str
    dtype: str | None
    shape: tuple[int, ...] | None
    has_data: bool
    stats: Stats | None = None     # GE dumps record no statistics

    def printed(self, golden: bool = False) -> str:
        return tensor_name(self.op, self.io, self.index, golden=golden)


class GeOp:
    """One graph op (or, without a graph, one dumped op)."""

    def __init__(self, run: "GeRun", order: int, name: str, type_: str, node: Any = None):
        self._run, self.order, self.name, self.type, self.node = run, order, name, type_, node

    kind = "kernel"

    @property
    def kernel_key(self) -> str:
        return self.type

    @cached_property
    def tensors(self) -> list[GeTensor]:
        return self._run._tensors_of(self)

    @property
    def inputs(self) -> list[GeTensor]:
        return [t for t in self.tensors if t.io == "input"]

    @property
    def outputs(self) -> list[GeTensor]:
        return [t for t in self.tensors if t.io == "output"]

    def __repr__(self) -> str:
        return f"GeOp({self.name!r}, {self.type!r})"


class GeRun:
    """The session's active dump set as a Run (``session.run`` on a graph-mode session)."""

    kind = "ge"

    def __init__(self, session: Any):
        self._session = session
        self.graph = session.graph
        self.dumps = session.dumps
        self.warnings: list[str] = []

    @property
    def path(self) -> str:
        active = self._session.active
        return str(active.path) if active is not None else str(self._session.workspace.root)

    @cached_property
    def ops(self) -> list[GeOp]:
        if self.graph is not None:
            return [GeOp(self, i, node.key, node.type, node) for i, node in enumerate(self.graph.in_exec_order())]
        seen: dict[str, GeOp] = {}
        for f in self.dumps.op_files:
            if f.name.op_name not in seen:
                seen[f.name.op_name] = GeOp(self, len(seen), f.name.op_name, f.name.op_type)
        return list(seen.values())

    @cached_property
    def _by_name(self) -> dict[str, GeOp]:
        return {o.name: o for o in self.ops}

    @property
    def extras(self) -> dict[str, Any]:
        """``fusion`` (fusion passes per op, the fusion report), ``opdebug`` (overflow records)
        when the workspace has them; ``device_layouts``: dumps keep the device layout."""
        session, found = self._session, {}
        if self.graph is not None and any(n.passes or len(n.original_ops) > 1 for n in self.graph.ops.values()):
            found["fusion"] = session.fusion
        opdebug = session.overflow_opdebug(session.active) if session.overflow_dumps.files else []
        if opdebug:
            found["opdebug"] = opdebug
        found["device_layouts"] = True
        return found

    # --- lookup ---------------------------------------------------------------------------------
    def op(self, name: str) -> GeOp:
        found = self._by_name.get(name)
        if found is not None:
            return found
        hits = self.find(name)
        if len(hits) == 1:
            return hits[0]
        if not hits:
            from ..suggest import did_you_mean

            raise CommandError(f"no op matches {name!r}" + did_you_mean(name, self._by_name))
        shown = ", ".join(o.name for o in hits[:8])
        raise CommandError(f"{name!r} matches {len(hits)} ops: {shown}{' ...' if len(hits) > 8 else ''}")

    def find(self, text: str) -> list[GeOp]:
        if self.graph is not None:
            return [self._by_name[n.key] for n in self.graph.find(text)]
        return [o for o in self.ops if text in o.name]

    def tensor(self, name: str) -> GeTensor:
        """By ``OP:output:N`` / ``OP:input:N`` or the printed ``OP:N`` / ``OP:inN``."""
        from ..tensor_ref import parse_tensor_ref

        op_name, io, index = _split(name)
        if op_name is None:
            try:
                ref = parse_tensor_ref(name)
            except CommandError:
                ref = None
            if ref is None or ref.kind != "npu":
                raise CommandError(f"no tensor {name!r} in {self.path}")
            op_name, io, index = ref.name, ref.io, str(ref.index)
        op = self.op(op_name)
        for t in op.tensors:
            if t.io == io and t.index == index:
                return t
        raise CommandError(f"no tensor {name!r} in {self.path}")

    def load(self, name: str):
        """The tensor's logical values from the op's newest dump file (FormatError if unreadable)."""
        from ...formats.dump_file import read_logical_array

        t = self.tensor(name)
        f = self.dumps.latest_for_op(t.op)
        if f is None:
            raise CommandError(f"{t.printed()}: no dump file in {self.path}")
        header = self.dumps.header(f)
        entries = header.outputs if t.io == "output" else header.inputs
        i = int(t.index)
        if i >= len(entries):
            raise CommandError(f"{t.printed()}: {f.path} has {len(entries)} {t.io}s")
        return read_logical_array(header, entries[i])

    # --- dataflow -------------------------------------------------------------------------------
    def producer(self, tensor: str) -> Edge | None:
        t = self.tensor(tensor)
        if t.io != "input" or self.graph is None:
            return None
        op = self.op(t.op)
        for ref in op.node.inputs:
            if str(ref.index) == t.index and ref.producer is not None:
                return Edge(f"{ref.producer}:output:{ref.producer_output}", t.name, ref.producer, op.name, True)
        return None

    def producers(self, op: str) -> list[Edge]:
        o = self.op(op)
        if self.graph is None:
            return []
        return [Edge(f"{r.producer}:output:{r.producer_output}", f"{o.name}:input:{r.index}", r.producer,
                     o.name, True) for r in o.node.inputs if r.producer is not None]

    def consumers(self, op: str) -> list[Edge]:
        o = self.op(op)
        if self.graph is None:
            return []
        return [Edge(f"{o.name}:output:{out}", f"{dst}:input:{index}", o.name, dst, True)
                for dst, out, index in self.graph.consumer_edges(o.name)]

    def downstream(self, op: str) -> list[str]:
        return downstream_of(self, op)

    def module_path(self, op: str) -> list[str]:
        return []       # GE graphs name scopes in the op names; no module tree

    # --- tensors --------------------------------------------------------------------------------
    def _tensors_of(self, op: GeOp) -> list[GeTensor]:
        dumped = self.dumps.latest_for_op(op.name) is not None
        if op.node is None:      # no graph: what the dump header says
            header = self.dumps.header(self.dumps.latest_for_op(op.name))
            return [GeTensor(f"{op.name}:{io}:{i}", op.name, io, str(i),
                             e.dtype_name, tuple(e.original_shape or e.shape), True)
                    for io, entries in (("input", header.inputs), ("output", header.outputs))
                    for i, e in enumerate(entries)]
        tensors = []
        for ref in op.node.inputs:
            desc = ref.desc
            tensors.append(GeTensor(f"{op.name}:input:{ref.index}", op.name, "input", str(ref.index),
                                    desc.dtype if desc else None, _logical(desc), dumped))
        for desc in op.node.outputs:
            tensors.append(GeTensor(f"{op.name}:output:{desc.index}", op.name, "output", str(desc.index),
                                    desc.dtype, _logical(desc), dumped))
        return tensors


def _logical(desc) -> tuple[int, ...] | None:
    if desc is None:
        return None
    return tuple(desc.origin_shape) if desc.origin_shape else tuple(desc.shape)


def _split(name: str) -> tuple[str | None, str, str]:
    for io in ("output", "input"):
        op, sep, index = name.rpartition(f":{io}:")
        if sep and index.isdigit():
            return op, io, index
    return None, "", ""


class GePairing:
    """Golden ``.npy`` outputs (formats.md A.8.5): the op's own name and output index, else the
    framework op its output description names (``_datadump_origin_name``). The compare's plan
    (``analysis/compare_mapping``) also walks Cast/TransData chains for inputs."""

    def __init__(self, session: Any):
        self._session = session

    def golden_for(self, tensor) -> TensorInfo | None:
        golden = self._session.golden
        if golden.folder is None or tensor.io != "output":
            return None
        index = int(tensor.index)
        candidates = [(tensor.op, index)]
        graph = self._session.graph
        if graph is not None and tensor.op in graph.ops:
            outputs = graph.ops[tensor.op].outputs
            if index < len(outputs) and outputs[index].origin_name:
                desc = outputs[index]
                candidates.append((desc.origin_name, index if desc.origin_output_index is None
                                   else desc.origin_output_index))
        for name, i in candidates:
            found = golden.find(name, i)
            if found is not None:
                return TensorInfo(f"{escape_op_name(name)}:output:{i}", escape_op_name(name), "output", str(i),
                                  has_data=True, path=str(found.path))
        return None
