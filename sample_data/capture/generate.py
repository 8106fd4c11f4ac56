"""Make the capture sample: pshell's own capture (precision_shell.capture) of one training step of
the framework sample's transformer block (sample_data/framework/model.py), and truth.json.

    python sample_data/capture/generate.py [--out DIR]

Needs torch (``pip install '.[capture]'``), never msprobe. Three runs, task tensor, level mix,
seed 0, one thread: golden_fp32/, target_bf16/ (the model ``.to(bfloat16)``: the +300 logit
shift loses the softmax's precision), overflow_fp16/ (``.to(float16)``: the 2**16 activation gain
overflows). Runs with the output folder as working directory so dump_data_dir is relative;
stack.json frames are rewritten relative to the repository (or ``<site-packages>/...``) so two
runs are byte-identical. Fails if the design did not hold.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import site
import sys
import sysconfig
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE.parent / "framework"))   # model.py, truth.py, dump_entries.py

import truth  # noqa: E402
from model import SEED, SEQ, VOCAB, BATCH, Block  # noqa: E402

from precision_shell.capture import capture  # noqa: E402

RUNS = {"golden_fp32": torch.float32, "target_bf16": torch.bfloat16, "overflow_fp16": torch.float16}
DESIGNED_ROOT = "Functional.softmax.0.forward"     # LOGIT_SHIFT under bf16
DESIGNED_OVERFLOW = "Tensor.__mul__.1.forward"     # ACT_GAIN under fp16


def capture_one_step(name: str, dtype: torch.dtype) -> float:
    """One forward+backward step of a freshly seeded Block in dtype, captured into name/."""
    torch.manual_seed(SEED)
    model = Block()
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ))
    targets = torch.randint(0, VOCAB, (BATCH, SEQ))
    model = model.to(dtype)
    with capture(name, model=model, mode="tensor", level="mix"):
        loss = model(tokens, targets)
        loss.backward()
    return float(loss.detach())


def _path_prefixes() -> list[tuple[str, str]]:
    """Absolute prefixes in stack frames and what they become (longest first)."""
    prefixes = {str(REPO) + os.sep: ""}
    for p in {*site.getsitepackages(), site.getusersitepackages(), sysconfig.get_paths()["purelib"]}:
        prefixes[str(Path(p)) + os.sep] = "<site-packages>/"
    prefixes[str(Path(sysconfig.get_paths()["stdlib"])) + os.sep] = "<stdlib>/"
    return sorted(prefixes.items(), key=lambda kv: -len(kv[0]))


def strip_stack_paths(rank_dir: Path) -> None:
    text = (rank_dir / "stack.json").read_text()
    for prefix, repl in _path_prefixes():
        text = text.replace(prefix, repl)
    (rank_dir / "stack.json").write_text(text)


def rank_dir(out: Path, name: str) -> Path:
    return out / name / "step0" / "rank0"


def precision_loss_truth(out: Path) -> dict:
    golden, target = rank_dir(out, "golden_fp32"), rank_dir(out, "target_bf16")
    entries, _ = truth.cosine_verdicts(golden, target)
    roots = [n for n, e in entries.items() if e["verdict"] == "root"]
    if not roots or roots[0] != DESIGNED_ROOT:
        sys.exit(f"design failed: first root {roots[:1]}, expected {DESIGNED_ROOT}")
    return {"golden": "golden_fp32", "target": "target_bf16",
            "cosine_threshold": truth.COSINE_THRESHOLD, "first_root": roots[0], "roots": roots,
            "propagated": [n for n, e in entries.items() if e["verdict"] == "propagated"],
            "entries": entries}


def overflow_truth(out: Path) -> dict:
    found = truth.overflow_verdicts(rank_dir(out, "overflow_fp16"))
    producers = [n for n, v in found.items() if v == "producer"]
    if not producers or producers[0] != DESIGNED_OVERFLOW:
        sys.exit(f"design failed: first overflow producer {producers[:1]}, expected {DESIGNED_OVERFLOW}")
    for name in ("golden_fp32", "target_bf16"):
        if not truth.finite_everywhere(rank_dir(out, name)):
            sys.exit(f"design failed: {name} has NaN/Inf")
    return {"run": "overflow_fp16", "producer": producers[0], "producers": producers,
            "propagated": [n for n, v in found.items() if v == "propagated"],
            "nonfinite_parameters_grad": [n for n, v in found.items() if v == "nonfinite"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE, help="output folder (default: this folder)")
    out = parser.parse_args().out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    for name in RUNS:
        shutil.rmtree(out / name, ignore_errors=True)
    torch.set_num_threads(1)      # one summation order, so reruns are bit-identical
    os.chdir(out)                 # dump_data_dir relative to the sample folder
    losses = {}
    for name, dtype in RUNS.items():     # a loop, not a comprehension: its frame is in stack.json
        losses[name] = capture_one_step(name, dtype)
    for name in RUNS:
        strip_stack_paths(rank_dir(out, name))
    manifest = {
        "made_by": "python sample_data/capture/generate.py (pshell's capture, task tensor, level mix)",
        "model": "sample_data/framework/model.py Block, seed 0, one thread",
        "torch": torch.__version__,
        "runs": {name: {"dtype": str(dtype), "loss": truth.finite_or_none(losses[name])}
                 for name, dtype in RUNS.items()},
        "precision_loss": precision_loss_truth(out),
        "overflow": overflow_truth(out),
    }
    with open(out / "truth.json", "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    print(f"wrote {', '.join(RUNS)} and truth.json in {out}")


if __name__ == "__main__":
    main()
