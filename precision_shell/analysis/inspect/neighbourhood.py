"""Looking around one op: its depth-N neighbourhood (``ni -s N``, as DOT) and its producer and
consumer trees (``li`` / ``lo``).

Distance is counted over data edges in either direction, so "depth 2" is what a user sees two
hops away in a picture of the graph whichever way the arrows point. Control edges never widen the
neighbourhood (they would pull in unrelated ops through a barrier) but are drawn, dashed, when
both ends are already in it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from precision_shell.analysis.inspect.node_panel import known_cosines, known_roles
from precision_shell.model.tensor_ref import tensor_name

# Fill colours of suspect ops; the centre op gets a thick border instead of a colour, so a suspect
# centre still shows its role.
_ROLE_FILL = {"root": "#f4a3a3", "producer": "#f4a3a3", "propagated": "#fcd9a8"}
_LOW_COSINE_FILL = "#fff3b0"
_PASSING_FILL = "#d8f0d0"
_UNCOMPARED_FILL = "white"


def _legend(threshold: float) -> list[tuple[str, str]]:
    """(fill, meaning) in the order the legend shows them."""
    return [(_ROLE_FILL["root"], "root / overflow producer"), (_ROLE_FILL["propagated"], "propagated"),
            (_LOW_COSINE_FILL, f"cosine <= {threshold:g} or NaN"), (_PASSING_FILL, f"cosine > {threshold:g}"),
            (_UNCOMPARED_FILL, "not compared")]


def node_fill(role: str | None, cos: float | None, threshold: float) -> str:
    """A node's colour: its finding role first, else its output cosine against the threshold."""
    if role in _ROLE_FILL:
        return _ROLE_FILL[role]
    if cos is None:
        return _UNCOMPARED_FILL
    return _LOW_COSINE_FILL if math.isnan(cos) or cos <= threshold else _PASSING_FILL


@dataclass
class Edge:
    src: str
    dst: str
    kind: str                   # "data" | "control"
    src_output: int | None = None
    dst_input: int | None = None


@dataclass
class Neighbourhood:
    center: str
    depth: int
    distance: dict[str, int]                    # op -> hops from the centre (data edges)
    edges: list[Edge] = field(default_factory=list)
    hidden: dict[str, int] = field(default_factory=dict)   # frontier op -> neighbours left out

    @property
    def nodes(self) -> list[str]:
        return list(self.distance)


def _data_neighbours(nxg, name: str):
    for _, other, data in nxg.out_edges(name, data=True):
        if data.get("kind", "data") == "data":
            yield other
    for other, _, data in nxg.in_edges(name, data=True):
        if data.get("kind", "data") == "data":
            yield other


def exec_rank(graph: Any) -> dict[str, int]:
    """op key -> position in execution order (``graph.ops`` is kept in that order)."""
    return {key: i for i, key in enumerate(graph.ops)}


def neighbourhood(graph: Any, center: str, depth: int) -> Neighbourhood:
    """Every op within ``depth`` data-edge hops of the op keyed ``center`` and the edges among
    them."""
    if depth < 0:
        raise ValueError("depth must be >= 0")
    nxg = graph.edges  # networkx's edge queries, without building the networkx graph
    distance = {center: 0}
    frontier = [center]
    for hop in range(1, depth + 1):
        reached = []
        for name in frontier:
            for other in _data_neighbours(nxg, name):
                if other not in distance:
                    distance[other] = hop
                    reached.append(other)
        frontier = reached
    rank = exec_rank(graph)
    order = {name: rank.get(name, 1 << 30) for name in distance}
    distance = dict(sorted(distance.items(), key=lambda kv: (kv[1], order[kv[0]], kv[0])))
    edges = []
    for src, dst, data in nxg.edges(list(distance), data=True):
        if dst in distance:
            edges.append(Edge(src, dst, data.get("kind", "data"), data.get("src_output"), data.get("dst_input")))
    edges.sort(key=lambda e: (order[e.src], order[e.dst], e.kind, e.src_output or 0, e.dst_input or 0))
    hidden = {}
    for name, dist in distance.items():
        if dist == depth:
            outside = {o for o in _data_neighbours(nxg, name) if o not in distance}
            if outside:
                hidden[name] = len(outside)
    return Neighbourhood(center, depth, distance, edges, hidden)


