"""Walking msprobe dump.json entries without torch (used by truth.py and by the sample's test).

An entry's inputs are its forward input_args/input_kwargs/parameters, or a backward entry's
`input` (the gradients arriving at it); its outputs are `output`. A `parameters_grad` entry
({param_name: [leaf]}) has outputs only.
"""

from __future__ import annotations

import json
from pathlib import Path


def load_dump(rank_dir: Path) -> dict:
    with open(rank_dir / "dump.json") as f:
        return json.load(f)


def tensor_leaves(node) -> list[dict]:
    """Tensor leaves (dicts with a dtype and shape) of a nested input/output node, in order."""
    if isinstance(node, dict):
        if "dtype" in node and "shape" in node:
            return [node]
        if "type" in node:  # int/float/bool/... leaf
            return []
        return [leaf for v in node.values() for leaf in tensor_leaves(v)]
    if isinstance(node, list):
        return [leaf for v in node for leaf in tensor_leaves(v)]
    return []


def entry_kind(name: str) -> str:
    if ".parameters_grad." in name or name.endswith(".parameters_grad"):
        return "parameters_grad"
    return "backward" if ".backward" in name else "forward"


def entry_sides(name: str, entry: dict) -> tuple[list[dict], list[dict]]:
    kind = entry_kind(name)
    if kind == "parameters_grad":
        return [], tensor_leaves(entry)
    if kind == "backward":
        return tensor_leaves(entry.get("input")), tensor_leaves(entry.get("output"))
    inputs = [entry.get(k) for k in ("input_args", "input_kwargs", "parameters")]
    return tensor_leaves(inputs), tensor_leaves(entry.get("output"))
