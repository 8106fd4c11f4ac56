"""Framework dumps (msprobe layout) in pshell against ``msprobe compare`` (issue 12, "Speed").
Not part of the test suite. Every measurement is a whole process; all of them alternate round by
round (``--runs`` rounds, medians reported), so load changes on a shared machine hit every side:

1. **open to the prompt**: a pair of ``--entries`` (default 100k) statistics dumps (synthetic
   ``dump.json`` files of chained API entries, so dataflow edges are inferred as in a real run)
   opened by ``pshell T --golden G -c info`` (what the REPL runs for its banner). Target < 2 s.
2. **statistics vc**: ``pshell T --golden G -c vc`` on that pair (msprobe's summary CSV), and
   ``-c "vcs -l 20"`` (roots and propagated judged by the statistics, issue 31's "100 MB
   dump.json vcs"; its 148 MB JSON document), the same in text with the first ``next`` panel
   (``statistics_vcs_text_next``, the REPL path); ``reader_peak``: the framework reader alone on one side's ``dump.json``;
   ``--against TREE`` runs ``vc`` and ``vcs -l 20`` with another checkout's pshell (before/after,
   the CSVs checked byte-identical) and ``--msprobe-stats-runs N`` times ``msprobe compare`` on the
   pair (~70 s a run).
3. **tensor vc**: ``pshell T --golden G -c vc`` on a tensor-mode pair of ``--tensor-mb`` MB of
   fp32 golden files (default 1024) and half that of bf16 target files (1 Mi-element tensors,
   an input and an output per entry, ``.pt`` files written by ``torch.save`` in msprobe's
   layout by the msprobe venv's torch), against ``msprobe compare -tp T -gp G -o OUT`` on the
   same pair; MB/s = bytes of both sides / wall, ratio = msprobe's wall / pshell's. The two
   CSVs are checked against each other (Cosine, MaxAbsErr, MaxRelativeErr, ratios to 1e-6).
4. the same compare on the committed sample pair (sample_data/framework).

    python bench/framework.py                        # 100k entries, 1 GB + 0.5 GB pair, 3 rounds
    python bench/framework.py --tensor-mb 256 --runs 5
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, bench_env, machine_info, run_child  # noqa: E402

from precision_shell.samples.statistics_pair import write_statistics_pair  # noqa: E402

SAMPLE = ROOT / "sample_data" / "framework"
_TENSOR_WRITER = r'''
import json, sys, torch
root, total_mb = sys.argv[1], float(sys.argv[2])
from pathlib import Path
elements = 1 << 20
count = max(1, int(total_mb * (1 << 20) // (2 * elements * 4)))   # golden: 2 fp32 tensors per entry
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


# the framework reader alone on one dump.json (its peak memory: issue 31's < 500 MB for 100 MB)
_READ_ONLY = ("import sys; from precision_shell.formats.msprobe.dump import read_msprobe_dump; "
              "print(len(read_msprobe_dump(sys.argv[1]).ranks[0].entries))")


# an installed pshell has its bytecode cached; this machine's PYTHONDONTWRITEBYTECODE=1 would
# make every run compile ~150 modules from source first (~0.15-0.3 s of start-up)
PSHELL_ENV = bench_env(PYTHONDONTWRITEBYTECODE="")


def pshell(target: Path, golden: Path, command: str, out: Path, tree: Path | None = None, fmt: str = "json"):
    """``tree``: another checkout's pshell, for before/after: run from that folder (``-m`` puts the
    working directory first on sys.path, ahead of PYTHONPATH and of this venv's editable install).
    ``command``: one or more commands separated by ``;`` (one ``-c`` each)."""
    env = PSHELL_ENV if tree is None else {**PSHELL_ENV, "PYTHONPATH": str(tree),
                                           "PYTHONPYCACHEPREFIX": str(ROOT / "bench" / "out" / "pycache_against")}
    commands = [a for c in command.split(";") for a in ("-c", c.strip())]
    return run_child([sys.executable, "-m", "precision_shell", str(target), "--golden", str(golden),
                      "-o", str(out), *commands, "--format", fmt], env=env, cwd=tree or ROOT)


def seconds_to_prompt(target: Path, golden: Path, out: Path) -> float | None:
    """Wall time from exec until the REPL's prompt shows in a terminal (pexpect: a pty), what a
    user waits for; ``-c info`` also counts the command and the interpreter freeing 100k entries
    at exit (~0.3 s). None without pexpect (the `test` extra)."""
    try:
        import pexpect
    except ImportError:
        return None
    start = time.perf_counter()
    child = pexpect.spawn(sys.executable, ["-m", "precision_shell", str(target), "--golden", str(golden),
                                           "-o", str(out)], env={**PSHELL_ENV, "TERM": "xterm"},
                          encoding="utf-8", timeout=120, dimensions=(40, 120))
    child.expect("pshell>")
    elapsed = time.perf_counter() - start
    child.sendeof()
    child.expect(pexpect.EOF)
    return elapsed


def msprobe_compare(msprobe: Path, target: Path, golden: Path, out: Path):
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    return run_child([str(msprobe), "compare", "-tp", str(target), "-gp", str(golden), "-o", str(out)],
                     env=bench_env(PYTHONPATH=""))


def tree_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def summary_of(runs) -> dict:
    """Medians of wall and CPU (user + sys: on a shared machine the steadier), peak RSS."""
    bad = [r for r in runs if not r.ok]
    if bad:
        raise SystemExit(f"failed: {' '.join(bad[0].cmd)}\n{bad[0].stderr[-2000:]}")
    return {"wall": round(statistics.median(r.wall for r in runs), 4),
            "cpu": round(statistics.median(r.user + r.sys for r in runs), 4),
            "rss_mb": round(max(r.rss_mb for r in runs), 1), "pss_mb": round(max(r.pss_mb for r in runs), 1),
            "runs": [r.brief() for r in runs]}


def agreement(pshell_csv: Path, msprobe_dir: Path) -> dict:
    """Rows and the largest difference per metric column between the two CSVs (by NPU Name)."""
    import csv
    import math

    theirs_csv = sorted(msprobe_dir.glob("compare_result_*.csv"))[-1]
    ours = {r["NPU Name"]: r for r in csv.DictReader(pshell_csv.open())}
    theirs = list(csv.DictReader(theirs_csv.open()))
    worst: dict[str, float] = {}
    for row in theirs:
        mine = ours.get(row["NPU Name"])
        for col in ("Cosine", "MaxAbsErr", "MaxRelativeErr", "One Thousandth Err Ratio",
                    "Five Thousandths Err Ratio", "EucDist"):
            try:
                a, b = float(mine[col]), float(row[col])
            except (TypeError, ValueError):
                continue
            if not (math.isnan(a) and math.isnan(b)):
                worst[col] = max(worst.get(col, 0.0), abs(a - b))
    return {"rows": len(ours), "msprobe_rows": len(theirs), "max_diff": worst}


def stats_agreement(pshell_csv: Path, msprobe_dir: Path) -> dict:
    """Rows of the two statistics CSVs and how many differ in any cell (msprobe's Result and
    Err_message apart: it flags every bf16-vs-fp32 row an error for the dtype alone)."""
    import csv

    theirs_csv = sorted(msprobe_dir.glob("compare_result_*.csv"))[-1]
    with pshell_csv.open(newline="") as f:
        ours = list(csv.reader(f))
    with theirs_csv.open(newline="") as f:
        theirs = list(csv.reader(f))
    skip = {ours[0].index(c) for c in ("Result", "Err_message")}
    differ = sum(1 for a, b in zip(ours[1:], theirs[1:])
                 if [c for i, c in enumerate(a) if i not in skip] != [c for i, c in enumerate(b) if i not in skip])
    return {"rows": len(ours) - 1, "msprobe_rows": len(theirs) - 1, "header_equal": ours[0] == theirs[0],
            "rows_differing": differ}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--entries", type=int, default=100_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--tensor-mb", type=float, default=1024, help="fp32 golden MB of the tensor pair (0: none)")
    p.add_argument("--msprobe", type=Path, default=Path("/work/venvs/msprobe/bin/msprobe"))
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "framework")
    p.add_argument("--against", type=Path, default=None,
                   help="another checkout (e.g. /work/main): statistics vc by its pshell too, alternating")
    p.add_argument("--msprobe-stats-runs", type=int, default=0,
                   help="times msprobe compare runs on the statistics pair (~70 s each)")
    p.add_argument("--stats-only", action="store_true", help="only the statistics pair (no tensor pairs)")
    p.add_argument("--skip-against-vcs", action="store_true",
                   help="no `vcs` by the --against tree (main before issue 31 listed n^2 downstream names: "
                        "its vcs on the 100k pair does not finish)")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    msprobe = args.msprobe if args.msprobe.is_file() else None
    results: dict = {"machine": machine_info(), "entries": args.entries}

    stats = args.out / f"stats_{args.entries}"
    if not (stats / "target" / "step0" / "rank0" / "dump.json").is_file() or \
            (stats / "target" / "step0" / "rank0" / "dump.json").read_bytes()[:2] != b"{\n":  # older: not indented
        write_statistics_pair(stats, args.entries)
    pairs = {} if args.stats_only else {"sample": (SAMPLE / "target_bf16" / "step0", SAMPLE / "golden_fp32" / "step0")}
    if args.tensor_mb and not args.stats_only:
        if msprobe is None:
            raise SystemExit("--tensor-mb needs the msprobe venv (its torch writes the .pt files)")
        pair = args.out / f"tensor_{args.tensor_mb:g}mb"
        if not (pair / "golden" / "step0" / "rank0" / "dump.json").is_file():
            write_tensor_pair(pair, args.tensor_mb, msprobe.parent / "python")
        pairs[f"synthetic_{args.tensor_mb:g}mb"] = (pair / "target" / "step0", pair / "golden" / "step0")
    pshell(SAMPLE / "target_bf16" / "step0", SAMPLE / "golden_fp32" / "step0", "quit",
           args.out / "warm_up")     # writes the bytecode cache (see PSHELL_ENV)
    # one list of runs per measurement, filled round by round
    runs: dict[str, list] = {}
    prompts: list[float] = []
    if args.against is not None:
        pshell(SAMPLE / "target_bf16" / "step0", SAMPLE / "golden_fp32" / "step0", "quit",
               args.out / "warm_up", args.against)
    for round_ in range(args.runs):
        prompt = seconds_to_prompt(stats / "target", stats / "golden", args.out / "stats_pshell")
        if prompt is not None:
            prompts.append(prompt)
        for name, command, fmt in (("open_to_prompt", "info", "json"), ("statistics_vc", "vc", "json"),
                                   ("statistics_vcs", "vcs -l 20", "json"),
                                   ("statistics_vcs_text_next", "vcs -l 20; next", "table")):
            runs.setdefault(name, []).append(pshell(stats / "target", stats / "golden", command,
                                                    args.out / "stats_pshell", fmt=fmt))
        runs.setdefault("reader_peak", []).append(run_child(
            [sys.executable, "-c", _READ_ONLY, str(stats / "golden" / "step0" / "rank0" / "dump.json")],
            env=PSHELL_ENV, cwd=ROOT))
        if args.against is not None:
            runs.setdefault("statistics_vc_against", []).append(
                pshell(stats / "target", stats / "golden", "vc", args.out / "stats_against", args.against))
            if not args.skip_against_vcs:
                runs.setdefault("statistics_vcs_against", []).append(
                    pshell(stats / "target", stats / "golden", "vcs -l 20", args.out / "stats_against", args.against))
                runs.setdefault("statistics_vcs_text_next_against", []).append(
                    pshell(stats / "target", stats / "golden", "vcs -l 20; next", args.out / "stats_against",
                           args.against, fmt="table"))
        if msprobe is not None and round_ < args.msprobe_stats_runs:
            runs.setdefault("statistics_msprobe_compare", []).append(
                msprobe_compare(msprobe, stats / "target" / "step0", stats / "golden" / "step0",
                                args.out / "stats_msprobe"))
        for name, (target, golden) in pairs.items():
            runs.setdefault(f"{name}_pshell_vc", []).append(pshell(target, golden, "vc", args.out / f"{name}_pshell"))
            if msprobe is not None:
                runs.setdefault(f"{name}_msprobe_compare", []).append(
                    msprobe_compare(msprobe, target, golden, args.out / f"{name}_msprobe"))
    results.update({name: summary_of(found) for name, found in runs.items()})
    size = (stats / "target" / "step0" / "rank0" / "dump.json").stat().st_size
    if prompts:
        results["prompt_in_terminal"] = {"wall": round(statistics.median(prompts), 4), "runs": prompts}
        print(f"{args.entries:,}-entry statistics pair, the REPL's prompt in a terminal after "
              f"{statistics.median(prompts):.3f} s (median; runs {', '.join(f'{p:.2f}' for p in prompts)})")
    for name in ("open_to_prompt", "statistics_vc", "statistics_vcs", "statistics_vcs_text_next", "reader_peak",
                 "statistics_vc_against", "statistics_vcs_against", "statistics_vcs_text_next_against",
                 "statistics_msprobe_compare"):
        found = results.get(name)
        if found is None:
            continue
        print(f"{args.entries:,}-entry statistics pair ({size / 1e6:.0f} MB dump.json per side), {name}: "
              f"{found['wall']:.3f} s wall, {found['cpu']:.3f} s CPU, {found['rss_mb']:.0f} MB RSS, "
              f"{found['pss_mb']:.0f} MB PSS")
    mine = results["statistics_vc"]
    for other in ("statistics_vc_against", "statistics_msprobe_compare"):
        if other in results:
            results[f"{other}_ratio"] = round(results[other]["wall"] / mine["wall"], 2)
            print(f"  {other} / statistics_vc: {results[f'{other}_ratio']}x wall")
    if "statistics_vcs_against" in results:
        results["statistics_vcs_against_ratio"] = round(results["statistics_vcs_against"]["wall"]
                                                        / results["statistics_vcs"]["wall"], 2)
        print(f"  statistics_vcs_against / statistics_vcs: {results['statistics_vcs_against_ratio']}x wall")
        docs = [runs[name][-1].stdout for name in ("statistics_vcs", "statistics_vcs_against")]
        texts = [runs[name][-1].stdout.replace(str(args.out / d), "OUT") for name, d in
                 (("statistics_vcs_text_next", "stats_pshell"), ("statistics_vcs_text_next_against", "stats_against"))]
        results["statistics_vcs_identical"] = {"json": docs[0] == docs[1], "text_and_next": texts[0] == texts[1]}
        print(f"  vcs output identical to {args.against}'s: {results['statistics_vcs_identical']}")
    if args.against is not None:
        ours, before = (args.out / d / "compare_result_rank0.csv" for d in ("stats_pshell", "stats_against"))
        results["statistics_csv_identical"] = ours.read_bytes() == before.read_bytes()
        print(f"  statistics CSV byte-identical to {args.against}'s: {results['statistics_csv_identical']}")
    if "statistics_msprobe_compare" in results:
        results["statistics_msprobe_agreement"] = stats_agreement(args.out / "stats_pshell" / "compare_result_rank0.csv",
                                                                  args.out / "stats_msprobe")
        print(f"  vs msprobe's CSV: {results['statistics_msprobe_agreement']}")
    for name, (target, golden) in pairs.items():
        mine, theirs = results[f"{name}_pshell_vc"], results.get(f"{name}_msprobe_compare")
        megabytes = (tree_bytes(target) + tree_bytes(golden)) / 1e6
        rows = json.loads(runs[f"{name}_pshell_vc"][-1].stdout.splitlines()[-1])
        line = (f"{name} tensor pair ({megabytes:,.0f} MB, {rows['tensors']} rows): pshell vc {mine['wall']:.2f} s "
                f"({megabytes / mine['wall']:,.0f} MB/s, {mine['cpu']:.2f} s CPU, {mine['rss_mb']:.0f} MB)")
        if theirs:
            results[f"{name}_ratio"] = round(theirs["wall"] / mine["wall"], 2)
            results[f"{name}_agreement"] = agreement(Path(rows["csv"]), args.out / f"{name}_msprobe")
            line += (f" | msprobe compare {theirs['wall']:.2f} s ({theirs['cpu']:.2f} s CPU, "
                     f"{theirs['rss_mb']:.0f} MB) | ratio {results[f'{name}_ratio']}x")
        print(line)
    (args.out / "results.json").write_text(json.dumps(results, indent=1))
    print(f"results: {args.out / 'results.json'}")


if __name__ == "__main__":
    main()
