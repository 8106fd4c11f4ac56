"""Help examples in the loaded workspace's own names: the examples are written against the sample
workspace (``fc1/MatMul``); on another workspace each sample op becomes an op of the loaded graph
(of the same type when there is one) or a framework entry, so an example can be pasted and run."""

from __future__ import annotations

import re
from typing import Any

# the sample ops the examples name, with the op type to look for in another workspace
SAMPLE_OPS = {"ln1/add_1/LayerNorm": "LayerNorm", "rsum/ReduceSum": "ReduceSum", "ln/LayerNorm": "LayerNorm",
              "fc1/MatMul": "MatMul", "conv1/Conv2D": "Conv2D", "pool1/MaxPool": "MaxPool"}
SAMPLE_GOLDEN = ("fc1/BiasAdd", "fc1_BiasAdd", "ln1/add_1", "ln1_add_1")   # both spellings take
_PLUMBING = {"Const", "Constant", "Data", "NetOutput", "Variable", "TransData", "Cast"}


def _ops(session: Any) -> list[tuple[str, str]]:
    """(name, type) of the session's ops in execution order (framework: entries, type = API)."""
    graph = getattr(session, "graph", None)
    if graph is not None:
        return [(op.name, str(op.type)) for op in graph.ops.values()]
    run = getattr(session, "run", None) if getattr(session, "kind", "graph") != "graph" else None
    return [(op.name, op.name.split(".")[1] if "." in op.name else op.name)
            for op in getattr(run, "ops", None) or [] if op.outputs]


def _pick(ops: list[tuple[str, str]], wanted: str, taken: set[str]) -> str | None:
    free = [(n, t) for n, t in ops if n not in taken]
    for name, kind in free:
        if wanted.lower() in kind.lower():
            return name
    for name, kind in free:
        if kind not in _PLUMBING:
            return name
    return free[0][0] if free else None


def localised_help(text: str, session: Any) -> str:
    """``text`` with each sample op name the session does not have replaced by one it has."""
    if session is None:
        return text
    ops = _ops(session)
    names = {n for n, _ in ops}
    taken: set[str] = set()
    framework = getattr(session, "kind", "graph") != "graph"
    for sample, kind in SAMPLE_OPS.items():
        if sample in names or sample not in text:
            continue
        chosen = _pick(ops, kind, taken)
        if chosen is None:
            continue
        taken.add(chosen)
        text = re.sub(rf"(?<![\w/.]){re.escape(sample)}(?![\w/])", chosen, text)
    for sample in SAMPLE_GOLDEN:
        text = re.sub(rf"golden:{re.escape(sample)}:0\b", lambda m: _golden(session, sample, framework, ops),
                      text)
    return text


def _golden(session: Any, sample: str, framework: bool, ops: list[tuple[str, str]]) -> str:
    if framework:
        return f"golden:{ops[0][0]}:0" if ops else f"golden:{sample}:0"
    golden = getattr(session, "golden", None)
    if golden is None or golden.find(sample, 0) is not None:
        return f"golden:{sample}:0"
    names = golden.names() if getattr(golden, "folder", None) is not None else []
    return f"golden:{names[0]}" if names else f"golden:{sample}:0"
