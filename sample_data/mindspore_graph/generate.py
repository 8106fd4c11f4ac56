"""Make the MindSpore graph-mode sample: MindSpore's own dump (not msprobe's) of a tiny training
step in GRAPH_MODE on CPU, three runs, and manifest.json with the truth computed from the dumps.

    /work/venvs/tool-ms/bin/python sample_data/mindspore_graph/generate.py [--out DIR]

Needs MindSpore in its own venv (``python3.11 -m venv V && V/bin/pip install mindspore==2.10.0
'numpy<2'``: the 2.10 wheel is built against NumPy 1.x); pshell and its tests never import it.
Each run is a fresh process (MindSpore reads MINDSPORE_DUMP_CONFIG once) training ``Block``
(Dense 8->16, x GAIN, + SHIFT, Softmax, Dense 16->4, MSE loss, SGD) with
``nn.TrainOneStepCell`` for 2 iterations, dump_mode 0 (every kernel), file_format npy:

- ``golden_fp32/``: everything in float32;
- ``target_fp16/``: the softmax's logits cast to float16 (the CPU build lacks bf16 Softmax):
  the +SHIFT moves them where float16's grid is 4.0 apart, so ``Softmax`` is the designed first
  divergence (its input still has cosine ~1 with the golden's, its output not) and everything
  after it (the second Dense, the loss, the backward) is propagated;
- ``overflow_fp16/``: the first Dense's output cast to float16 and multiplied by OVERFLOW_GAIN
  in float16: that ``Mul`` is the designed first inf from finite inputs.

manifest.json holds the truth, computed here from the dumped .npy files with numpy only
(pairing by full name, input/output and slot as the spec says), and the script fails when the
design did not hold. Absolute paths in the dumps (the dump path in .dump_metadata, source files in
the graphs) are left as MindSpore wrote them: they are what a user's dump holds.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNS = ("golden_fp32", "target_fp16", "overflow_fp16")
NET = "Block"
GAIN, SHIFT, OVERFLOW_GAIN = 4.0, 5000.0, 60000.0
THRESHOLD = 0.98
ITERATIONS = 2


def train(run: str, dump_root: str) -> None:
    """One run, in this process: configure the dump, train ITERATIONS steps."""
    config = {"common_dump_settings": {
        "dump_mode": 0, "path": dump_root, "net_name": NET, "iteration": "all", "saved_data": "tensor",
        "input_output": 0, "kernels": [], "support_device": [0, 1, 2, 3, 4, 5, 6, 7],
        "op_debug_mode": 0, "file_format": "npy"},
        "e2e_dump_settings": {"enable": True, "trans_flag": True}}
    config_path = dump_root + ".json"
    with open(config_path, "w") as f:
        json.dump(config, f)
    os.environ["MINDSPORE_DUMP_CONFIG"] = config_path

    import numpy as np
    import mindspore as ms
    from mindspore import Tensor, nn

    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    ms.set_seed(0)

    class Block(nn.Cell):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Dense(8, 16)
            self.fc2 = nn.Dense(16, 4)
            self.softmax = nn.Softmax()

        def construct(self, x):
            h = self.fc1(x)
            if run == "overflow_fp16":
                h = (h.astype(ms.float16) * OVERFLOW_GAIN).astype(ms.float32)
            else:
                h = h * GAIN
            z = h + SHIFT
            if run == "target_fp16":
                z = z.astype(ms.float16)
            p = self.softmax(z)
            if run == "target_fp16":
                p = p.astype(ms.float32)
            return self.fc2(p)

    net = Block()
    step = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.1))
    rng = np.random.default_rng(0)
    x = Tensor(rng.standard_normal((4, 8)).astype(np.float32))
    y = Tensor(rng.standard_normal((4, 4)).astype(np.float32))
    for _ in range(ITERATIONS):
        step(x, y)


# --- the truth, from the dumped files (numpy only) ---------------------------------------------

_FILE = re.compile(r"(?P<type>[^.]+)\.(?P<op>.+)\.\d+\.\d+\.(?P<ts>\d+)\.(?P<io>input|output)\.(?P<slot>\d+)"
                   r"\.[^.]+\.[^.]+\.npy\Z")


def kernels(rank_dir: Path, iteration: int) -> dict:
    """{full name: {"type", "order", ("input"|"output", slot): path}} for one iteration, full names
    from the execution order (a file's op name is the full name with / -> _; late-inserted ops can
    be numbered differently on disk: those are paired by type in execution order)."""
    with open(rank_dir / "execution_order" / "ms_execution_order_graph_0.csv") as f:
        order = [row[0] for row in csv.reader(f)][1:]
    folder = rank_dir / NET / "0" / str(iteration)
    groups: dict[tuple[str, str], dict] = {}
    for path in sorted(folder.iterdir()):
        m = _FILE.match(path.name)
        if m is None or m["type"] == "Parameter":
            continue
        g = groups.setdefault((m["type"], m["op"]), {"ts": int(m["ts"])})
        g["ts"] = min(g["ts"], int(m["ts"]))
        g[(m["io"], int(m["slot"]))] = path
    by_mangled = {name.replace("/", "_"): name for name in order}
    out: dict[str, dict] = {}
    unmatched: dict[str, list] = {}
    for (op_type, op), files in sorted(groups.items(), key=lambda kv: kv[1]["ts"]):
        name = by_mangled.get(op)
        if name is not None and name.rsplit("/", 1)[-1].startswith(op_type + "-op") and name not in out:
            out[name] = files
        else:
            unmatched.setdefault(op_type, []).append(files)
    for op_type, groups_left in unmatched.items():
        free = [n for n in order if n not in out and n.rsplit("/", 1)[-1].startswith(op_type + "-op")]
        for name, files in zip(free, groups_left):
            out[name] = files
    for name, files in out.items():
        files["order"] = order.index(name)
        files["type"] = name.rsplit("/", 1)[-1].split("-op")[0]
    return dict(sorted(out.items(), key=lambda kv: kv[1]["order"]))


def cosine(a, b) -> float:
    import numpy as np

    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        return float("nan")
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    if na == 0 or nb == 0:
        return 1.0 if na == nb else 0.0
    return float(a @ b / (na * nb))


def precision_truth(golden: dict, target: dict) -> dict:
    """Roots and propagated forward kernels at THRESHOLD: a kernel fails when an output's cosine
    with the golden's is <= THRESHOLD (or NaN); a root when no float input fails."""
    import numpy as np

    first_backward = min((k["order"] for n, k in target.items() if n.startswith("Gradients/")), default=1 << 30)
    cosines: dict[str, float] = {}
    roots, propagated, one_sided = [], [], []
    for name, files in target.items():
        if name not in golden:
            one_sided.append(name)
            continue
        if files["order"] >= first_backward:
            continue

        def fails(io):
            bad = []
            for key, path in files.items():
                if not (isinstance(key, tuple) and key[0] == io) or key not in golden[name]:
                    continue
                a, b = np.load(path), np.load(golden[name][key])
                if a.dtype.kind != "f" or a.shape != b.shape or a.ndim == 0:
                    continue
                c = cosine(a, b)
                cosines[f"{name}:{io}.{key[1]}"] = c
                if not c > THRESHOLD:
                    bad.append(key)
            return bad

        out_bad, in_bad = fails("output"), fails("input")
        if out_bad:
            (propagated if in_bad else roots).append(name)
    return {"cosine_threshold": THRESHOLD, "first_root": roots[0] if roots else None, "roots": roots,
            "propagated": propagated, "target_only": one_sided,
            "golden_only": [n for n in golden if n not in target], "cosines": cosines}


