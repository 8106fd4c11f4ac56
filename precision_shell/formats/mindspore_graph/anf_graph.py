"""MindSpore's ANF IR graph of a graph-mode dump: ``graphs/ms_output_trace_code_graph_{G}.pb``
(an ``irpb.ModelProto``, read with pshell's own minimal ``protos/anf_ir.proto``) and the source
lines of the ``.ir`` text beside it.

What comes out is plain data: nodes by their numeric name with op type, full name, inputs and
output type; the graph's parameters and constants. :meth:`AnfGraph.source` resolves a kernel's
data inputs through the nodes that are not kernels (``Load``, ``Depend``, ``TupleGetItem``) to
the kernel output, parameter or constant they carry; monads (``U``, ``UpdateState``) are not
data and are dropped, so the i-th resolved input is the kernel's ``input.i`` file.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from ...errors import FormatError
from ..input_files import read_regular
from ..quoting import clipped

__all__ = ["AnfGraph", "AnfInput", "AnfNode", "Const", "load_anf_graph", "read_ir_sources",
           "is_anf_model", "source_line"]

# irpb data types (protos/anf_ir.proto): numbers -> MindSpore's names
_DTYPES = {1: "Bool", 2: "Int8", 3: "Int16", 4: "Int32", 5: "Int64", 6: "UInt8", 7: "UInt16",
           8: "UInt32", 9: "UInt64", 10: "Float16", 11: "Float32", 12: "Float64", 13: "String"}
_TENSOR, _TUPLE = 14, 31
_PASS_THROUGH = {"Load", "Depend", "TensorMove"}     # input 0 is the value they carry
_MONADS = {"UpdateState", "U", "IOMonad", "UMonad"}
_MAX_DEPTH = 64


@dataclass(frozen=True, slots=True)
class Const:
    """A graph constant: ``kind`` scalar (an attribute value: axis, transpose flag), tensor
    (its value is not in the .pb) or monad (not data)."""
    key: str
    kind: str
    value: object = None
    dtype: str | None = None


@dataclass(frozen=True, slots=True)
class AnfInput:
    """Where a kernel's data input comes from: ``kind`` node (``ref`` the producing kernel's
    node name, ``slot`` its output), parameter (``ref`` its name), const, or unknown."""
    kind: str
    ref: str
    slot: int = 0


@dataclass(slots=True)
class AnfNode:
    name: str                     # the node's number in the graph
    op_type: str
    full_name: str
    inputs: list[str]             # input names as written (node names, parameters, constants)
    dtype: str | None = None      # output dtype (MindSpore name) when one tensor
    shape: tuple[int, ...] | None = None
    trace: str = ""               # "# In file ..." lines, innermost first


@dataclass
class AnfGraph:
    path: str
    name: str
    nodes: dict[str, AnfNode] = field(default_factory=dict)
    by_full_name: dict[str, AnfNode] = field(default_factory=dict)
    parameters: dict[str, tuple[str | None, tuple[int, ...] | None]] = field(default_factory=dict)
    consts: dict[str, Const] = field(default_factory=dict)
    sources: dict[str, list[str]] = field(default_factory=dict)   # full name -> frames, outermost first
    _inputs: dict[str, list[AnfInput]] = field(default_factory=dict, repr=False)

    def data_inputs(self, full_name: str) -> list[AnfInput]:
        """A kernel's data inputs in file-slot order (monads dropped); worked out once."""
        found = self._inputs.get(full_name)
        if found is None:
            node = self.by_full_name.get(full_name)
            resolved = [self._resolve(name, 0) for name in node.inputs] if node is not None else []
            found = self._inputs[full_name] = [i for i in resolved if i.kind != "monad"]
        return found

    def _resolve(self, name: str, depth: int) -> AnfInput:
        if name in self.parameters:
            return AnfInput("parameter", name)
        const = self.consts.get(name)
        if const is not None:
            return AnfInput("monad" if const.kind == "monad" else "const", name)
        node = self.nodes.get(name)
        if node is None or depth > _MAX_DEPTH:
            return AnfInput("unknown", name)
        if node.op_type in _MONADS:
            return AnfInput("monad", name)
        if node.op_type in _PASS_THROUGH and node.inputs:
            return self._resolve(node.inputs[0], depth + 1)
        if node.op_type == "TupleGetItem" and len(node.inputs) >= 2:
            inner = self._resolve(node.inputs[0], depth + 1)
            index = self.consts.get(node.inputs[1])
            if inner.kind == "node" and index is not None and isinstance(index.value, int):
                return AnfInput("node", inner.ref, index.value)
            return inner
        return AnfInput("node", name)

    def source(self, full_name: str) -> list[str]:
        """The source frames of a node, outermost first: from the .ir text when it was read,
        else from the .pb's trace."""
        if full_name in self.sources:
            return self.sources[full_name]
        node = self.by_full_name.get(full_name)
        if node is None or not node.trace:
            return []
        return [f for f in (_frame(line) for line in node.trace.splitlines()[::-1]) if f]


