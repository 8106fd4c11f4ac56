"""Writes the .pt fixtures of tests/formats/test_torch_pt.py with a real torch, and their expected values.

Run with torch 2.13.0 (CPU) and numpy in a throwaway venv, never in pshell's own environment:

    python3 -m venv /work/venvs/torch && /work/venvs/torch/bin/pip install torch==2.13.0 numpy
    /work/venvs/torch/bin/python tests/data/torch_pt/make_fixtures.py

For every fixture NAME it writes NAME.pt (torch.save) and, per tensor inside it, NAME[.KEY].npy
holding the values numpy-side (bf16/fp8 widened to float32, which is exact), plus manifest.json:
{file: {"tensors": {key: {"dtype": torch dtype name, "shape": [...], "expected": npy}}}}; key ""
is a file that holds one tensor. The outputs are committed; tests never import torch.
"""

import json
from pathlib import Path

import numpy as np
import torch

OUT = Path(__file__).resolve().parent


def fixtures():
    g = torch.Generator().manual_seed(7)
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6) * 0.5 - 3
    shared = torch.randn(10, generator=g)
    lin = torch.nn.Linear(3, 2)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(2, 3, generator=g))
        lin.bias.copy_(torch.randn(2, generator=g))
    return {
        "fp32": torch.randn(3, 4, generator=g),
        "fp16": (torch.randn(5, generator=g) * 100).half(),
        "bf16": torch.randn(2, 3, generator=g).bfloat16(),
        "int64": torch.tensor([[-(2 ** 40), 0, 7], [2 ** 62, -1, 3]], dtype=torch.int64),
        "bool": torch.tensor([True, False, True, True]),
        "fp8_e4m3fn": torch.tensor([0.5, -1.75, 448.0, 0.0], dtype=torch.float8_e4m3fn),
        # non-contiguous: a transposed slice that starts 8 elements into its storage
        "view_t": base[1:, 2:5].t(),
        "scalar": torch.tensor(2.5, dtype=torch.float64),
        "empty": torch.zeros(0, 3),
        "param": torch.nn.Parameter(torch.randn(2, 2, generator=g)),
        "state_dict": lin.state_dict(),   # an OrderedDict of two tensors
        # one storage saved twice, through two views: one data/N member
        "shared": {"whole": shared, "tail": shared[4:]},
        # msprobe's naming: the archive prefix is the stem, dots included
        "Functional.linear.0.forward.output.0": torch.randn(2, 2, generator=g).bfloat16(),
    }


def expected(t: torch.Tensor) -> np.ndarray:
    if t.dtype in (torch.bfloat16, torch.float8_e4m3fn):
        t = t.float()
    return t.detach().contiguous().numpy()


def main():
    manifest = {}
    for name, obj in fixtures().items():
        torch.save(obj, OUT / f"{name}.pt")
        items = obj.items() if isinstance(obj, dict) else [("", obj)]
        tensors = {}
        for key, t in items:
            npy = f"{name}.{key}.npy" if key else f"{name}.npy"
            np.save(OUT / npy, expected(t))
            tensors[key] = {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape),
                            "stride": list(t.stride()), "offset": t.storage_offset(), "expected": npy}
        manifest[f"{name}.pt"] = {"type": type(obj).__name__, "tensors": tensors}
    torch.save(torch.ones(2), OUT / "legacy.pt", _use_new_zipfile_serialization=False)
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
