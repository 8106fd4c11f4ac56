"""The run model's types: what every analysis may ask of a dump, whatever wrote it.

:class:`Run`, :class:`Op`, :class:`Tensor` and :class:`Pairing` are protocols (structural: an
adapter's classes need not inherit from them); :class:`Edge`, :class:`Stats` and
:class:`TensorInfo` are plain values adapters may use as they are. See the package docstring
for how to write an adapter.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np

KINDS = ("ge", "msprobe", "capture", "mindspore-graph")   # Run.kind


@dataclass(frozen=True)
class Stats:
    """A tensor's dumped statistics; each None when the dump did not record it."""
    max: float | None = None
    min: float | None = None
    mean: float | None = None
    norm: float | None = None

    def overflows(self) -> bool | None:
        """NaN/Inf judged from the statistics, as msprobe does: Max or Min non-finite (an fp16
        Norm overflows on finite values: 8200 squared is past 65504). None: neither recorded."""
        ends = [v for v in (self.max, self.min) if v is not None]
        if not ends:
            return None
        return any(not math.isfinite(v) for v in ends)


@dataclass(frozen=True)
class Edge:
    """Dataflow: the output tensor ``src`` of ``src_op`` feeds the input ``dst`` of ``dst_op``."""
    src: str
    dst: str
    src_op: str
    dst_op: str
    exact: bool          # recorded by the dump (graph, capture sidecar); False: inferred


@runtime_checkable
class Tensor(Protocol):
    """One input or output of an op."""
    name: str            # unique in its run: OP:output:N, OP:input:N, ENTRY:parameters:weight
    op: str              # the op's name
    io: str              # input | output | parameters | grad

    @property
    def index(self) -> str: ...          # "0", "1.0" (a nested msprobe leaf), "weight"
    @property
    def dtype(self) -> str | None: ...   # numpy / ml_dtypes name, or the dump's ("DT_FLOAT16")
    @property
    def shape(self) -> tuple[int, ...] | None: ...   # logical shape
    @property
    def stats(self) -> Stats | None: ...             # None: the dump has no statistics
    @property
    def has_data(self) -> bool: ...                  # its values can be loaded
    def printed(self, golden: bool = False) -> str: ...   # as tables print and `pt` takes it


@runtime_checkable
class Op(Protocol):
    """One executed op (a GE kernel, an msprobe API or module entry) in execution order."""
    @property
    def name(self) -> str: ...
    @property
    def type(self) -> str: ...           # GE op type; msprobe "Functional.linear"
    @property
    def kind(self) -> str: ...           # kernel | forward | backward | parameters_grad | ...
    @property
    def order(self) -> int: ...          # position in Run.ops
    @property
    def kernel_key(self) -> str: ...     # what replay's kernel table is indexed by
    @property
    def inputs(self) -> list: ...        # [Tensor]
    @property
    def outputs(self) -> list: ...       # [Tensor] (gradients of a parameters_grad entry too)
    @property
    def tensors(self) -> list: ...       # every Tensor of the op, in dump order


@runtime_checkable
class Run(Protocol):
    """One dump set: one (kind, rank, step) of one side."""
    kind: str            # one of KINDS
    warnings: list[str]  # problems found building it (one line each, file and reason)

    @property
    def path(self) -> str: ...
    @property
    def ops(self) -> Sequence: ...       # [Op] in execution order
    @property
    def extras(self) -> dict[str, Any]: ...   # optional facets, present only when the data has them
    def op(self, name: str) -> Op: ...   # exact, else the one op containing it (CommandError)
    def find(self, text: str) -> list: ...
    def tensor(self, name: str) -> Tensor: ...   # by its name or another name the dump gives it
    def load(self, name: str) -> np.ndarray: ...  # values now (FormatError when unreadable)
    def producer(self, tensor: str) -> Edge | None: ...
    def producers(self, op: str) -> list[Edge]: ...
    def consumers(self, op: str) -> list[Edge]: ...
    def downstream(self, op: str) -> list[str]: ...
    def module_path(self, op: str) -> list[str]: ...   # enclosing modules ([] when none)


@runtime_checkable
class Pairing(Protocol):
    """Which golden tensor each target tensor is compared with."""
    def golden_for(self, tensor: Tensor) -> Tensor | None: ...


@dataclass(frozen=True)
class TensorInfo:
    """A Tensor for adapters without a tensor class of their own (a golden .npy file)."""
    name: str
    op: str
    io: str
    index: str
    dtype: str | None = None
    shape: tuple[int, ...] | None = None
    stats: Stats | None = None
    has_data: bool = False
    path: str | None = None

    def printed(self, golden: bool = False) -> str:
        from ..tensor_ref import tensor_name

        return tensor_name(self.op, self.io, self.index, golden=golden)


def downstream_of(run: Run, op: str) -> list[str]:
    """Every op reachable from ``op`` along ``run``'s dataflow edges, in execution order."""
    seen: set[str] = set()
    stack = [run.op(op).name]
    while stack:
        for edge in run.consumers(stack.pop()):
            if edge.dst_op not in seen:
                seen.add(edge.dst_op)
                stack.append(edge.dst_op)
    return [o.name for o in run.ops if o.name in seen]
