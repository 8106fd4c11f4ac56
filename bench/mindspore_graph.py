"""MindSpore graph-mode dumps: how fast a big iteration opens (issue 26, "Speed"). Not part of
the test suite.

Builds a synthetic iteration of ``--kernels`` kernels (default 50k) in MindSpore's layout: a chain
of MatMul / Add / Softmax / Cast kernels, each with two inputs and one output ``.npy`` file (3 files
per kernel: 150k files), the ANF graph ``.pb`` written with pshell's own anf_ir.proto (nodes, Load
of a weight parameter, constants), the execution-order CSV, and every 10th Cast file numbered as
MindSpore renumbers late-inserted ops. Then, whole processes, alternating, ``--runs`` rounds:

1. ``pshell DUMP -c info`` (what the REPL runs for its banner: open to the prompt). Target < 3 s.
2. ``pshell DUMP -c "ls -n Softmax -l 1"`` (the run model built: every edge from the graph).

    python bench/mindspore_graph.py [--kernels 50000] [--runs 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import bench_env, machine_info, run_child  # noqa: E402

TYPES = ("MatMul", "Add", "Softmax", "Cast")


def _npy(shape=(4, 8)) -> bytes:
    import io

    import numpy as np

    buf = io.BytesIO()
    np.save(buf, np.ones(shape, np.float32))
    return buf.getvalue()


def build(root: Path, kernels: int) -> None:
    from precision_shell.formats.protoload import load_proto

    pb = load_proto("anf_ir.proto")
    rank = root / "rank_0"
    folder = rank / "Net" / "0" / "0"
    for sub in (folder, rank / "graphs", rank / "execution_order", rank / ".dump_metadata"):
        sub.mkdir(parents=True, exist_ok=True)
    (rank / ".dump_metadata" / "config.json").write_text('{"device_target":"Ascend","ms_version":"2.10.0"}')
    model = pb.ModelProto(ir_version=1)
    g = model.graph
    g.name = "kernel_graph0"
    p = g.parameters.add(name="w")
    p.type.data_type = 14
    p.type.tensor_type.elem_type = 11
    p.type.tensor_type.shape.dim.add(size=4)
    p.type.tensor_type.shape.dim.add(size=8)
    g.const_vals.add(key="cst1").value.dtype = 0         # a monad
    names, data = [], _npy()
    previous = "w"
    casts = 0
    for i in range(kernels):
        op_type = TYPES[i % len(TYPES)]
        node = g.node.add(name=str(i + 1), op_type=op_type)
        node.full_name = f"Default/network-Net/layer{i // 4}-Block/{op_type}-op{i}"
        node.input.add(name=previous)
        node.input.add(name="w")
        node.output_type.data_type = 14
        node.output_type.tensor_type.elem_type = 11
        for d in (4, 8):
            node.output_type.tensor_type.shape.dim.add(size=d)
        previous = node.name
        names.append(node.full_name)
        file_name = node.full_name.replace("/", "_")
        if op_type == "Cast" and i % 40 == 3:       # renumbered on disk
            file_name = file_name.rsplit("-op", 1)[0] + f"-op{kernels + casts}"
            casts += 1
        for io, slot in (("input", 0), ("input", 1), ("output", 0)):
            (folder / f"{op_type}.{file_name}.0.0.{1_000_000 + 3 * i + slot + (io == 'output')}"
                      f".{io}.{slot}.DefaultFormat.Float32.npy").write_bytes(data)
    (rank / "graphs" / "ms_output_trace_code_graph_0.pb").write_bytes(model.SerializeToString())
    (rank / "execution_order" / "ms_execution_order_graph_0.csv").write_text(
        "NodeExecutionOrder-FullNameWithScope\n" + "\n".join(names) + "\n")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kernels", type=int, default=50_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--keep", type=Path, help="build the dump here and keep it")
    opts = p.parse_args()
    root = opts.keep or Path(tempfile.mkdtemp(prefix="ms_graph_bench_"))
    try:
        t0 = time.perf_counter()
        if not (root / "rank_0").exists():
            build(root, opts.kernels)
        print(f"built {opts.kernels:,} kernels ({3 * opts.kernels:,} files) in {time.perf_counter() - t0:.1f} s "
              f"at {root}")
        out = Path(tempfile.mkdtemp(prefix="ms_graph_bench_out_"))
        env = bench_env()
        walls: dict[str, list[float]] = {"info": [], "ls": []}
        for _ in range(opts.runs):
            for label, command in (("info", "info"), ("ls", "ls -n Softmax -l 1")):
                child = run_child([sys.executable, "-m", "precision_shell", str(root), "-o", str(out),
                                   "-c", command], env=env)
                if child.returncode not in (0, 1):
                    print(child.stderr[-2000:])
                    return 1
                walls[label].append(child.wall)
        print(machine_info())
        for label, values in walls.items():
            print(f"{label:5s} median {statistics.median(values):.2f} s  (runs {', '.join(f'{v:.2f}' for v in values)})")
        shutil.rmtree(out, ignore_errors=True)
    finally:
        if opts.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
