"""The sample's truth, computed from the dumped tensors with torch in float64.

Entry inputs and outputs as in dump_entries.py; only floating-point tensors of rank >= 1 count. With the threshold 0.98 on cosine:
root = some output fails while every input passes; propagated = some output and some input fail.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from dump_entries import entry_kind, entry_sides, load_dump

COSINE_THRESHOLD = 0.98


def load_leaf(rank_dir: Path, leaf: dict) -> torch.Tensor | None:
    """The leaf's tensor in float64, or None for non-float tensors."""
    if "float" not in leaf["dtype"]:
        return None
    t = torch.load(rank_dir / "dump_tensor_data" / leaf["data_name"], map_location="cpu",
                   weights_only=True)
    return t.to(torch.float64).flatten()


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    """Cosine similarity; two all-zero tensors are equal (1.0)."""
    na, nb = float(a.norm()), float(b.norm())
    if na == 0.0 and nb == 0.0:
        return 1.0
    if na == 0.0 or nb == 0.0:
        return 0.0
    return float(torch.dot(a, b)) / (na * nb)


def _min_cosine(golden_dir, target_dir, g_leaves, t_leaves, cosines: dict) -> float | None:
    worst = None
    for gl, tl in zip(g_leaves, t_leaves, strict=True):
        if not tl["shape"]:  # a 0-d tensor has no cosine (msprobe: "unsupported")
            continue
        a, b = load_leaf(golden_dir, gl), load_leaf(target_dir, tl)
        if a is None or b is None:
            continue
        c = cosine(a, b)
        cosines[tl["data_name"]] = c
        worst = c if worst is None else min(worst, c)
    return worst


def cosine_verdicts(golden_dir: Path, target_dir: Path) -> tuple[dict, dict]:
    """Per target entry: min input/output cosine and a verdict; and per tensor file: cosine."""
    golden, target = load_dump(golden_dir)["data"], load_dump(target_dir)["data"]
    assert list(golden) == list(target), "golden and target entries differ"
    entries, cosines = {}, {}
    for name, t_entry in target.items():
        g_in, g_out = entry_sides(name, golden[name])
        t_in, t_out = entry_sides(name, t_entry)
        cin = _min_cosine(golden_dir, target_dir, g_in, t_in, cosines)
        cout = _min_cosine(golden_dir, target_dir, g_out, t_out, cosines)
        kind = entry_kind(name)
        if cout is None or cout >= COSINE_THRESHOLD:
            verdict = "pass"
        elif kind == "parameters_grad":
            verdict = "fail"  # no inputs recorded: neither root nor propagated
        elif cin is None or cin >= COSINE_THRESHOLD:
            verdict = "root"
        else:
            verdict = "propagated"
        entries[name] = {"kind": kind, "min_input_cosine": cin, "min_output_cosine": cout,
                         "verdict": verdict}
    return entries, cosines


def _nonfinite(rank_dir: Path, leaves: list[dict]) -> bool:
    for leaf in leaves:
        t = load_leaf(rank_dir, leaf)
        if t is not None and not bool(torch.isfinite(t).all()):
            return True
    return False


def overflow_verdicts(rank_dir: Path) -> dict:
    """Per entry with a NaN/Inf output: producer (all inputs finite) or propagated."""
    found = {}
    for name, entry in load_dump(rank_dir)["data"].items():
        inputs, outputs = entry_sides(name, entry)
        if _nonfinite(rank_dir, outputs):
            kind = entry_kind(name)
            if kind == "parameters_grad":
                found[name] = "nonfinite"
            else:
                found[name] = "propagated" if _nonfinite(rank_dir, inputs) else "producer"
    return found


def finite_everywhere(rank_dir: Path) -> bool:
    data = load_dump(rank_dir)["data"]
    return not any(_nonfinite(rank_dir, entry_sides(n, e)[0] + entry_sides(n, e)[1])
                   for n, e in data.items())


def construct_ancestors(rank_dir: Path, name: str) -> list[str]:
    with open(rank_dir / "construct.json") as f:
        parents = json.load(f)
    chain = []
    while parents.get(name):
        name = parents[name]
        chain.append(name)
    return chain


def finite_or_none(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else x
