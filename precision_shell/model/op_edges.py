"""The edge queries pshell's panels need (``in_edges``, ``out_edges``, ``edges``), answered from
the op graph's own input lists, with networkx's call shape and edge data.

Building the networkx MultiDiGraph of a 50k-op graph takes ~2.5 s (and networkx's import 0.3 s):
too much for ``ni`` or ``li`` of one op. ``OpGraph.nx`` remains for whole-graph algorithms.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

__all__ = ["EdgeView"]

Edge = tuple[str, str, dict]


class EdgeView:
    def __init__(self, graph: Any):
        self._graph = graph

    def in_edges(self, key: str, data: bool = True) -> list[Edge]:
        """Data edges into ``key`` in input-anchor order, then its control edges."""
        node = self._graph.ops[key]
        edges = [(r.producer, key, {"kind": "data", "src_output": r.producer_output, "dst_input": r.index})
                 for r in node.inputs if r.producer is not None]
        edges += [(src, key, {"kind": "control"}) for src in node.control_inputs]
        return edges

    def out_edges(self, key: str, data: bool = True) -> list[Edge]:
        """Data edges out of ``key`` (consumers in graph order), then its control edges."""
        graph = self._graph
        graph.ops[key]  # KeyError for an unknown op, as networkx raises for a missing node
        edges = [(key, dst, {"kind": "data", "src_output": out, "dst_input": index})
                 for dst, out, index in graph.consumer_edges(key)]
        edges += [(key, dst, {"kind": "control"}) for dst in graph.control_consumers(key)]
        return edges

    def edges(self, keys: Iterable[str], data: bool = True) -> Iterator[Edge]:
        """The out-edges of each op of ``keys`` (networkx's ``edges(nbunch)``)."""
        for key in keys:
            yield from self.out_edges(key)
