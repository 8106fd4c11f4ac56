"""``fusion_result.json`` as FE writes it (formats.md §4), in any of its four observed shapes.

Counts are JSON strings; match_times >= effect_times. Besides the passes that produced fused ops
(effect > 0), FE also lists passes that matched a pattern but declined to fuse (effect 0).
Objects are printed like nlohmann ``dump(4)``: 4-space indent, keys sorted.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from .records import NpuOp

# Passes that run in the UB (buffer) fusion phase; all others are graph fusion passes.
UB_PASSES = frozenset({"TbeCommonRules0FusionPass", "TbeEltwiseFusionPass"})
# Patterns that match in a graph like ours but do not fuse (realistic noise, effect 0).
_MATCHED_ONLY = {"ConvToFullyConnectionFusionPass": 1, "ConvWeightCompressFusionPass": 1,
                 "TbeEltwiseFusionPass": 1}
# A second, tiny graph of the session (variable initialisation) for the multi-graph shapes.
INIT_GRAPH_ID = "0_0"
_INIT_GRAPH_PASSES = {"graph_fusion": {"RefreshInt64ToInt32FusionPass": {"effect_times": "0", "match_times": "1"}}}


def passes_of(ops: Iterable[NpuOp]) -> dict[str, list[str]]:
    """{pass name: [fused NPU op names]} in execution order."""
    used: dict[str, list[str]] = {}
    for op in ops:
        for name in op.passes:
            used.setdefault(name, []).append(op.name)
    return used


def graph_stats(used: dict[str, list[str]], trans_casts: int, switched_off: frozenset[str] = frozenset()) -> dict:
    """The per-graph object body: graph_fusion / ub_fusion with match/effect counts. A pass
    switched off (``--fusion-switch``) does not run, so it is not listed."""
    counts = {name: (len(ops), len(ops)) for name, ops in used.items()}
    for name, matched in _MATCHED_ONLY.items():
        section = "ub" if name in UB_PASSES else "graph"
        if name not in switched_off and f"ALL:{section}" not in switched_off:
            counts.setdefault(name, (matched, 0))
    if trans_casts and not switched_off & {"TransdataCastFusionPass", "ALL:graph"}:
        counts.setdefault("TransdataCastFusionPass", (trans_casts, 0))
    body: dict[str, dict] = {"graph_fusion": {}, "ub_fusion": {}}
    for name, (match, effect) in counts.items():
        kind = "ub_fusion" if name in UB_PASSES else "graph_fusion"
        body[kind][name] = {"effect_times": str(effect), "match_times": str(match)}
    return body


def fusion_result_text(shape: int, used: dict[str, list[str]], session_graph_id: str, trans_casts: int = 0,
                       switched_off: frozenset[str] = frozenset()) -> str:
    """The file content in shape 1 (one object), 2 (objects back to back), 3 (array) or 4 (keyed)."""
    main = graph_stats(used, trans_casts, switched_off)
    if shape == 1:
        return _dump({**main, "session_and_graph_id": session_graph_id})
    objects = [{**_INIT_GRAPH_PASSES, "session_and_graph_id": INIT_GRAPH_ID},
               {**main, "session_and_graph_id": session_graph_id}]
    if shape == 2:
        return "".join(_dump(o) for o in objects)      # FE appends one object per graph, no separator
    if shape == 3:
        return "[" + ",".join(_dump(o) for o in objects) + "]"
    if shape == 4:
        keyed = {f"session_and_graph_id_{INIT_GRAPH_ID}": _INIT_GRAPH_PASSES,
                 f"session_and_graph_id_{session_graph_id}": main}
        return _dump(keyed)
    raise ValueError(f"fusion_result.json shape must be 1..4, not {shape}")


def _dump(obj) -> str:
    return json.dumps(obj, indent=4, sort_keys=True)
