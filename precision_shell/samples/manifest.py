"""The manifest: the generator's record of truth, written beside ``precision_data/``.

Tests and benchmarks read it to know, without re-deriving anything, which file holds which op,
what every tensor's layout is, and what the planted findings are (the lossy root and the
fp16 overflow with the ops each of them contaminates).
"""

from __future__ import annotations

import json
import math
import numpy as np

from .kernels import cosine
from .network import NetworkRun
from .records import NpuOp, NpuTensor

MANIFEST_NAME = "pshell_sample_manifest.json"
MANIFEST_VERSION = 2   # 2: outputs have "origin"; a Cast/TransData "golden" is the walked-up one
COSINE_THRESHOLD = 0.98


def _cos(npu: np.ndarray, golden: np.ndarray | None) -> float | None:
    if golden is None:
        return None
    value = cosine(npu, golden)
    return None if math.isnan(value) else round(value, 6)


def tensor_entry(t: NpuTensor) -> dict:
    return {"dtype": t.dtype, "format": t.format, "origin_format": t.origin_format,
            "device_shape": list(t.device_shape), "logical_shape": list(t.logical_shape)}


def op_entry(op: NpuOp, *, dump_file: str | None, timestamp: int | None) -> dict:
    entry = {"name": op.name, "type": op.type, "graph_id": op.graph_id}
    if op.executed:
        entry.update(order=op.order, task_id=op.task_id, stream_id=op.stream_id, timestamp=timestamp,
                     dump_file=dump_file)
    entry.update(original_ops=op.original_ops, passes=list(op.passes))
    entry["inputs"] = [{"source": i.source, "golden": i.golden_ref, **tensor_entry(i.tensor),
                        "cosine": _cos(i.tensor.npu, i.golden)} for i in op.inputs]
    entry["outputs"] = [output_entry(op, i) for i in range(len(op.outputs))]
    return entry


def output_entry(op: NpuOp, index: int) -> dict:
    """``origin``: the golden the graph and dump header name (None for GE-inserted ops);
    ``golden``: the one the output is compared with (formats.md A.8.5, Cast/TransData walk up)."""
    out = op.outputs[index]
    ref, golden = op.compared_golden(index)
    return {**tensor_entry(out), "origin": out.golden_ref, "golden": ref, "cosine": _cos(out.npu, golden),
            "finite": bool(np.isfinite(out.npu.astype(np.float32)).all())}


def downstream(run: NetworkRun, root: str) -> list[NpuOp]:
    """Executed ops that (transitively) consume an output of ``root``, in execution order."""
    reached, changed = {root}, True
    while changed:
        changed = False
        for op in run.ops:
            if op.name not in reached and any(i.source.rsplit(":", 1)[0] in reached for i in op.inputs):
                reached.add(op.name)
                changed = True
    return [op for op in run.executed if op.name in reached and op.name != root]


def lossy_finding(run: NetworkRun) -> dict:
    op = run.op(run.lossy_op)
    below = [d.name for d in downstream(run, op.name)
             if any((c := _cos(o.npu, d.compared_golden(k)[1])) is not None and c < COSINE_THRESHOLD
                    for k, o in enumerate(d.outputs))]
    return {"op": op.name, "type": op.type, "tensor": f"{op.name}:output:0",
            "cosine": _cos(op.outputs[0].npu, op.outputs[0].golden),
            "input_cosines": [_cos(i.tensor.npu, i.golden) for i in op.inputs],
            "threshold": COSINE_THRESHOLD, "downstream_below_threshold": below}


def overflow_finding(run: NetworkRun) -> dict:
    op = run.op(run.overflow_op)
    bits = [1 << b for b in range(64) if run.overflow_status >> b & 1]
    contaminated = [d.name for d in downstream(run, op.name)
                    if any(not np.isfinite(o.npu.astype(np.float32)).all() for o in d.outputs)]
    out = op.outputs[0].npu.astype(np.float32)
    return {"op": op.name, "type": op.type, "status": run.overflow_status, "status_bits": bits,
            "task_id": op.task_id, "stream_id": op.stream_id,
            "pos_inf": int(np.isposinf(out).sum()), "neg_inf": int(np.isneginf(out).sum()),
            "nan": int(np.isnan(out).sum()), "downstream_non_finite": contaminated}


def write_manifest(path, manifest: dict) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")


def passes_entry(used: dict[str, list[str]]) -> dict[str, list[str]]:
    return {name: list(ops) for name, ops in sorted(used.items())}
