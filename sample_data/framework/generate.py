"""Make the framework sample: real msprobe dumps of a small torch transformer block, msprobe's own
compare results, and truth.json (the designed precision loss and overflow, computed and checked).

    /work/venvs/msprobe/bin/python sample_data/framework/generate.py [--out DIR]

Needs torch==2.13.0 and mindstudio-probe==26.2.0 (a separate venv, never a pshell dependency; see
README.md). Each dump runs in its own child process (model.py) with the output folder as working
directory, so the paths msprobe records are relative. Fails if the design did not hold: the
bf16 softmax must be the first cosine root and the fp16 activation-gain multiply the first
overflow producer.
"""

from __future__ import annotations

import argparse
import csv
import json
import platform
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import truth
from dump_entries import load_dump
from model import ACT_GAIN, BATCH, D_FF, D_MODEL, HEADS, LOGIT_SHIFT, SEED, SEQ, VOCAB

HERE = Path(__file__).resolve().parent
DESIGNED_ROOT = "Functional.softmax.0.forward"  # LOGIT_SHIFT under bf16
DESIGNED_OVERFLOW = "Tensor.__mul__.1.forward"  # ACT_GAIN under fp16 (__mul__.0 is the 1/sqrt(d) scale)

RUNS = [
    {"name": "golden_fp32", "dtype": "float32", "task": "tensor", "rank_id": 0},
    {"name": "target_bf16", "dtype": "bfloat16", "task": "tensor", "rank_id": 0},
    {"name": "overflow_fp16", "dtype": "float16", "task": "tensor", "rank_id": 0},
    # rank_id None: msprobe's default proc{pid} folder, renamed proc0 below
    {"name": "stats_golden_fp32", "dtype": "float32", "task": "statistics",
     "summary_mode": "statistics", "rank_id": None},
    {"name": "stats_target_bf16", "dtype": "bfloat16", "task": "statistics",
     "summary_mode": "statistics", "rank_id": None},
    {"name": "md5_golden_fp32", "dtype": "float32", "task": "statistics", "summary_mode": "md5",
     "rank_id": None},
    {"name": "md5_target_bf16", "dtype": "bfloat16", "task": "statistics", "summary_mode": "md5",
     "rank_id": None},
]
COMPARES = {"tensor": ("target_bf16", "golden_fp32"),
            "statistics": ("stats_target_bf16", "stats_golden_fp32"),
            "md5": ("md5_target_bf16", "md5_golden_fp32")}
OUTPUT_DIRS = [r["name"] for r in RUNS] + ["configs", "compare", "overflow_check"]


def run(cmd: list[str], cwd: Path) -> str:
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}): {' '.join(cmd)}\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return done.stdout


def rank_dir(out: Path, name: str) -> Path:
    (only,) = (out / name / "step0").iterdir()
    return only


def dump_all(out: Path) -> dict:
    model_py = "model.py" if out == HERE else str(HERE / "model.py")
    losses = {}
    for spec in RUNS:
        stdout = run([sys.executable, model_py, json.dumps(spec)], out)
        losses[spec["name"]] = float(re.findall(r"^loss (\S+)$", stdout, re.M)[-1])
        if spec["rank_id"] is None:  # proc{pid} -> proc0: same on every rerun; compare accepts it
            rank_dir(out, spec["name"]).rename(out / spec["name"] / "step0" / "proc0")
    return losses


def msprobe_cli(out: Path, args: list[str], dest: Path, pattern: str, fixed_name: str) -> list[str]:
    """Run an msprobe subcommand into dest and drop the timestamp from the one file it writes."""
    dest.mkdir(parents=True)
    cmd = [str(Path(sys.executable).parent / "msprobe"), *args, "-o", str(dest.relative_to(out))]
    run(cmd, out)
    (written,) = [p for p in dest.iterdir() if re.fullmatch(pattern, p.name)]
    written.rename(dest / fixed_name)
    return ["msprobe", *cmd[1:]]


def compare_all(out: Path) -> dict:
    results = {}
    for mode, (target, golden) in COMPARES.items():
        folder = rank_dir(out, target).name
        dest = out / "compare" / mode
        csv_name = f"compare_result_{folder}.csv"
        cmd = msprobe_cli(out, ["compare", "-tp", f"{target}/step0", "-gp", f"{golden}/step0"],
                          dest, rf"compare_result_{folder}_\d+\.csv", csv_name)
        with open(dest / csv_name, newline="") as f:
            rows = list(csv.DictReader(f))
        results[mode] = {"target": target, "golden": golden, "command": " ".join(cmd),
                         "csv": f"compare/{mode}/{csv_name}", "rows": len(rows)}
    return results


def read_compare_rows(out: Path, rel: str) -> dict[str, dict]:
    with open(out / rel, newline="") as f:
        return {row["NPU Name"]: row for row in csv.DictReader(f)}


def check_msprobe_cosines(rows: dict[str, dict], cosines: dict[str, float]) -> float:
    """Our float64 cosines against msprobe's printed ones; returns the largest difference."""
    worst, checked = 0.0, 0
    for name, row in rows.items():
        if "float" not in row["NPU Dtype"]:
            continue
        try:
            theirs = float(row["Cosine"])
        except ValueError:  # unsupported / N/A
            continue
        ours = cosines[name + ".pt"]
        worst = max(worst, abs(ours - theirs))
        checked += 1
    assert checked > 50 and worst < 1e-6, f"cosines differ from msprobe's by {worst} ({checked} rows)"
    return worst


