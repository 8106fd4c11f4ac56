"""Framework dumps (msprobe layout) in pshell: start-up on big statistics dumps, and ``vc`` side
by side with ``msprobe compare`` (issue 12, "Speed"). Not part of the test suite.

1. **Start-up**: a pair of ``--entries`` (default 100k) statistics dumps, synthetic ``dump.json``
   files of API entries (two inputs, one output, chained so the dataflow edges are inferred as
   in a real run), opened by ``pshell T --golden G``: ``-c quit`` (to the prompt) and ``-c info``
   (the REPL's banner). Target: < 2 s.
2. **Compare**: ``pshell T --golden G -c vc`` against ``msprobe compare -tp T -gp G -o OUT``
   (``--msprobe``, default the venv the sample was made with) on the committed tensor pair
   (sample_data/framework) and, with ``--tensor-mb MB``, on a synthetic tensor pair of that many
   MB per side (``.pt`` files written by ``torch.save`` in the msprobe venv, 1 Mi-element fp32
   golden vs bf16 target tensors). Both write their CSV; the ratio is msprobe's wall / pshell's.

    python bench/framework.py                      # 100k entries, sample pair, 3 runs
    python bench/framework.py --tensor-mb 512      # plus a 512 MB-per-side tensor pair
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, bench_env, machine_info, run_child  # noqa: E402

SAMPLE = ROOT / "sample_data" / "framework"
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
    (rank / "dump.json").write_text(json.dumps(doc))
    (rank / "construct.json").write_text("{}")
    (rank / "stack.json").write_text("{}")
    return root


_TENSOR_WRITER = r'''
import json, sys, torch
root, total_mb = sys.argv[1], float(sys.argv[2])
from pathlib import Path
elements = 1 << 20
count = max(1, int(total_mb * (1 << 20) // (elements * 4)))
for side, dtype in (("golden", torch.float32), ("target", torch.bfloat16)):
    rank = Path(root) / side / "step0" / "rank0"
    data_dir = rank / "dump_tensor_data"
    data_dir.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(0)
    data = {}
    for i in range(count):
        x = torch.randn(elements, generator=g).to(dtype)
        y = (x.float() * 1.5).to(dtype)
        entry = f"Tensor.__mul__.{i}.forward"
        def leaf(t, name):
            torch.save(t.clone(), data_dir / name)
            f = t.float()
            return {"type": "torch.Tensor", "dtype": str(t.dtype), "shape": list(t.shape),
                    "Max": f.max().item(), "Min": f.min().item(), "Mean": f.mean().item(),
                    "Norm": f.norm().item(), "requires_grad": False, "data_name": name}
        data[entry] = {"input_args": [leaf(x, f"{entry}.input.0.pt")], "input_kwargs": {},
                       "output": [leaf(y, f"{entry}.output.0.pt")]}
    (rank / "dump.json").write_text(json.dumps({"task": "tensor", "level": "L1", "framework": "pytorch",
                                                "dump_data_dir": str(data_dir), "data": data}))
    (rank / "construct.json").write_text("{}")
    (rank / "stack.json").write_text("{}")
print(count)
'''


def write_tensor_pair(root: Path, total_mb: float, venv_python: Path) -> tuple[Path, Path]:
    subprocess.run([str(venv_python), "-c", _TENSOR_WRITER, str(root), str(total_mb)], check=True)
    return root / "target", root / "golden"


def pshell(target: Path, golden: Path, command: str, out: Path):
    return run_child([sys.executable, "-m", "precision_shell", str(target), "--golden", str(golden),
                      "-o", str(out), "-c", command, "--format", "json"])


def msprobe_compare(msprobe: Path, target: Path, golden: Path, out: Path):
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    return run_child([str(msprobe), "compare", "-tp", str(target), "-gp", str(golden), "-o", str(out)],
                     env=bench_env(PYTHONPATH=""))


def median_of(runs) -> dict:
    bad = [r for r in runs if not r.ok]
    if bad:
        raise SystemExit(f"failed: {' '.join(bad[0].cmd)}\n{bad[0].stderr[-2000:]}")
    # CPU (user + sys) beside wall: on a shared machine it is the steadier of the two
    return {"wall": round(statistics.median(r.wall for r in runs), 4),
            "cpu": round(statistics.median(r.user + r.sys for r in runs), 4),
            "rss_mb": round(max(r.rss_mb for r in runs), 1), "runs": [r.brief() for r in runs]}


def compare_side_by_side(name: str, target: Path, golden: Path, out: Path, msprobe: Path | None,
                         runs: int, results: dict) -> None:
    mine, theirs = [], []
    for i in range(runs):     # alternating, so load changes on a shared machine hit both sides
        mine.append(pshell(target, golden, "vc", out / f"{name}_pshell"))
        if msprobe is not None:
            theirs.append(msprobe_compare(msprobe, target, golden, out / f"{name}_msprobe"))
    entry = {"pshell_vc": median_of(mine), "rows": json.loads(mine[-1].stdout.splitlines()[-1])["tensors"]}
    if theirs:
        entry["msprobe_compare"] = median_of(theirs)
        entry["ratio"] = round(entry["msprobe_compare"]["wall"] / entry["pshell_vc"]["wall"], 2)
    results[name] = entry
    mine_s, theirs_s = entry["pshell_vc"], entry.get("msprobe_compare")
    print(f"{name} ({entry['rows']} rows): pshell vc {mine_s['wall']:.3f} s wall ({mine_s['cpu']:.3f} s CPU)"
          + (f", msprobe compare {theirs_s['wall']:.3f} s ({theirs_s['cpu']:.3f} s CPU), ratio {entry['ratio']}x"
             if theirs_s else ""), flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--entries", type=int, default=100_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--tensor-mb", type=float, default=0, help="synthetic tensor pair, MB per side (0: none)")
    p.add_argument("--msprobe", type=Path, default=Path("/work/venvs/msprobe/bin/msprobe"))
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "framework")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    msprobe = args.msprobe if args.msprobe.is_file() else None
    results: dict = {"machine": machine_info(), "entries": args.entries}

    stats = args.out / f"stats_{args.entries}"
    if not (stats / "target" / "step0" / "rank0" / "dump.json").is_file():
        write_statistics_dump(stats / "target", args.entries, "torch.bfloat16", 1)
        write_statistics_dump(stats / "golden", args.entries, "torch.float32", 2)
    size = (stats / "target" / "step0" / "rank0" / "dump.json").stat().st_size
    for command in ("quit", "info", "vc"):
        runs = [pshell(stats / "target", stats / "golden", command, args.out / "stats_pshell")
                for _ in range(args.runs)]
        results[f"statistics_{command}"] = median_of(runs)
        found = results[f"statistics_{command}"]
        print(f"{args.entries:,}-entry statistics pair ({size / 1e6:.0f} MB dump.json each), `{command}`: "
              f"{found['wall']:.3f} s wall, {found['cpu']:.3f} s CPU, {found['rss_mb']:.0f} MB", flush=True)

    compare_side_by_side("sample_tensor", SAMPLE / "target_bf16" / "step0", SAMPLE / "golden_fp32" / "step0",
                         args.out, msprobe, args.runs, results)
    if args.tensor_mb:
        if msprobe is None:
            raise SystemExit("--tensor-mb needs the msprobe venv (its torch writes the .pt files)")
        pair = args.out / f"tensor_{args.tensor_mb:g}mb"
        if not (pair / "golden" / "step0" / "rank0" / "dump.json").is_file():
            write_tensor_pair(pair, args.tensor_mb, msprobe.parent / "python")
        compare_side_by_side(f"tensor_{args.tensor_mb:g}mb", pair / "target" / "step0", pair / "golden" / "step0",
                             args.out, msprobe, args.runs, results)
    (args.out / "results.json").write_text(json.dumps(results, indent=1))
    print(f"results: {args.out / 'results.json'}")


if __name__ == "__main__":
    main()