def overflow_truth(run: dict) -> dict:
    """Kernels whose outputs hold inf/NaN; producers: those with every float input finite."""
    import numpy as np

    producers, propagated = [], []
    for name, files in run.items():
        def bad(io):
            return [k for k, p in files.items() if isinstance(k, tuple) and k[0] == io
                    and np.load(p).dtype.kind == "f" and not np.isfinite(np.load(p)).all()]
        if bad("output"):
            (propagated if bad("input") else producers).append(name)
    return {"first_producer": producers[0] if producers else None, "producers": producers,
            "propagated": propagated}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=HERE)
    p.add_argument("--run", choices=RUNS, help=argparse.SUPPRESS)     # the child process
    p.add_argument("--dump", help=argparse.SUPPRESS)
    opts = p.parse_args()
    if opts.run:
        train(opts.run, opts.dump)
        return 0
    work = Path(tempfile.mkdtemp(prefix="ms_graph_sample_"))
    try:
        for run in RUNS:
            subprocess.run([sys.executable, __file__, "--run", run, "--dump", str(work / run)], check=True)
        dumps = {run: {it: kernels(work / run / "rank_0", it) for it in range(ITERATIONS)} for run in RUNS}
        manifest = {
            "made_by": "sample_data/mindspore_graph/generate.py (MindSpore's own dump, GRAPH_MODE, CPU)",
            "mindspore": json.loads((work / RUNS[0] / "rank_0" / ".dump_metadata" / "config.json").read_text()),
            "design": {"gain": GAIN, "shift": SHIFT, "overflow_gain": OVERFLOW_GAIN,
                       "target_fp16": "softmax logits cast to float16 (+shift: grid of 4.0)",
                       "overflow_fp16": "first Dense output * overflow_gain in float16"},
            "iterations": {str(it): {
                "kernels": {run: list(dumps[run][it]) for run in RUNS},
                "precision": precision_truth(dumps["golden_fp32"][it], dumps["target_fp16"][it]),
                "overflow": overflow_truth(dumps["overflow_fp16"][it]),
            } for it in range(ITERATIONS)},
        }
        first = manifest["iterations"]["0"]
        root, producer = first["precision"]["first_root"], first["overflow"]["first_producer"]
        if root is None or "Softmax" not in root:
            raise SystemExit(f"design failed: first root {root!r}, not the Softmax")
        if producer is None or "Mul" not in producer:
            raise SystemExit(f"design failed: first overflow producer {producer!r}, not the Mul")
        for run in RUNS:
            shutil.rmtree(opts.out / run, ignore_errors=True)
            shutil.copytree(work / run, opts.out / run)
            for folder, _, names in os.walk(opts.out / run):    # MindSpore writes 0400 / 0700
                os.chmod(folder, 0o755)
                for name in names:
                    os.chmod(os.path.join(folder, name), 0o644)
        (opts.out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
        print(f"first root {root}; first overflow producer {producer}; written to {opts.out}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
