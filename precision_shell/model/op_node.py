"""One op of the graph (:class:`OpNode`) and its data inputs (:class:`InputRef`).

An op's name, type, inputs and fusion facts are known from start-up; its *details* (tensor
descriptors, all attrs, id, stream_id) are decoded the first time any of them is read, from the
op's own text span (``formats.graph.scan.OpTextReader``) or from the OpDef message when the
whole file was parsed. Nodes and input refs are tuples: 10^5 of them are built per start-up and
from the start-up cache, and tuples are the cheapest Python objects to make.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from .op_attrs import LazyAttrs, TensorDesc, tensor_desc

__all__ = ["InputRef", "OpDetails", "OpNode", "details_of", "load_details"]

BULK_AFTER = 64  # ops decoded one by one before the details cache is asked for all of them


class OpDetails(NamedTuple):
    id: int
    stream_id: int
    outputs: list[TensorDesc]
    input_descs: list[TensorDesc]
    attrs: Mapping[str, object] | None  # LazyAttrs; None: not read yet (details from the cache)


def details_of(op, memo: dict | None, *, attrs: bool = True) -> OpDetails:
    """The details of a ``ge.proto.OpDef``; ``memo`` shares identical descriptors. Without
    ``attrs`` the message is not kept (OpNode.attrs reads them again from the op's text)."""
    return OpDetails(op.id, op.stream_id,
                     [tensor_desc(i, d, memo) for i, d in enumerate(op.output_desc)],
                     [tensor_desc(i, d, memo) for i, d in enumerate(op.input_desc)],
                     LazyAttrs(op.attr) if attrs else None)


def load_details(lazy: list) -> OpDetails:
    """``lazy`` is an op's holder ``[details or None, reader, start, end]``: fill it once.

    Once a command has decoded BULK_AFTER ops of a file, the reader's ``before_bulk`` hook (the
    session's details cache) may fill every holder at once: ``ni`` or ``pt`` of one op do not
    load 10^5 ops' details, ``vc`` does not decode them one by one. ``reader.decoded`` counts the
    ops decoded here (the session stores the details once many were needed)."""
    details = lazy[0]
    if details is None:
        reader = lazy[1]
        hook = reader.before_bulk
        if hook is not None and reader.decoded >= BULK_AFTER:
            reader.before_bulk = None
            hook()
            if lazy[0] is not None:
                return lazy[0]
        # attrs are left out: a LazyAttrs would keep the whole OpDef alive (vc decodes 10^5 ops)
        details = lazy[0] = details_of(reader.op(lazy[2], lazy[3]), reader.memo, attrs=False)
        reader.decoded += 1
    return details


def span_attrs(reader, start: int, end: int):
    """A zero-argument callable giving the attr map of the op at ``start:end`` (LazyAttrs)."""
    return lambda: reader.op(start, end).attr


class InputRef(NamedTuple):
    """Data input anchor ``index`` of an op and what feeds it."""

    index: int
    producer: str | None  # key of the producing op; None if unconnected or unresolved
    producer_output: int | None
    raw: str  # the OpDef.input text ("a/b:0", "" when unconnected)
    lazy: list  # the op's detail holder (see load_details)

    @property
    def desc(self) -> TensorDesc | None:
        """The graph's input_desc of this anchor (None when the op has fewer descs)."""
        descs = load_details(self.lazy).input_descs
        return descs[self.index] if self.index < len(descs) else None

    def __repr__(self) -> str:
        return f"InputRef({self.index}, {self.producer!r}, {self.producer_output!r}, {self.raw!r})"

    def __eq__(self, other) -> bool:  # the holder is not part of what the input is
        return isinstance(other, InputRef) and self[:4] == other[:4]

    def __ne__(self, other) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash(self[:4])


class OpNode(NamedTuple):
    name: str  # GE op name, as in dump file names
    type: str
    graph: str  # name of the GraphDef holding the op
    order: int  # position in the graph's op list = execution order
    key: str  # unique key in OpGraph.ops (== name unless taken by an earlier graph)
    inputs: list[InputRef]
    control_inputs: list[str]  # keys of ops with a control edge into this one
    original_ops: list[str]  # _datadump_original_op_names ([] when present but empty)
    has_original_attr: bool
    passes: list[str]  # pass_name (s or list.s): fusion passes that produced the op
    kernel: str | None  # {name}_kernelname or the first *_kernelname attr
    engine: str | None  # _ge_attr_op_kernel_lib_name
    lazy: list  # [OpDetails or None, reader, start, end]

    # -- details: decoded on first use ------------------------------------------------------
    @property
    def details(self) -> OpDetails:
        return load_details(self.lazy)

    @property
    def id(self) -> int:
        return load_details(self.lazy).id

    @property
    def stream_id(self) -> int:
        return load_details(self.lazy).stream_id

    @property
    def outputs(self) -> list[TensorDesc]:
        return load_details(self.lazy).outputs

    @property
    def attrs(self) -> Mapping[str, object]:
        details = load_details(self.lazy)
        if details.attrs is None:  # details from the cache: the attrs are read from the text
            lazy = self.lazy
            details = lazy[0] = details._replace(attrs=LazyAttrs(span_attrs(lazy[1], lazy[2], lazy[3])))
        return details.attrs

    # -- derived ----------------------------------------------------------------------------
    @property
    def is_fused(self) -> bool:
        return len(self.original_ops) > 1 or bool(self.passes)

    def golden_names(self) -> list[str]:
        """Framework ops whose golden tensors this op is compared with (formats.md §3.5)."""
        return list(self.original_ops) if self.has_original_attr else [self.name]

    def __repr__(self) -> str:
        return f"OpNode({self.key!r}, {self.type!r})"

    def __eq__(self, other) -> bool:  # what the op is, not its detail holder
        return isinstance(other, OpNode) and self[:12] == other[:12]

    def __ne__(self, other) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash((self.graph, self.key))
