"""A Run in the shape the neighbourhood drawings and trees read (``analysis/neighbourhood``,
``report/layout``): ``ops``, an ordered mapping name -> op (execution order), and ``edges``
with networkx's ``in_edges``/``out_edges``/``edges(nbunch)`` call shape and edge data, as
:class:`~precision_shell.model.op_edges.EdgeView` gives them for a GE graph."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any


def _slot(run: Any, tensor: str) -> int | None:
    index = run.tensor(tensor).index
    return int(index) if index.isdigit() else None


class RunEdges:
    def __init__(self, run: Any):
        self._run = run

    def in_edges(self, key: str, data: bool = True) -> list[tuple[str, str, dict]]:
        run = self._run
        return [(e.src_op, key, {"kind": "data", "src_output": _slot(run, e.src), "dst_input": _slot(run, e.dst),
                                 "exact": e.exact}) for e in run.producers(key)]

    def out_edges(self, key: str, data: bool = True) -> list[tuple[str, str, dict]]:
        run = self._run
        return [(key, e.dst_op, {"kind": "data", "src_output": _slot(run, e.src), "dst_input": _slot(run, e.dst),
                                 "exact": e.exact}) for e in run.consumers(key)]

    def edges(self, keys: Iterable[str], data: bool = True) -> Iterator[tuple[str, str, dict]]:
        for key in keys:
            yield from self.out_edges(key)


class RunGraph:
    """``RunGraph(run).ops`` / ``.edges``: what ``neighbourhood(graph, op, depth)`` asks."""

    def __init__(self, run: Any):
        self.run = run
        self.ops = {o.name: o for o in run.ops}
        self.edges = RunEdges(run)
