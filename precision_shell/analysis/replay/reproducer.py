"""The standalone reproducer ``replay --export`` writes: a Python script that needs numpy only.

It is assembled from this package's own numpy-only modules (rounding, profiles, metrics, the
op's kernel family), so the script computes exactly what ``replay`` computed, and prints the same table.
"""

from __future__ import annotations

import inspect

from . import metrics, profiles, rounding
from .kernels import Kernel

_MAIN = '''

def main():
    import json, os
    here = os.path.dirname(os.path.abspath(__file__))
    meta = json.load(open(os.path.join(here, "replay.json"), encoding="utf-8"))
    raw = lambda name: np.load(os.path.join(here, name), allow_pickle=False)
    load = lambda name: raw(name).astype(np.float64)
    inputs = [raw(name) for name in meta["inputs"]]
    values = [x.dtype.kind == "f" for x in inputs]
    inputs = [x.astype(np.float64) for x in inputs]
    npu = [load(name) for name in meta["npu_outputs"]]
    golden = load(meta["golden"]) if meta["golden"] else None
    k, fmts = meta["output"], meta["output_formats"]
    kernel = KERNEL
    if meta["op_type_argument"]:
        kernel = lambda ar, xs, attrs, shapes: KERNEL(ar, xs, attrs, shapes, op_type=meta["type"])
    print("replay of %s (%s), output %d (%s)" % (meta["op"], meta["type"], k, meta["output_dtype"]))
    print("%-26s %16s %16s %10s" % ("profile", "max ulps vs NPU", "error vs golden", "cosine"))
    for name in ["exact"] + meta["profiles"]:
        profile = parse_profile(name, meta["named_profiles"])
        y = apply(kernel, profile, inputs, meta["attrs"], [o.shape for o in npu], fmts, values)[k]
        err = "-" if golden is None else "%.6g" % rel_rmse(y, golden)
        cos = "-" if golden is None else "%.6f" % cosine(y, golden)
        print("%-26s %16.6g %16s %10s" % (name, max_ulps(y, npu[k], fmts[k]), err, cos))
    if golden is not None:
        print("%-26s %16s %16.6g %10.6f" % ("npu", "0", rel_rmse(npu[k], golden), cosine(npu[k], golden)))


if __name__ == "__main__":
    main()
'''


def _body(module) -> str:
    """A module's source without its docstring-level imports of this package or __future__."""
    lines = [line for line in inspect.getsource(module).splitlines()
             if not line.startswith(("from __future__", "from .", "import numpy"))]
    return "\n".join(lines)


def reproducer_script(kernel: Kernel) -> str:
    parts = ["#!/usr/bin/env python3",
             '"""Standalone replay of one op (pshell replay --export): numpy only.\n\n'
             'Run: python replay.py (beside replay.json and the .npy files)."""',
             "from __future__ import annotations", "", "import numpy as np", "",
             _body(rounding), _body(profiles), _body(metrics), _body(kernel.module),
             f"\n\nKERNEL = {kernel.function}", _MAIN]
    return "\n".join(parts)
