"""A MindSpore graph-mode dump as the run model framework sessions use (FrameworkRun).

Thin on purpose: each iteration folder becomes one :class:`MsRankDump` (the structure an msprobe
``dump.json`` folder becomes), so every framework command -- ls, ni, li/lo, pt, cp, ac, vc, vcs,
export -- works on it unchanged:

- a kernel is an entry named by its graph full name (``Default/.../Softmax-op0``), kind forward
  until the first ``Gradients/`` kernel, backward after, in execution order; its files are
  leaves ``input.N`` / ``output.N`` (dtype from the file name, shape from the graph, else from
  the .npy header). An input that is a scalar constant of the graph (an axis, a transpose flag)
  is a plain-value leaf with the graph's value, not a tensor;
- a parameter file (weights, graph inputs, optimizer state; dumped at the end of the iteration)
  is an entry ``Parameter/{name}`` of kind ``parameter`` with one output;
- ``stack`` holds each kernel's source frames (``ni`` shows them), ``construct`` its cell scopes;
- edges come from the graph (exact): a kernel input's producer is the kernel output or parameter
  the graph's node carries through Load/Depend/TupleGetItem (:mod:`..formats.mindspore_graph.
  anf_graph`). Pairing with a golden is msprobe's exact rule on these names: (full name,
  input|output, slot), the renumbered files already given their graph names by the reader.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import partial

from ...errors import FormatError
from ...formats.golden_npy import read_npy_header
from ...formats.mindspore_graph.anf_graph import AnfGraph, source_line
from ...formats.mindspore_graph.cann import cann_tensors
from ...formats.mindspore_graph.dump import IterationDump, Kernel, ParameterFile
from ...formats.mindspore_graph.names import KernelFile, numpy_dtype_name
from ...formats.msprobe.dump import Entry, Leaf, RankDump
from ...formats.msprobe.layout import RankDir
from ..framework_run import Edge, FrameworkRun

__all__ = ["MsPairing", "MsRankDump", "MsRun", "PARAMETER_PREFIX", "rank_dump_of"]

PARAMETER_PREFIX = "Parameter/"
_TENSOR_TYPE = "mindspore.Tensor"
_PY_TYPES = {bool: "bool", int: "int", float: "float", str: "str", tuple: "tuple"}


@dataclass
class MsRankDump(RankDump):
    """One iteration folder, with what the reader found (graph, kernels, files)."""
    dump: IterationDump | None = None

    @property
    def sources(self) -> dict[str, str]:
        """{entry name: its user source line} (see :func:`.anf_graph.source_line`)."""
        return {name: line for name, frames in self.stack.items() if (line := source_line(list(frames)))}


def _shape_of_file(f: KernelFile, folder: str, warnings: list[str]) -> tuple[int, ...] | None:
    try:
        return read_npy_header(os.path.join(folder, f.name)).shape
    except FormatError as exc:
        warnings.append(str(exc))
        return None


def _kernel_leaves(k: Kernel, graph: AnfGraph | None, folder: str, warnings: list[str]) -> list[Leaf]:
    node = graph.by_full_name.get(k.full_name) if graph is not None and k.matched != "none" else None
    inputs = graph.data_inputs(k.full_name) if node is not None else []
    leaves: list[Leaf] = []
    for f in k.files:
        path = f"{folder}{os.sep}{f.name}"
        if f.is_npy:      # io, slot and dtype from the name; the shape from the graph (else the header)
            tensors = [(f.io, f.slot, numpy_dtype_name(f.dtype), f.dtype, None)]
        else:             # a CANN binary dump: one file, its tensors (and shapes) in its header
            try:
                tensors = cann_tensors(path)
            except FormatError as exc:
                warnings.append(str(exc))
                continue
        for io, slot, dtype, raw, shape in tensors:
            source = inputs[slot] if io == "input" and slot < len(inputs) else None
            const = graph.consts.get(source.ref) if source is not None and source.kind == "const" else None
            if const is not None and const.kind == "scalar":     # an attribute dumped as an input
                leaves.append(Leaf(f"{io}.{slot}", _PY_TYPES.get(type(const.value), "scalar"), value=const.value,
                                   dtype_raw=raw, file=path))
                continue
            if shape is None and io == "output" and node is not None and slot == 0:
                shape = node.shape
            elif shape is None and source is not None:
                shape = _source_shape(graph, source)
            if shape is None:
                shape = _shape_of_file(f, folder, warnings)
                if shape is None:
                    continue
            leaves.append(Leaf(f"{io}.{slot}", _TENSOR_TYPE, dtype, raw, tuple(shape), file=path))
    return leaves


def _source_shape(graph: AnfGraph, source) -> tuple[int, ...] | None:
    if source.kind == "parameter":
        return graph.parameters.get(source.ref, (None, None))[1]
    if source.kind == "node" and source.slot == 0:
        return graph.nodes[source.ref].shape
    return None


class MsEntry(Entry):
    """An entry whose leaves are made when first read: opening a 50k-kernel iteration lists and
    names its files, the leaves (graph lookups, Leaf objects) wait for the run model."""
    __slots__ = ("_make", "_files")

    def __init__(self, name: str, kind: str, scope: str, prefix: str, op: str, make, files: int):
        super().__init__(name, kind, scope, prefix, op, None)
        self._leaves, self._make, self._files = None, make, files

    @property
    def leaves(self) -> list[Leaf]:
        if self._leaves is None:
            self._leaves, self._make = self._make(), None
        return self._leaves

    @property
    def tensor_count(self) -> int:
        return self._files if self._leaves is None else super().tensor_count

    @property
    def file_count(self) -> int:
        return self._files if self._leaves is None else super().file_count


def rank_dump_of(dump: IterationDump) -> MsRankDump:
    """One iteration folder as the rank-dump structure of framework sessions (leaves made later)."""
    it = dump.iteration
    folder = it.path
    warnings = list(dump.warnings)
    rank = MsRankDump(RankDir(folder, it.iteration, it.rank.name, it.rank.rank_id), framework="mindspore",
                      task="tensor", level="kernel", warnings=warnings, dump=dump)
    graph = dump.graph
    construct = rank.construct
    for k in dump.kernels:
        rank.entries.append(MsEntry(k.full_name, k.kind, "kernel", "Kernel", k.op_type,
                                    partial(_kernel_leaves, k, graph, folder, warnings), len(k.files)))
        if graph is not None:
            node = graph.by_full_name.get(k.full_name)
            frames = graph.source(k.full_name) if node is not None else []
            if frames:
                rank.stack[k.full_name] = tuple(frames)
        child, _, scope = k.full_name, None, k.full_name.rpartition("/")[0]
        while scope and child not in construct:
            construct[child] = scope
            child, scope = scope, scope.rpartition("/")[0]
    for p in dump.parameters:
        rank.entries.append(MsEntry(PARAMETER_PREFIX + p.name, "parameter", "parameter", "Graph", "Parameter",
                                    partial(_parameter_leaves, p, graph, folder, warnings), 1))
    return rank


def _parameter_leaves(p: ParameterFile, graph: AnfGraph | None, folder: str, warnings: list[str]) -> list[Leaf]:
    f = p.file
    shape = graph.parameters.get(p.name, (None, None))[1] if graph is not None else None
    if shape is None:
        shape = _shape_of_file(f, folder, warnings)
    return [] if shape is None else [Leaf("output.0", _TENSOR_TYPE, numpy_dtype_name(f.dtype), f.dtype,
                                          tuple(shape), file=f"{folder}{os.sep}{f.name}")]


class MsRun(FrameworkRun):
    """FrameworkRun over an :class:`MsRankDump`: edges from the graph instead of statistics."""

    rank: MsRankDump

    @property
    def kind(self) -> str:
        return "mindspore-graph"

    @property
    def extras(self) -> dict:
        """``modules`` (cell scopes), ``stack`` (source frames per kernel), ``source_lines``
        (the user's line per kernel), ``renumbered`` (kernels whose files carry another -opN)."""
        found = super().extras
        if self.rank.stack:
            found["source_lines"] = self.rank.sources
        dump = self.rank.dump
        if dump is not None and any(k.matched == "renumbered" for k in dump.kernels):
            found["renumbered"] = {k.full_name: k.file_name for k in dump.kernels if k.matched == "renumbered"}
        return found

    def _has_sidecar(self) -> bool:
        return False

    def _infer_edges(self) -> list[Edge]:
        dump = self.rank.dump
        graph = dump.graph if dump is not None else None
        if graph is None:
            return []
        edges: list[Edge] = []
        for op in self.ops:
            if op.kind == "parameter" or op.name not in graph.by_full_name:
                continue
            sources = graph.data_inputs(op.name)
            for t in op.inputs:
                slot = int(t.name.rsplit(":", 1)[1])
                if slot >= len(sources):
                    continue
                src = sources[slot]
                if src.kind == "node":
                    producer = graph.nodes[src.ref].full_name
                elif src.kind == "parameter":
                    producer = PARAMETER_PREFIX + src.ref
                else:
                    continue
                name = f"{producer}:output:{src.slot}"
                if name in self._tensors:
                    edges.append(Edge(name, t.name, producer, op.name, True))
        return edges

    def op(self, name: str):
        """The op of that exact full name, else the only one whose full name ends with it at a
        ``/`` (``Softmax-op0``, ``fc2-Dense/MatMul-op0``: ``Mul-op0`` is not ``MatMul-op0``),
        else as framework runs find it (a unique part of the name)."""
        if name not in self._ops and not name.startswith("/"):
            found = [o for o in self.ops if o.name.endswith("/" + name)]
            if len(found) == 1:
                return found[0]
        return super().op(name)

    def source_line(self, op: str) -> str | None:
        return source_line(list(self.rank.stack.get(self.op(op).name, ())))


class MsPairing:
    """``golden_for``: the golden tensor of the same (full name, input|output, slot), the
    renumbered files having been given their graph names by the reader."""

    def __init__(self, target: MsRun, golden: MsRun):
        self.target, self.golden = target, golden

    def golden_for(self, tensor) -> object | None:
        try:
            return self.golden.tensor(tensor.name)
        except Exception:        # CommandError: a kernel or slot the golden does not have
            return None
