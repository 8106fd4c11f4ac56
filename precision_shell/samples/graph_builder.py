"""The GE graphs of the sample workspace, as ``ge.proto.ModelDef`` and its TextFormat text.

``ge_proto_*_Build.txt`` is the built graph (fused ops, device layouts, dump attributes) printed
the way GE does (``TextFormat::Print`` == ``text_format.MessageToString``). The text is streamed
one op at a time (:class:`GraphTextWriter`) so a 50k-op benchmark graph never sits in memory;
the result is the same text as printing the whole ModelDef (a test checks this).
A ``PreRunBegin`` stage file holds the framework graph before fusion: a decoy a reader must skip.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable
from typing import Any

from google.protobuf import text_format

from ..formats.protoload import ge_ir_pb
from .records import FrameworkOp, NpuOp, NpuTensor

VT_LIST_STRING, VT_LIST_INT = 1, 2
# GE's input anchor names per op type (used as TensorDescriptor.name); default "x{i}".
_INPUT_NAMES = {
    "Conv2D": ["x", "filter", "bias"], "MatMulV2": ["x1", "x2", "bias"], "Reshape": ["x", "shape"],
    "LayerNorm": ["x", "gamma", "beta"], "Mul": ["x1", "x2"], "RealDiv": ["x1", "x2"],
    "Sub": ["x1", "x2"], "FusedMulAdd": ["x1", "x2", "x3"], "Cast": ["x"], "TransData": ["src"],
}
_OUTPUT_NAMES = {"LayerNorm": ["y", "mean", "variance"], "TransData": ["dst"]}
_STRING_LISTS = frozenset({"_datadump_original_op_names", "pass_name"})
_FRAMEWORK_TYPES = {"Placeholder": "Data", "VariableV2": "Variable", "Mean": "ReduceMean",
                    "Sum": "ReduceSum"}


def set_attr(attr_map, key: str, value: Any) -> None:
    """Store a python value as a GE AttrDef (bool b, int i, float f, str s, lists typed)."""
    attr = attr_map[key]
    if isinstance(value, bool):
        attr.b = value
    elif isinstance(value, int):
        attr.i = value
    elif isinstance(value, float):
        attr.f = value
    elif isinstance(value, str):
        attr.s = value.encode()
    elif isinstance(value, (list, tuple)):
        # An empty list is a string list only for the name lists (GE-inserted ops print
        # ``list { val_type: VT_LIST_STRING }``); other empty lists are int lists (scalar shapes).
        strings = all(isinstance(v, str) for v in value) and (bool(value) or key in _STRING_LISTS)
        if strings:
            attr.list.s.extend(v.encode() for v in value)
        else:
            attr.list.i.extend(int(v) for v in value)
        attr.list.val_type = VT_LIST_STRING if strings else VT_LIST_INT
    else:
        raise TypeError(f"attribute {key!r}: unsupported value {value!r}")


def tensor_desc(desc, name: str, tensor: NpuTensor, *, output: bool) -> None:
    pb = ge_ir_pb()
    desc.name = name
    desc.dtype = pb.DataType.Value(tensor.ge_dtype)
    desc.shape.dim.extend(tensor.device_shape)
    desc.layout = tensor.format
    desc.size = tensor.nbytes_device
    desc.real_dim_cnt = len(tensor.logical_shape)
    set_attr(desc.attr, "origin_format", tensor.origin_format)
    set_attr(desc.attr, "origin_shape", list(tensor.logical_shape))
    if output and tensor.golden_ref is not None:
        origin, index = tensor.golden_ref.rsplit(":", 1)
        set_attr(desc.attr, "_datadump_origin_name", origin)
        set_attr(desc.attr, "_datadump_origin_output_index", int(index))
        set_attr(desc.attr, "_datadump_origin_format", tensor.origin_format)


def kernel_name(op: NpuOp) -> str:
    """A stable TBE kernel name: te_<type>_<hash of the op name>, as GE records per fused op."""
    digest = hashlib.sha1(op.name.encode()).hexdigest()[:16]
    return f"te_{op.type.lower()}_{digest}"


def op_def(op: NpuOp):
    """The OpDef of one NPU op (built graph)."""
    pb = ge_ir_pb()
    d = pb.OpDef(name=op.name, type=op.type, id=op.graph_id)
    d.input.extend(inp.source for inp in op.inputs)
    if op.original_ops is not None:
        set_attr(d.attr, "_datadump_original_op_names", list(op.original_ops))
    if len(op.passes) == 1:
        set_attr(d.attr, "pass_name", op.passes[0])
    elif op.passes:
        set_attr(d.attr, "pass_name", list(op.passes))
    set_attr(d.attr, "_ge_attr_op_kernel_lib_name", op.engine)
    if op.executed:
        d.stream_id = op.stream_id
        set_attr(d.attr, f"{op.name}_kernelname", kernel_name(op))
        elements = max((math.prod(t.logical_shape) for t in op.outputs), default=1)
        set_attr(d.attr, "tvm_blockdim", max(1, min(32, elements // 4096)))
    for key, value in op.attrs.items():
        set_attr(d.attr, key, value)
    in_names = _INPUT_NAMES.get(op.type, [])
    for i, inp in enumerate(op.inputs):
        name = in_names[i] if i < len(in_names) else f"x{i}"
        tensor_desc(d.input_desc.add(), name, inp.tensor, output=False)
    out_names = _OUTPUT_NAMES.get(op.type, [])
    for i, out in enumerate(op.outputs):
        name = out_names[i] if i < len(out_names) else ("y" if i == 0 else f"y{i}")
        tensor_desc(d.output_desc.add(), name, out, output=True)
    return d


def op_text(op: NpuOp) -> str:
    """The OpDef body as printed inside ``graph { op { ... } }`` (4-space indent)."""
    return text_format.MessageToString(op_def(op), indent=4)


def model_def(graph_name: str, ops: Iterable[NpuOp], inputs: list[str], outputs: list[str],
              session_graph_id: str):
    """The whole built graph as one ModelDef (small graphs, and the reference for the streamer)."""
    pb = ge_ir_pb()
    model = pb.ModelDef(name=graph_name)
    graph = model.graph.add(name=graph_name)
    graph.input.extend(inputs)
    graph.output.extend(outputs)
    for op in ops:
        graph.op.append(op_def(op))
    set_attr(graph.attr, "_session_graph_id", session_graph_id)
    return model


class GraphTextWriter:
    """Streams ``text_format.MessageToString(model_def(...))`` op by op into a file."""

    def __init__(self, path, graph_name: str, inputs: list[str], outputs: list[str], session_graph_id: str):
        pb = ge_ir_pb()
        self._file = open(path, "w", encoding="utf-8")
        head = pb.GraphDef(name=graph_name)
        head.input.extend(inputs)
        head.output.extend(outputs)
        tail = pb.GraphDef()
        set_attr(tail.attr, "_session_graph_id", session_graph_id)
        self._tail = text_format.MessageToString(tail, indent=2)
        self._file.write(text_format.MessageToString(pb.ModelDef(name=graph_name)))
        self._file.write("graph {\n" + text_format.MessageToString(head, indent=2))

    def add(self, op: NpuOp, text: str | None = None) -> None:
        """Append one op; ``text`` is its already printed body (see :func:`op_text`), if known."""
        self._file.write("  op {\n" + (text if text is not None else op_text(op)) + "  }\n")

    def close(self) -> None:
        self._file.write(self._tail + "}\n")
        self._file.close()

    def __enter__(self) -> "GraphTextWriter":
        return self

    def __exit__(self, *exc) -> None:
        if not self._file.closed:
            self.close()


def framework_model_def(graph_name: str, framework: Iterable[FrameworkOp], session_graph_id: str):
    """The graph as GE first sees it (stage PreRunBegin): framework ops, fp32, no fusion."""
    pb = ge_ir_pb()
    model = pb.ModelDef(name=graph_name)
    graph = model.graph.add(name=graph_name)
    for graph_id, fop in enumerate(framework):
        d = graph.op.add(name=fop.name, type=_FRAMEWORK_TYPES.get(fop.type, fop.type), id=graph_id)
        d.input.extend(fop.inputs)
        for value in fop.outputs:
            desc = d.output_desc.add(name="y")
            desc.dtype = pb.DataType.Value("DT_INT32" if value.dtype.kind == "i" else "DT_FLOAT")
            desc.shape.dim.extend(value.shape)
            fmt = "NCHW" if value.ndim == 4 else "ND"
            desc.layout = fmt
            set_attr(desc.attr, "origin_format", fmt)
            set_attr(desc.attr, "origin_shape", list(value.shape))
        if fop.type == "Placeholder":
            graph.input.append(f"{fop.name}:0")
    set_attr(graph.attr, "_session_graph_id", session_graph_id)
    return model
