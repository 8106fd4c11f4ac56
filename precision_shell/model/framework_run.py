"""One rank of an msprobe dump as ops, tensors and dataflow edges (framework-dumps.md A, B3).

Each ``dump.json`` entry is an op, in dump (execution) order; its tensor leaves are the op's
tensors, named ``ENTRY:ROOT:PATH`` (``Functional.linear.3.forward:output:0``,
``...:input:1.0``, ``Module.fc1.Linear.parameters_grad.0:weight``), beside msprobe's own
per-tensor compare name (``Functional.linear.3.forward.output.0``, :attr:`FrameworkTensor.
compare_name`).

Dataflow edges link an input tensor to the output that produced it:

- *exact*, from pshell's capture sidecar ``pshell_meta.json`` beside ``dump.json``:
  ``{"pshell_meta": 1, "edges": {"<input compare name>": "<output compare name>", ...}}``
  (other keys, e.g. ``capture`` settings, are kept in :attr:`FrameworkRun.meta`);
- otherwise *inferred*: an input is linked to the latest earlier output with the same dtype,
  shape, Max, Min, Mean, Norm (and md5 when dumped). In a mix-level dump a module's output
  repeats the output of the last API call inside it, so the producers are the API entries
  whenever the run has any (modules only at L0), and a module entry's input links to the
  API that made it.

The module hierarchy comes from ``construct.json`` (``{node: parent}``). Tensors load lazily
through the readers; nothing here reads tensor bytes until :meth:`FrameworkRun.load` is called.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from ..errors import CommandError, FormatError
from ..formats.msprobe.dump import Entry, Leaf, MsprobeDump, RankDump, load_leaf
from ..formats.msprobe.entry_list import entry_totals
from ..formats.msprobe.json_files import load_json
from .runs.base import Edge, Stats, downstream_of

__all__ = ["Edge", "FrameworkOp", "FrameworkRun", "FrameworkTensor", "RunSummary", "compare_name",
           "module_chain", "open_runs", "summarize", "tensor_name"]

SIDECAR = "pshell_meta.json"
_MAX_MODULE_DEPTH = 256


@dataclass(frozen=True)
class FrameworkTensor:
    name: str            # ENTRY:ROOT:PATH
    op: str              # the entry
    io: str              # input | output | parameters | grad (a parameters_grad leaf)
    leaf: Leaf

    @property
    def compare_name(self) -> str:
        """msprobe's per-tensor name (its compare CSV's ``NPU Name``)."""
        return compare_name(self.op, self.leaf)

    # --- the run model's Tensor (model/runs) ----------------------------------------------------
    @property
    def index(self) -> str:
        """``0``, ``1.0`` (a nested leaf), or the parameter's name."""
        return self.name[len(self.op) + len(self.io) + 2:] if self.io in ("input", "output", "parameters") \
            else self.name[len(self.op) + 1:]

    @property
    def dtype(self) -> str | None:
        return self.leaf.dtype

    @property
    def shape(self) -> tuple[int, ...] | None:
        return self.leaf.shape

    @property
    def stats(self) -> Stats | None:
        leaf = self.leaf
        if leaf.max is None and leaf.min is None and leaf.mean is None and leaf.norm is None:
            return None
        return Stats(leaf.max, leaf.min, leaf.mean, leaf.norm)

    @property
    def has_data(self) -> bool:
        return bool(self.leaf.file)

    def printed(self, golden: bool = False) -> str:
        """The name tables print and ``pt`` takes: ``ENTRY:0``, ``ENTRY:in1``, ``golden:...``;
        parameters and gradients keep their own (``ENTRY:parameters:weight``, ``ENTRY:weight``)."""
        from ..model.tensor_ref import tensor_name

        if self.io in ("input", "output"):
            return tensor_name(self.op, self.io, self.name.rsplit(":", 1)[1], golden=golden)
        return ("golden:" if golden else "") + self.name


@dataclass
class FrameworkOp:
    index: int           # position in dump order
    entry: Entry
    tensors: list[FrameworkTensor] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.entry.name

    @property
    def kind(self) -> str:
        return self.entry.kind

    @property
    def order(self) -> int:
        return self.index

    @property
    def type(self) -> str:
        """The API (``Functional.linear``, ``Tensor.__add__``, ``Mint.softmax``) or module class
        path (``Module.fc1.Linear``) without call number and direction."""
        return f"{self.entry.prefix}.{self.entry.op}"

    @property
    def kernel_key(self) -> str:
        return self.type

    @property
    def inputs(self) -> list[FrameworkTensor]:
        return [t for t in self.tensors if t.io == "input"]

    @property
    def outputs(self) -> list[FrameworkTensor]:
        return [t for t in self.tensors if t.io in ("output", "grad")]


def compare_name(entry: str, leaf: Leaf) -> str:
    """msprobe's row name of a leaf: its tensor file's stem when it has one (msprobe's
    ``gen_op_item`` names rows after ``data_name``), else ``ENTRY.PATH``."""
    if leaf.data_name:
        return leaf.data_name.rsplit(".", 1)[0]
    return f"{entry}.{leaf.path}"


