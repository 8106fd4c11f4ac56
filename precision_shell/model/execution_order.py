"""The execution order of a graph-mode dump set: one order for every list (`vc`/`vcs` rows, `ac`,
the report), so an op's `order` is the same number wherever it is printed.

Ops come from the graph in dump-time order (graph order breaks ties; an op with no dump sits after
the last dumped op before it); dumps of ops the graph does not know join by their own timestamps,
named by their headers (``header_name``).
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

from precision_shell.model.dump_index import DumpFile, DumpIndex

# GE ops that never run as kernels, so they have no dump: no row for them (the vendor prints an
# all-NaN row for each, which only buries the real rows).
GRAPH_ONLY_TYPES = frozenset({"Data", "RefData", "AippData", "Const", "Constant", "Variable",
                              "VariableV2", "NetOutput"})

_NOT_IN_GRAPH = 1 << 30


def execution_entries(graph: Any, dumps: DumpIndex, header_name: Callable[[DumpFile], str | None]
                      ) -> Iterator[tuple[int, Any, str, DumpFile | None]]:
    """``(order, graph op or None, op name, its latest dump or None)`` in execution order, order
    1-based."""
    entries: list[tuple[tuple[int, int], Any, str, DumpFile | None]] = []
    seen: set[tuple[str, str]] = set()   # (folder, file name): no Path per file
    last_ts = 0
    if graph is not None:
        for rank, op in enumerate(graph.in_exec_order()):
            if op.type in GRAPH_ONLY_TYPES:
                continue
            f = dumps.latest_for_op(op.name)
            if f is not None:
                last_ts = f.name.timestamp
                seen.add((str(f.folder), f.filename))
            entries.append(((f.name.timestamp if f is not None else last_ts, rank), op, op.name, f))
    for f in dumps.op_files:
        latest = dumps.by_key.get(f.op_key, [f])[-1]
        key = (str(latest.folder), latest.filename)
        if key in seen:
            continue
        seen.add(key)
        entries.append(((latest.name.timestamp, _NOT_IN_GRAPH), None, header_name(latest) or latest.op_key,
                        latest))
    del seen
    entries.sort(key=lambda e: e[0])
    for position, (_, op, name, f) in enumerate(entries, 1):
        yield position, op, name, f
