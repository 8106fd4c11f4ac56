"""Write the committed curve samples: TensorBoard event files with torch's own writer
(torch.utils.tensorboard.SummaryWriter) and the text/CSV/JSONL logs of the same series
(precision_shell/samples/curves.py).

Run once, in a tool environment (never pshell's runtime):
    python -m venv /work/venvs/tool-tb && /work/venvs/tool-tb/bin/pip install torch tensorboard
    /work/venvs/tool-tb/bin/python sample_data/curves/generate.py

target/: the NPU run as two event files: the job was restarted from a checkpoint at step 49
and re-logged steps 50..52 (a real restart's shape; values are the same), written with
simple_value (torch's default). golden/: the GPU run, written with new_style=True (tensor
summaries, as TF2 writes them), double precision.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))

from precision_shell.samples import curves  # noqa: E402

RESTART_AT = 50      # the second target file starts here
FIRST_FILE_END = 52  # the first target file got as far as this before the job died


def _write(writer, run: dict, lo: int, hi: int, **kw) -> None:
    for k, step in enumerate(run["step"]):
        if not lo <= step <= hi:
            continue
        wall = 1.78e9 + float(step)
        writer.add_scalar("train/loss", float(run["loss"][k]), int(step), walltime=wall, **kw)
        writer.add_scalar("train/grad_norm", float(run["grad_norm"][k]), int(step), walltime=wall, **kw)
        writer.add_scalar("train/loss_scale", float(run["loss_scale"][k]), int(step), walltime=wall, **kw)


def main() -> None:
    from torch.utils.tensorboard import SummaryWriter

    runs = curves.curve_runs()
    for sub in ("target", "golden"):
        shutil.rmtree(HERE / sub, ignore_errors=True)
    first = SummaryWriter(str(HERE / "target"), filename_suffix=".part1")
    _write(first, runs["target"], 1, FIRST_FILE_END)
    first.close()
    second = SummaryWriter(str(HERE / "target"), filename_suffix=".part2")
    _write(second, runs["target"], RESTART_AT, curves.STEPS)
    second.close()
    golden = SummaryWriter(str(HERE / "golden"))
    _write(golden, runs["golden"], 1, curves.STEPS, new_style=True, double_precision=True)
    golden.close()
    for name, text in (("target_megatron.log", curves.megatron_log(runs["target"])),
                       ("golden_megatron.log", curves.megatron_log(runs["golden"])),
                       ("target_deepspeed.log", curves.deepspeed_log(runs["target"])),
                       ("target_mindformers.log", curves.mindformers_log(runs["target"])),
                       ("target.csv", curves.csv_log(runs["target"])),
                       ("target.jsonl", curves.jsonl_log(runs["target"]))):
        (HERE / name).write_text(text, encoding="utf-8")
    files = sorted(p.relative_to(HERE) for p in HERE.rglob("*") if p.is_file() and p.suffix != ".py")
    print("wrote", ", ".join(map(str, files)))


if __name__ == "__main__":
    main()