def tensor_name(entry: str, leaf: Leaf) -> tuple[str, str]:
    """(pshell tensor name, io) of a leaf: ``input.1.0`` -> ``ENTRY:input:1.0``."""
    root, _, rest = leaf.path.partition(".")
    if root in ("input", "output", "parameters") and rest:
        return f"{entry}:{root}:{rest}", root
    return f"{entry}:{leaf.path}", "grad"     # a parameters_grad leaf: its path is the param name


def entry_op(index: int, entry: Entry) -> FrameworkOp:
    """The op of one entry (its position ``index`` in dump order) with its tensor leaves."""
    op = FrameworkOp(index, entry)
    for leaf in entry.leaves:
        if leaf.is_tensor:
            name, io = tensor_name(entry.name, leaf)
            op.tensors.append(FrameworkTensor(name, entry.name, io, leaf))
    return op


@dataclass(frozen=True)
class RunSummary:
    framework: str | None
    task: str | None
    level: str | None
    steps: list[int | None]
    ranks: list[str]
    entries: int
    kinds: dict[str, int]        # forward / backward / parameters_grad / unknown -> count
    tensors: int
    tensor_files: int


class FrameworkRun:
    """One ``dump.json`` (one step of one rank) as ops in dump order: the run model's
    :class:`~precision_shell.model.runs.base.Run` of msprobe dumps and pshell captures."""

    @property
    def kind(self) -> str:
        """``capture`` when pshell's capture wrote it (its sidecar says so), else ``msprobe``."""
        return "capture" if "pshell_meta" in self.meta else "msprobe"

    @property
    def extras(self) -> dict:
        """The optional facets this dump has: ``modules`` (construct.json), ``stack`` (source
        lines per entry), ``meta`` (the capture sidecar's other keys)."""
        found: dict = {}
        if self.rank.construct:
            found["modules"] = self.rank.construct
        if self.rank.stack:
            found["stack"] = self.rank.stack
        if self.meta:
            found["meta"] = self.meta
        return found

    def __init__(self, rank: RankDump):
        self.rank = rank
        self.warnings: list[str] = list(rank.warnings)
        self.ops: list[FrameworkOp] = []
        self._ops: dict[str, FrameworkOp] = {}
        self._tensors: dict[str, FrameworkTensor] = {}
        self._by_compare_name: dict[str, FrameworkTensor] = {}
        for entry in rank.entries:
            op = entry_op(len(self.ops), entry)
            for tensor in op.tensors:
                self._tensors[tensor.name] = tensor
                self._by_compare_name[tensor.compare_name] = tensor
            self.ops.append(op)
            self._ops[entry.name] = op
        self.meta: dict = {}
        self.edges: list[Edge] = self._read_sidecar() if self._has_sidecar() else self._infer_edges()
        self._producer: dict[str, Edge] = {e.dst: e for e in self.edges}
        self._consumers: dict[str, list[Edge]] = {}
        for e in self.edges:
            self._consumers.setdefault(e.src_op, []).append(e)

    # --- lookup ---------------------------------------------------------------------------------

    @property
    def path(self) -> str:
        return self.rank.location.path

    def op(self, name: str) -> FrameworkOp:
        """The op of that exact entry name, else the only one whose name contains it."""
        if name in self._ops:
            return self._ops[name]
        found = self.find(name)
        if len(found) == 1:
            return found[0]
        if not found:
            from .suggest import did_you_mean

            raise CommandError(f"no entry named {name!r} in {self.path}" + did_you_mean(name, self._ops))
        names = ", ".join(o.name for o in found[:5])
        raise CommandError(f"{name!r} matches {len(found)} entries ({names}{', ...' if len(found) > 5 else ''})")

    def find(self, text: str) -> list[FrameworkOp]:
        return [o for o in self.ops if text in o.name]

    def tensor(self, name: str) -> FrameworkTensor:
        """By pshell name (``ENTRY:output:0``) or msprobe compare name (``ENTRY.output.0``)."""
        tensor = self._tensors.get(name) or self._by_compare_name.get(name)
        if tensor is None:
            raise CommandError(f"no tensor {name!r} in {self.path}")
        return tensor

    @property
    def tensors(self) -> list[FrameworkTensor]:
        return list(self._tensors.values())

    def load(self, name: str) -> np.ndarray:
        """The tensor's values, read from its file now (FormatError when it has none)."""
        return load_leaf(self.tensor(name).leaf)

    # --- dataflow -------------------------------------------------------------------------------

    def producer(self, tensor: str) -> Edge | None:
        return self._producer.get(self.tensor(tensor).name)

    def producers(self, op: str) -> list[Edge]:
        """The edges into ``op``'s inputs, in input order."""
        return [self._producer[t.name] for t in self.op(op).inputs if t.name in self._producer]

    def consumers(self, op: str) -> list[Edge]:
        """The edges out of ``op``'s outputs, in consumer dump order."""
        return list(self._consumers.get(self.op(op).name, ()))

    def downstream(self, op: str) -> list[str]:
        """Every op reachable from ``op`` along dataflow edges, in dump order."""
        return downstream_of(self, op)

    @cached_property
    def graph(self):
        """A networkx DiGraph: nodes are entry names (attrs index, kind), edges carry the tensor
        names and ``exact``; parallel tensors between two ops are kept in ``tensors``."""
        import networkx as nx

        g = nx.DiGraph()
        for o in self.ops:
            g.add_node(o.name, index=o.index, kind=o.kind)
        for e in self.edges:
            if g.has_edge(e.src_op, e.dst_op):
                g.edges[e.src_op, e.dst_op]["tensors"].append((e.src, e.dst))
            else:
                g.add_edge(e.src_op, e.dst_op, tensors=[(e.src, e.dst)], exact=e.exact)
        return g

    # --- modules --------------------------------------------------------------------------------

    def module_path(self, op: str) -> list[str]:
        """Enclosing modules of ``op`` from construct.json, outermost first ([] at L1)."""
        return module_chain(self.rank.construct, self.rank.construct.get(self.op(op).name))

    def in_module(self, module: str) -> list[FrameworkOp]:
        """Ops whose module path has a module whose name contains ``module``."""
        return [o for o in self.ops if any(module in m for m in self.module_path(o.name))]

    # --- summary --------------------------------------------------------------------------------

    def summary(self) -> RunSummary:
        return summarize([self.rank])

    # --- edges ----------------------------------------------------------------------------------

    def _has_sidecar(self) -> bool:
        return os.path.isfile(os.path.join(self.path, SIDECAR))

    def _read_sidecar(self) -> list[Edge]:
        path = os.path.join(self.path, SIDECAR)
        try:
            doc = load_json(path)
            if not isinstance(doc, dict) or not isinstance(doc.get("edges"), dict):
                raise FormatError(path, "not a pshell_meta object with an 'edges' object")
        except FormatError as e:
            self.warnings.append(f"{e}; dataflow edges inferred instead")
            return self._infer_edges()
        self.meta = {k: v for k, v in doc.items() if k != "edges"}
        edges: list[Edge] = []
        for dst_name, src_name in doc["edges"].items():
            dst = self._by_compare_name.get(dst_name)
            src = self._by_compare_name.get(src_name) if isinstance(src_name, str) else None
            if dst is None or src is None:
                self.warnings.append(f"{path}: edge {dst_name!r:.80} <- {src_name!r:.80} names an "
                                     f"unknown tensor, skipped")
                continue
            edges.append(Edge(src.name, dst.name, src.op, dst.op, True))
        return edges

    def _infer_edges(self) -> list[Edge]:
        has_api = any(o.entry.scope == "api" for o in self.ops)
        latest: dict[tuple, FrameworkTensor] = {}
        edges: list[Edge] = []
        for o in self.ops:
            for t in o.inputs:
                key = _stat_key(t.leaf)
                src = latest.get(key) if key is not None else None
                if src is not None and src.op != o.name:
                    edges.append(Edge(src.name, t.name, src.op, o.name, False))
            if has_api and o.entry.scope != "api":
                continue
            for t in o.outputs:
                key = _stat_key(t.leaf)
                if key is not None:
                    latest[key] = t
        return edges


