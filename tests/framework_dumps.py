"""Helpers for the framework-run tests: the committed msprobe sample, and small hand-made dumps.

Hand-made dumps are written in msprobe's MindSpore form (``.npy`` tensor files) so no torch is
needed; their statistics are computed from the arrays written, as msprobe computes them.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

SAMPLE = Path(__file__).parents[1] / "sample_data" / "framework"


def sample() -> Path:
    if not (SAMPLE / "truth.json").is_file():
        pytest.skip("sample_data/framework (branch fw-sample) is not in this checkout")
    return SAMPLE


def leaf(array, data_name: str | None = None, dtype: str | None = None, **extra) -> dict:
    """An msprobe tensor leaf for ``array`` (statistics computed from it)."""
    a = np.asarray(array)
    x = a.astype(np.float64)
    node = {"type": "mindspore.Tensor", "dtype": dtype or {"float32": "Float32", "float16": "Float16",
                                                            "int64": "Int64", "bool": "Bool"}[a.dtype.name],
            "shape": list(a.shape), "Max": float(x.max()) if x.size else None,
            "Min": float(x.min()) if x.size else None, "Mean": float(x.mean()) if x.size else None,
            "Norm": float(np.linalg.norm(x)) if x.size else None, **extra}
    if data_name:
        node["data_name"] = data_name
    return node


def write_dump(rank_dir: Path, entries: dict[str, dict[str, list]], task: str = "tensor",
               construct: dict | None = None) -> Path:
    """``entries``: name -> {"input_args"/"input"/"output": [array or plain leaf dict or None]}.
    Arrays become .npy files named as msprobe names them (tensor task) and leaves."""
    tensor_dir = rank_dir / "dump_tensor_data"
    tensor_dir.mkdir(parents=True, exist_ok=True)
    data = {}
    for name, body in entries.items():
        data[name] = {}
        for key, values in body.items():
            root = "input" if key.startswith("input") else key
            nodes = []
            for i, v in enumerate(values):
                if isinstance(v, np.ndarray):
                    file = f"{name}.{root}.{i}.npy" if task == "tensor" else None
                    if file:
                        np.save(tensor_dir / file, v)
                    nodes.append(leaf(v, file))
                else:
                    nodes.append(v)
            data[name][key] = nodes
    doc = {"task": task, "level": "mix", "framework": "mindspore", "dump_data_dir": None, "data": data}
    (rank_dir / "dump.json").write_text(json.dumps(doc))
    if construct is not None:
        (rank_dir / "construct.json").write_text(json.dumps(construct))
    return rank_dir
