"""A pair of synthetic msprobe statistics dumps of any size (issue 31's 100k-entry pair):
chained API entries, the output of each the first input of the next (so edge inference links
them), each leaf with random Max/Min/Mean/Norm. The two sides differ in dtype and seed, so most
entries fail ``vcs``'s statistics rule. Used by ``bench/framework.py`` and the tests.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

APIS = ("Functional.linear", "Tensor.__add__", "Torch.matmul", "Functional.gelu", "Tensor.reshape")


def _stats_leaf(rng: random.Random, dtype: str, shape: list[int], scale: float) -> dict:
    lo, hi = -rng.random() * scale, rng.random() * scale
    return {"type": "torch.Tensor", "dtype": dtype, "shape": shape, "Max": hi, "Min": lo,
            "Mean": (hi + lo) / 4, "Norm": (hi - lo) * 10, "requires_grad": False}


def write_statistics_dump(root: Path, entries: int, dtype: str, seed: int) -> Path:
    """``root/step0/rank0/dump.json`` with ``entries`` chained API entries (the output of each
    is the first input of the next, so edge inference links them)."""
    rank = root / "step0" / "rank0"
    rank.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    counters: dict[str, int] = {}
    data: dict[str, dict] = {}
    previous = _stats_leaf(rng, dtype, [8, 64], 1.0)
    for i in range(entries):
        api = APIS[i % len(APIS)]
        n = counters[api] = counters.get(api, -1) + 1
        out = _stats_leaf(rng, dtype, [8, 64], 1.0 + (i % 7))
        data[f"{api}.{n}.forward"] = {"input_args": [previous, _stats_leaf(rng, dtype, [64], 0.5)],
                                      "input_kwargs": {}, "output": [out]}
        previous = out
    doc = {"task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": None, "data": data}
    # indented as msprobe writes it (json.dump(..., indent=1): the committed sample's layout)
    (rank / "dump.json").write_text(json.dumps(doc, indent=1))
    (rank / "construct.json").write_text("{}")
    (rank / "stack.json").write_text("{}")
    return root


def write_statistics_pair(root: Path, entries: int) -> tuple[Path, Path]:
    """``root/target`` (bf16, seed 1) and ``root/golden`` (fp32, seed 2), as bench/framework.py
    makes them; returns their step folders."""
    write_statistics_dump(root / "target", entries, "torch.bfloat16", 1)
    write_statistics_dump(root / "golden", entries, "torch.float32", 2)
    return root / "target" / "step0", root / "golden" / "step0"