# ---------------------------------------------------------------------------------------------
# DOT

def dot_quote(text: str) -> str:
    """A DOT double-quoted string (backslashes and quotes escaped)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _label_line(text: str) -> str:
    # inside a label ``\n`` is a line break, so escape the text first and join with \n after
    return text.replace("\\", "\\\\").replace('"', '\\"')


def to_dot(hood: Neighbourhood, graph: Any, *, cosines: dict[str, float] | None = None,
           roles: dict[str, str] | None = None, threshold: float = 0.98) -> str:
    """The neighbourhood as a Graphviz digraph: nodes labelled with name, type and (when a
    compare result exists) cosine; suspects filled by role; the centre drawn bold."""
    cosines = cosines or {}
    roles = roles or {}
    lines = [f"digraph {dot_quote(f'{hood.center} depth {hood.depth}')} {{",
             "  rankdir=TB;",
             '  node [shape=box, style="rounded,filled", fillcolor=white, fontname="Helvetica", fontsize=10];',
             '  edge [fontname="Helvetica", fontsize=8];']
    used: set[str] = set()
    for name in hood.nodes:
        op = graph.ops.get(name)
        real = getattr(op, "name", name)      # findings and compare rows use the GE name
        parts = [_label_line(name), _label_line(getattr(op, "type", "?"))]
        attrs = []
        cos = cosines.get(real)
        if cos is not None:
            parts.append("cos nan" if math.isnan(cos) else f"cos {cos:.4f}")
        role = roles.get(real)
        if role:
            parts.append(role)
        if name in hood.hidden:
            parts.append(f"+{hood.hidden[name]} more")
        fill = node_fill(role, cos, threshold)
        used.add(fill)
        attrs.append(f'fillcolor="{fill}"')
        if name == hood.center:
            attrs.append("penwidth=3")
        attrs.insert(0, 'label="' + "\\n".join(parts) + '"')
        lines.append(f"  {dot_quote(name)} [{', '.join(attrs)}];")
    for e in hood.edges:
        if e.kind == "control":
            lines.append(f"  {dot_quote(e.src)} -> {dot_quote(e.dst)} [style=dashed, color=gray40];")
        else:
            lines.append(f'  {dot_quote(e.src)} -> {dot_quote(e.dst)} [label="{e.src_output}→{e.dst_input}"];')
    # the legend: the colours this picture uses, and the centre's bold border (node ids start
    # with an invisible separator, U+2063, so they cannot be an op's name)
    lines += ['  subgraph "cluster_legend" {', '    label="legend"; fontname="Helvetica"; fontsize=10;']
    keys = [(fill, meaning) for fill, meaning in _legend(threshold) if fill in used]
    for k, (fill, meaning) in enumerate(keys):
        lines.append(f'    "\u2063legend {k}" [label={dot_quote(meaning)}, fillcolor="{fill}"];')
    lines.append(f'    "\u2063legend centre" [label={dot_quote(f"centre: {hood.center}")}, penwidth=3];')
    lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def neighbourhood_dot(session: Any, center: str, depth: int) -> tuple[Neighbourhood, str]:
    hood = neighbourhood(session.graph, center, depth)
    text = to_dot(hood, session.graph, cosines=known_cosines(session), roles=known_roles(session),
                  threshold=session.settings.threshold)
    return hood, text


# ---------------------------------------------------------------------------------------------
# producer / consumer trees

@dataclass
class TreeRow:
    depth: int                  # 1 = a direct input/output of the root op
    op: str | None              # None: an unconnected optional input
    type: str
    edge: str                   # "data" | "control"
    src_output: int | None      # output index on the producer
    dst_input: int | None       # input index on the consumer
    parent: str
    repeated: bool = False      # already expanded above: not expanded again

    def to_json(self) -> dict:
        return {"depth": self.depth, "op": self.op, "type": self.type, "edge": self.edge,
                "output": self.src_output, "input": self.dst_input, "parent": self.parent,
                "repeated": self.repeated}


def _links(graph: Any, name: str, direction: str, control: bool, rank: dict[str, int]):
    """(other op, kind, src_output, dst_input) of each edge into (``inputs``) or out of an op,
    in anchor order; unconnected optional inputs appear with other=None."""
    nxg = graph.edges
    out = []
    if direction == "inputs":
        op = graph.ops.get(name)
        connected = set()
        for src, _, data in nxg.in_edges(name, data=True):
            if data.get("kind", "data") == "data":
                out.append((src, "data", data.get("src_output"), data.get("dst_input")))
                connected.add(data.get("dst_input"))
            elif control:
                out.append((src, "control", None, None))
        for ref in getattr(op, "inputs", []) or []:
            if ref.producer is None and ref.index not in connected:
                out.append((None, "data", None, ref.index))
    else:
        for _, dst, data in nxg.out_edges(name, data=True):
            if data.get("kind", "data") == "data":
                out.append((dst, "data", data.get("src_output"), data.get("dst_input")))
            elif control:
                out.append((dst, "control", None, None))

    def key(link):
        other, kind, src_output, dst_input = link
        anchor = dst_input if direction == "inputs" else src_output
        other_order = rank.get(other, 1 << 30) if other else 1 << 30
        return (kind == "control", anchor if anchor is not None else 1 << 30, other_order, other or "")

    return sorted(out, key=key)


def op_tree(graph: Any, root: str, direction: str, depth: int, control: bool = False) -> list[TreeRow]:
    """Depth-first producer (``inputs``) or consumer (``outputs``) tree, ``depth`` levels
    (0 = unlimited). An op reached a second time is listed but not expanded again, which keeps
    the tree linear in the graph size and cycle-safe."""
    rows: list[TreeRow] = []
    expanded = {root}
    # an explicit stack of link iterators: a 20k-op chain must not hit Python's recursion limit
    rank = exec_rank(graph)
    stack = [(root, 1, iter(_links(graph, root, direction, control, rank)))]
    while stack:
        name, level, links = stack[-1]
        link = next(links, None)
        if link is None:
            stack.pop()
            continue
        other, kind, src_output, dst_input = link
        op_type = getattr(graph.ops.get(other), "type", "?") if other else "-"
        # control edges are listed but not followed: they carry no values
        follow = other is not None and kind == "data" and (depth == 0 or level < depth)
        again = follow and other in expanded
        rows.append(TreeRow(level, other, op_type, kind, src_output, dst_input, name, again))
        if follow and not again:
            expanded.add(other)
            stack.append((other, level + 1, iter(_links(graph, other, direction, control, rank))))
    return rows


def tree_lines(root: str, root_type: str, rows: list[TreeRow], direction: str) -> list[str]:
    """Indented text: ``|- :in0 <- producer:1  (Type)`` (input 0 of the op above it is fed by
    output 1 of producer), ``|- :1 -> consumer:in0  (Type)``: tensors by their printed names."""
    lines = [f"{root} ({root_type})"]
    for row in rows:
        indent = "|  " * (row.depth - 1)
        if row.edge == "control":
            what = f"[ctrl] {row.op}"
        elif row.op is None:
            what = f":in{row.dst_input} <- (unconnected optional input)"
        elif direction == "inputs":
            what = f":in{row.dst_input} <- {tensor_name(row.op, 'output', row.src_output)}"
        else:
            what = f":{row.src_output} -> {tensor_name(row.op, 'input', row.dst_input)}"
        more = "  (see above)" if row.repeated else ""
        kind = f"  ({row.type})" if row.op is not None else ""
        lines.append(f"{indent}|- {what}{kind}{more}")
    return lines