def precision_loss_truth(out: Path, tensor_compare: dict) -> dict:
    golden, target = rank_dir(out, "golden_fp32"), rank_dir(out, "target_bf16")
    entries, cosines = truth.cosine_verdicts(golden, target)
    roots = [n for n, e in entries.items() if e["verdict"] == "root"]
    assert roots and roots[0] == DESIGNED_ROOT, f"first root is {roots[:1]}, not {DESIGNED_ROOT}"
    enclosing = truth.construct_ancestors(target, DESIGNED_ROOT)
    forward_roots = [n for n in roots if entries[n]["kind"] == "forward"]
    assert set(forward_roots) <= {DESIGNED_ROOT, *enclosing}, f"other forward roots: {forward_roots}"
    rows = read_compare_rows(out, tensor_compare["csv"])
    max_diff = check_msprobe_cosines(rows, cosines)
    root_out = [n for n in rows if n.startswith(DESIGNED_ROOT + ".output.")]
    assert root_out and all(float(rows[n]["Cosine"]) < truth.COSINE_THRESHOLD for n in root_out)
    backward_roots = [n for n in roots if entries[n]["kind"] == "backward"]
    return {
        "golden": "golden_fp32", "target": "target_bf16", "cosine_threshold": truth.COSINE_THRESHOLD,
        "root": DESIGNED_ROOT, "root_enclosing_modules": enclosing,
        "root_output_cosine": entries[DESIGNED_ROOT]["min_output_cosine"],
        "root_input_cosine": entries[DESIGNED_ROOT]["min_input_cosine"],
        "roots": roots,
        "propagated_forward": [n for n, e in entries.items()
                               if e["verdict"] == "propagated" and e["kind"] == "forward"],
        "propagated_backward": [n for n, e in entries.items()
                                if e["verdict"] == "propagated" and e["kind"] == "backward"],
        "first_backward_root": backward_roots[0] if backward_roots else None,
        "failing_parameters_grad": [n for n, e in entries.items() if e["verdict"] == "fail"],
        "max_abs_diff_vs_msprobe_cosine": max_diff,
        "entries": entries,
    }


def overflow_truth(out: Path) -> dict:
    found = truth.overflow_verdicts(rank_dir(out, "overflow_fp16"))
    producers = [n for n, v in found.items() if v == "producer"]
    assert producers and producers[0] == DESIGNED_OVERFLOW, f"first producer is {producers[:1]}"
    for name in ("golden_fp32", "target_bf16"):
        assert truth.finite_everywhere(rank_dir(out, name)), f"{name} has NaN/Inf"
    cmd = msprobe_cli(out, ["overflow_check", "-i", "overflow_fp16/step0"], out / "overflow_check",
                      r"anomaly_analyze_\d+\.json", "anomaly_analyze.json")
    with open(out / "overflow_check" / "anomaly_analyze.json") as f:
        msprobe_first = json.load(f)["rank_0"][0]["op_name"]
    assert msprobe_first == DESIGNED_OVERFLOW, f"msprobe overflow_check names {msprobe_first}"
    return {"run": "overflow_fp16", "producer": DESIGNED_OVERFLOW, "producers": producers,
            "propagated": [n for n, v in found.items() if v == "propagated"],
            "nonfinite_parameters_grad": [n for n, v in found.items() if v == "nonfinite"],
            "msprobe_overflow_check": {"command": " ".join(cmd),
                                       "json": "overflow_check/anomaly_analyze.json",
                                       "first_op": msprobe_first}}


def run_facts(out: Path, losses: dict) -> dict:
    facts = {}
    tensor_names = load_dump(rank_dir(out, "golden_fp32"))["data"].keys()
    for spec in RUNS:
        rd = rank_dir(out, spec["name"])
        dump = load_dump(rd)
        assert list(dump["data"]) == list(tensor_names), f"{spec['name']}: other entries"
        files = rd / "dump_tensor_data"
        facts[spec["name"]] = {
            "dtype": "torch." + spec["dtype"], "task": dump["task"], "level": dump["level"],
            "summary_mode": spec.get("summary_mode"), "rank_dir": rd.relative_to(out).as_posix(),
            "config": f"configs/{spec['name']}.json", "entries": len(dump["data"]),
            "tensor_files": len(list(files.iterdir())) if files.is_dir() else 0,
            "loss": truth.finite_or_none(losses[spec["name"]]),  # fp16: NaN
        }
    return facts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE, help="sample folder (default: this one)")
    out = ap.parse_args().out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    for name in OUTPUT_DIRS:
        shutil.rmtree(out / name, ignore_errors=True)
    losses = dump_all(out)
    compares = compare_all(out)
    manifest = {
        "versions": {"torch": metadata.version("torch"),
                     "mindstudio-probe": metadata.version("mindstudio-probe"),
                     "python": platform.python_version()},
        "commands": {
            "venv": ["python3 -m venv /work/venvs/msprobe",
                     "/work/venvs/msprobe/bin/pip install torch==2.13.0 mindstudio-probe==26.2.0"],
            "generate": "/work/venvs/msprobe/bin/python sample_data/framework/generate.py",
            "dump": "python model.py '<run spec>' (working directory: the sample folder)",
        },
        "seed": SEED,
        "model": {"vocab": VOCAB, "d_model": D_MODEL, "heads": HEADS, "d_ff": D_FF,
                  "batch": BATCH, "seq": SEQ, "logit_shift": LOGIT_SHIFT, "act_gain": ACT_GAIN},
        "runs": run_facts(out, losses),
        "compare": compares,
        "precision_loss": precision_loss_truth(out, compares["tensor"]),
        "overflow": overflow_truth(out),
    }
    with open(out / "truth.json", "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    print(f"root {manifest['precision_loss']['root']}, overflow {manifest['overflow']['producer']}")


if __name__ == "__main__":
    main()