def _type_of(t) -> tuple[str | None, tuple[int, ...] | None]:
    if t.data_type != _TENSOR:
        return None, None
    return _DTYPES.get(t.tensor_type.elem_type), tuple(d.size for d in t.tensor_type.shape.dim)


def _const(key: str, c) -> Const:
    if not c.HasField("value"):
        return Const(key, "tensor")
    v = c.value
    if v.dtype == 0:
        return Const(key, "monad")
    if v.dtype == 1:
        return Const(key, "scalar", v.bool_val, "Bool")
    if 2 <= v.dtype <= 5:
        return Const(key, "scalar", v.int_val, _DTYPES[v.dtype])
    if 6 <= v.dtype <= 9:
        return Const(key, "scalar", v.uint_val, _DTYPES[v.dtype])
    if v.dtype in (10, 11):
        return Const(key, "scalar", v.float_val, _DTYPES[v.dtype])
    if v.dtype == 12:
        return Const(key, "scalar", v.double_val, "Float64")
    if v.dtype == 13:
        return Const(key, "scalar", v.str_val, "String")
    if v.dtype == _TUPLE:
        return Const(key, "scalar", tuple(_const(key, _Wrapped(item)).value for item in v.values), "Tuple")
    return Const(key, "scalar", None, f"type {v.dtype}")


class _Wrapped:
    """A ValueProto seen as a NamedValueProto (tuple items are values without keys)."""
    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def HasField(self, name: str) -> bool:   # noqa: N802 (the protobuf spelling)
        return True


def is_anf_model(model) -> bool:
    return bool(model.graph.node) and any(n.full_name for n in model.graph.node)


def parse_anf_model(path: str, data: bytes):
    """An ``irpb.ModelProto`` from bytes, or FormatError."""
    from google.protobuf.message import DecodeError

    from ..protoload import load_proto

    try:
        return load_proto("anf_ir.proto").ModelProto.FromString(data)
    except DecodeError as exc:
        raise FormatError(path, f"not a MindSpore ANF IR graph: {clipped(exc)}") from None


def load_anf_graph(path: str | os.PathLike, ir_path: str | os.PathLike | None = None) -> AnfGraph:
    """The graph of a ``ms_output_trace_code_graph_{G}.pb``; source lines from the ``.ir`` beside
    it (``ir_path``) when given and readable. FormatError when the .pb is no ANF IR graph."""
    path = os.fspath(path)
    try:
        data = read_regular(path)
    except OSError as exc:
        raise FormatError(path, f"cannot read: {exc.strerror or exc}") from None
    model = parse_anf_model(path, data)
    if not is_anf_model(model):
        raise FormatError(path, "not a MindSpore ANF IR graph (no node with a full name)")
    g = model.graph
    graph = AnfGraph(path, g.name)
    for p in g.parameters:
        graph.parameters[p.name] = _type_of(p.type)
    for c in g.const_vals:
        graph.consts[c.key] = _const(c.key, c)
    for n in g.node:
        dtype, shape = _type_of(n.output_type)
        node = AnfNode(n.name, n.op_type, n.full_name, [i.name for i in n.input if i.type == 0],
                       dtype, shape, n.source_trace)
        graph.nodes[n.name] = node
        if n.full_name:
            graph.by_full_name[n.full_name] = node
    if ir_path is not None:
        try:
            graph.sources = read_ir_sources(ir_path)
        except FormatError:
            pass      # the .pb's own trace stands in (AnfGraph.source)
    return graph


# --- the .ir text: source lines ------------------------------------------------------------------

_FULL_NAME = re.compile(r"\s*# Fullname with scope: \((.*)\)\s*\Z")
_FRAME = re.compile(r"\s*#\s+(?:- )?In file (?P<file>.+?):(?P<line>\d+)(?:~\d+)?(?:, [\d~]+)?/(?P<code>.*)/\s*\Z")


def _frame(line: str) -> str | None:
    """``F:L  code`` of one ``# In file F:L, C~C/code/`` line, else None."""
    m = _FRAME.match(line)
    if m is None:
        return None
    return f"{m['file']}:{m['line']}  {m['code'].strip()}"


def read_ir_sources(path: str | os.PathLike) -> dict[str, list[str]]:
    """{full name: source frames, outermost first} of a ``.ir`` text (the ``# In file`` lines
    under each ``# Fullname with scope:``)."""
    path = os.fspath(path)
    try:
        text = read_regular(path).decode("utf-8", "replace")
    except OSError as exc:
        raise FormatError(path, f"cannot read: {exc.strerror or exc}") from None
    sources: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        m = _FULL_NAME.match(line)
        if m is not None:
            current = sources.setdefault(m.group(1), [])
            continue
        if current is not None and line.lstrip().startswith("#"):
            frame = _frame(line)
            if frame is not None:
                current.append(frame)
        else:
            current = None
    return sources


def source_line(frames: list[str]) -> str | None:
    """The user's line among a node's frames: the innermost one outside installed packages
    (MindSpore's own layers are in site-packages), else the innermost."""
    for frame in reversed(frames):
        if "site-packages" not in frame and "dist-packages" not in frame:
            return frame
    return frames[-1] if frames else None
