"""A neighbourhood (``analysis.inspect.neighbourhood``) placed for drawing: layers top to bottom.

Layers are networkx's topological generations of the data edges (producers above consumers), so
the picture reads like the DOT file ``ni -s 2`` writes, without needing Graphviz. Within a layer
ops sit near the mean position of their producers (one barycentre sweep), ties in execution
order. Edges that go backwards in execution order (none in a GE graph; possible in a hand-made
one) are left out of the layering so it always exists.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import networkx as nx

from precision_shell.analysis.inspect.neighbourhood import Edge, exec_rank, neighbourhood

MAX_NODES = 60            # a picture wider than a few screens says nothing; keeps the file small
NODE_W, NODE_H = 190, 52
GAP_X, GAP_Y = 24, 46
MARGIN = 12


@dataclass
class PlacedNode:
    key: str
    name: str
    type: str
    cosine: float | None        # lowest output cosine of the last compare, None if not compared
    role: str | None            # root / propagated / producer from the finding lists
    distance: int               # hops from the centre
    hidden: int                 # neighbours beyond the depth, left out
    x: float                    # top-left corner, pixels
    y: float
    failing: bool               # cosine NaN or at/below the threshold


@dataclass
class GraphPicture:
    center: str
    depth: int
    nodes: list[PlacedNode]
    edges: list[Edge]
    width: float
    height: float
    omitted: int = 0            # ops of the neighbourhood not drawn (over MAX_NODES)

    def node(self, key: str) -> PlacedNode:
        return next(n for n in self.nodes if n.key == key)


def _layers(keys: list[str], edges: list[Edge], rank: dict[str, int]) -> list[list[str]]:
    dag = nx.DiGraph()
    dag.add_nodes_from(keys)
    dag.add_edges_from((e.src, e.dst) for e in edges
                       if e.kind == "data" and rank.get(e.src, 0) < rank.get(e.dst, 0))
    layers = [sorted(g, key=lambda k: rank.get(k, 1 << 30)) for g in nx.topological_generations(dag)]
    placed: dict[str, float] = {}
    for layer in layers:
        def pull(key: str) -> float:
            above = [placed[p] for p in dag.predecessors(key) if p in placed]
            return sum(above) / len(above) if above else math.inf
        layer.sort(key=lambda k: (pull(k), rank.get(k, 1 << 30)))
        for slot, key in enumerate(layer):
            placed[key] = slot - (len(layer) - 1) / 2
    return layers


def neighbourhood_picture(graph: Any, center: str, depth: int, cosines: dict[str, float],
                          roles: dict[str, str], threshold: float) -> GraphPicture:
    """The depth-``depth`` neighbourhood of the op keyed ``center``, laid out in pixels."""
    hood = neighbourhood(graph, center, depth)
    rank = exec_rank(graph)
    # nearest first, then in execution order (the order neighbourhood() gives): the farthest
    # ring is cut, and each op left with neighbours not drawn says how many
    keep = set(hood.nodes[:MAX_NODES])
    edges = [e for e in hood.edges if e.src in keep and e.dst in keep]
    cut: dict[str, set[str]] = {}
    for e in hood.edges:
        if e.kind == "data" and (e.src in keep) != (e.dst in keep):
            inside, outside = (e.src, e.dst) if e.src in keep else (e.dst, e.src)
            cut.setdefault(inside, set()).add(outside)
    hidden = {k: hood.hidden.get(k, 0) + len(cut.get(k, ())) for k in keep}
    keys = [k for k in hood.nodes if k in keep]
    layers = _layers(keys, edges, rank)
    widest = max(len(layer) for layer in layers)
    width = 2 * MARGIN + widest * NODE_W + (widest - 1) * GAP_X
    nodes = []
    for row, layer in enumerate(layers):
        left = (width - (len(layer) * NODE_W + (len(layer) - 1) * GAP_X)) / 2
        for slot, key in enumerate(layer):
            op = graph.ops.get(key)
            name = getattr(op, "name", key)       # compare rows and findings use the GE name
            cos = cosines.get(name)
            nodes.append(PlacedNode(
                key, name, getattr(op, "type", "?"), cos, roles.get(name), hood.distance[key],
                hidden[key], left + slot * (NODE_W + GAP_X), MARGIN + row * (NODE_H + GAP_Y),
                cos is not None and (cos != cos or cos <= threshold)))
    height = 2 * MARGIN + len(layers) * NODE_H + (len(layers) - 1) * GAP_Y
    return GraphPicture(center, depth, nodes, edges, width, height, len(hood.nodes) - len(keys))