def _stat_key(leaf: Leaf) -> tuple | None:
    stats = (leaf.max, leaf.min, leaf.mean, leaf.norm)
    if all(s is None for s in stats) and leaf.md5 is None:
        return None     # a tensor recovered from its file name: nothing to match on
    # NaN != NaN would never match: key on the text instead
    return (leaf.dtype, leaf.shape, *(repr(s) for s in stats), leaf.md5)


def module_chain(construct: dict, node: str | None) -> list[str]:
    """``node`` and the modules enclosing it (construct.json), outermost first; a cycle or a
    chain deeper than 256 stops the walk."""
    chain: list[str] = []
    while node is not None and node not in chain and len(chain) < _MAX_MODULE_DEPTH:
        chain.append(node)
        node = construct.get(node)
    return chain[::-1]


def summarize(ranks: list[RankDump]) -> RunSummary:
    kinds: dict[str, int] = {}
    tensors = files = 0
    for r in ranks:     # without making Entry objects or building leaves (info at start-up)
        rank_kinds, rank_tensors, rank_files = entry_totals(r.entries)
        for kind, count in rank_kinds.items():
            kinds[kind] = kinds.get(kind, 0) + count
        tensors += rank_tensors
        files += rank_files

    def first(attr):
        values = [getattr(r, attr) for r in ranks if getattr(r, attr) is not None]
        return values[0] if values else None

    steps = sorted({r.location.step for r in ranks}, key=lambda s: -1 if s is None else s)
    return RunSummary(first("framework"), first("task"), first("level"), steps,
                      list(dict.fromkeys(r.location.rank for r in ranks)),
                      sum(kinds.values()), kinds, tensors, files)


def open_runs(dump: MsprobeDump) -> list[FrameworkRun]:
    """One FrameworkRun per (step, rank) folder of a dump, in step then rank order."""
    return [FrameworkRun(rank) for rank in dump.ranks]
