"""One op of any :class:`~precision_shell.model.runs.Run` as a kernel call: which reference
kernel, fed by which tensors (and constants), with which attributes, making which outputs.

A GE op is its type's kernel with the graph's attributes; a framework entry is its API bound
by :mod:`.api_calls` to the same table, from the arguments ``dump.json`` recorded. ``replay``
and ``impact`` both start here, so one kernel table serves every kind of dump."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .api_calls import Binding, NoKernel, TensorArg, bind_call
from .kernels import KERNELS, Kernel

__all__ = ["NoKernel", "OpCall", "op_call", "plain_attrs"]

_SCALARS = (str, int, float, bool)
# entries that only repeat the values of the calls inside them (msprobe mix level)
CONTAINER_PREFIXES = ("Module.", "Cell.")


@dataclass
class OpCall:
    op: str
    type: str                          # GE op type or framework API
    kernel: Kernel
    inputs: list                       # per kernel input: a tensor name (str) or a float64 array
    attrs: dict
    outputs: list[str]                 # output tensor names, in the kernel's order
    output_dtypes: list[str]           # dtype names as the run gives them
    output_shapes: list[tuple | None]
    fused_passes: list[str] = field(default_factory=list)

    @property
    def tensor_inputs(self) -> list[str]:
        return [x for x in self.inputs if isinstance(x, str)]


def plain_attrs(node: Any) -> dict:
    """A graph op's attributes a kernel reads, as JSON values (GE's own bookkeeping left out);
    a fused Conv2D+...+Relu says so through the framework ops it replaces."""
    out = {}
    for key, value in node.attrs.items():
        if key.startswith("_") or key.endswith("_kernelname"):
            continue
        if isinstance(value, _SCALARS) or (isinstance(value, list) and all(isinstance(v, _SCALARS) for v in value)):
            out[key] = value
    out["fused_relu"] = any(name.lower().endswith("relu") for name in node.original_ops[1:])
    return out


def _by_index(tensors: list) -> list:
    def key(t):
        head = t.index.split(".")[0]
        return (0, int(head), t.index) if head.isdigit() else (1, 0, t.index)
    return sorted(tensors, key=key)


def op_call(run: Any, op: Any) -> OpCall:
    """The kernel call of ``op``; :class:`NoKernel` (one short reason) when it has none."""
    outputs = [t for t in _by_index(op.outputs) if t.io == "output"]
    node = getattr(op, "node", None)
    entry = getattr(op, "entry", None)
    if entry is not None:
        binding = _framework_binding(op, entry, len(outputs))
        kernel = KERNELS[binding.op_type]
        inputs = [x.name if isinstance(x, TensorArg) else np.asarray(x, dtype=np.float64) for x in binding.inputs]
        attrs, passes = binding.attrs, []
    else:
        kernel = KERNELS.get(op.kernel_key)
        if kernel is None:
            raise NoKernel(f"no reference kernel for {op.kernel_key}")
        inputs = [t.name for t in _by_index(op.inputs)]
        attrs = plain_attrs(node) if node is not None else {}
        passes = list(getattr(node, "passes", []) or [])
    return OpCall(op.name, op.kernel_key, kernel, inputs, attrs, [t.name for t in outputs],
                  [t.dtype or "float64" for t in outputs], [t.shape for t in outputs], passes)


def _framework_binding(op: Any, entry: Any, n_out: int) -> Binding:
    if op.type.startswith(CONTAINER_PREFIXES):
        raise NoKernel(f"{op.name} is a module entry: its values are those of the API calls inside it")
    if op.kind not in ("forward", "kernel"):
        raise NoKernel(f"{op.name} is a {op.kind} entry: only forward calls are replayed")
    args, kwargs = call_arguments(op.name, entry.leaves)
    return bind_call(op.kernel_key, args, kwargs, n_out, lambda name: name in KERNELS)


def call_arguments(entry_name: str, leaves: list) -> tuple[list, dict]:
    """The positional and keyword arguments a ``dump.json`` entry recorded: tensors as
    :class:`TensorArg`, plain values as they are, nested lists rebuilt (``input.1.0``)."""
    args: dict[int, Any] = {}
    kwargs: dict[str, Any] = {}
    for leaf in leaves:
        root, _, rest = leaf.path.partition(".")
        if root != "input" or not rest:
            continue
        value = TensorArg(f"{entry_name}:input:{rest}") if leaf.is_tensor else leaf.value
        head, _, sub = rest.partition(".")
        if head.isdigit():
            if sub:
                args.setdefault(int(head), []).append(value)
            else:
                args[int(head)] = value
        elif sub:
            kwargs.setdefault(head, []).append(value)
        else:
            kwargs[head] = value
    positional = [args.get(i) for i in range(max(args) + 1)] if args else []
    return positional, kwargs
