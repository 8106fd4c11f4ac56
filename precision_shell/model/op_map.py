"""``OpGraph.ops``: op key -> OpNode, in execution order, each node made when first asked for.

The graph keeps its ops as columns (op_columns.py); ``pt OP:output:0`` or ``ni OP`` need one or a
handful of nodes, so making all 10^5 of them (~0.3 s) on the first lookup would be most of such a
command's time. Iterating values or items makes every node (once). The key -> row index is made
on the first lookup by key (start-up and ``info`` make none).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping

from .op_node import InputRef, OpDetails, OpNode

__all__ = ["OpMap"]

DICT_AFTER = 256  # single lookups by key before the key -> row dict is made


class OpMap(Mapping):
    def __init__(self, columns, readers: list):
        self._columns, self._readers = columns, readers
        self._index: dict[str, int] | None = None
        self._lookups = 0
        self._nodes: list[OpNode | None] = [None] * len(columns)
        self._all = False
        self._lock = threading.Lock()  # the REPL's completion warm-up thread reads nodes too

    @property
    def _pos(self) -> dict[str, int]:
        """key -> row (dict order = rows), made on first use."""
        if self._index is None:
            index = {key: i for i, key in enumerate(self._columns.keys())}
            self._index = index
        return self._index

    def row_of(self, key: object) -> int | None:
        """The row of ``key``: from the name blob for the first lookups (``ni`` of one op in a
        1M-op graph makes no 1M-entry dict), then from the dict."""
        if self._index is None:
            self._lookups += 1
            if self._lookups <= DICT_AFTER:
                return self._columns.find_row(key) if type(key) is str else None
        return self._pos.get(key)

    def _make(self, i: int) -> OpNode:
        (name, op_type, graph, order, key, inputs, control, original, passes, kernel, engine,
         source) = self._columns.row(i)
        if type(source) is list:
            lazy = source  # the detail holder itself (graph built in this process)
        elif isinstance(source, OpDetails):
            lazy = [source, None, 0, 0]
        else:  # (reader index, start, end) from the start-up cache
            lazy = [None, self._readers[source[0]], source[1], source[2]]
        node = OpNode(name, op_type, graph, order, key,
                      [InputRef(j, p, o, f"{p}:{o}" if raw is None else raw, lazy)
                       for j, (p, o, raw) in enumerate(inputs)],
                      control, original if original is not None else [], original is not None,
                      passes, kernel, engine, lazy)
        self._nodes[i] = node
        return node

    def _node(self, i: int) -> OpNode:
        node = self._nodes[i]
        if node is None:
            with self._lock:  # one object per op, whichever thread asks first
                node = self._nodes[i]
                if node is None:
                    node = self._make(i)
        return node

    def _make_all(self) -> list[OpNode]:
        if not self._all:
            with self._lock:
                if not self._all:
                    nodes = self._nodes
                    for i, node in enumerate(nodes):
                        if node is None:
                            self._make(i)
                    self._all = True
        return self._nodes

    # -- Mapping ---------------------------------------------------------------------------------
    def __getitem__(self, key: str) -> OpNode:
        i = self.row_of(key)
        if i is None:
            raise KeyError(key)
        return self._node(i)

    def get(self, key: str, default=None):
        i = self.row_of(key)
        return default if i is None else self._node(i)

    def __contains__(self, key: object) -> bool:
        return self.row_of(key) is not None

    def node_at(self, row: int) -> OpNode:
        return self._node(row)

    def __iter__(self) -> Iterator[str]:
        return iter(self._pos)

    def __len__(self) -> int:
        return len(self._nodes)

    def keys(self):
        return self._pos.keys()

    def values(self) -> list[OpNode]:
        return list(self._make_all())

    def items(self) -> list[tuple[str, OpNode]]:
        return list(zip(self._pos, self._make_all()))

    def __eq__(self, other) -> bool:
        return dict(self.items()) == (dict(other.items()) if isinstance(other, Mapping) else other)

    __hash__ = None

    @property
    def positions(self) -> dict[str, int]:
        """key -> position in execution order (its row), without making nodes."""
        return self._pos
