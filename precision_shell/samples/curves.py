"""Training curves for ``curve``: a target (NPU) run and its golden (GPU) run of the same job, as
series and as the text logs real trainers print (Megatron-LM, DeepSpeed, MindFormers) plus CSV and
JSONL. TensorBoard event files of the same series are written once with torch's own writer by
``sample_data/curves/generate.py`` (committed with its output).

The designed findings (log steps 1..STEPS, Megatron's numbering; dump step = log step - 1):
* an fp16 overflow at ``OVERFLOW_STEP`` (skipped, loss scale 65536 -> 32768) and another at
  ``SECOND_OVERFLOW`` (-> 16384): the multi-rank sample's overflow is at dump step 1;
* the target drifts from the golden by 6 % from ``DRIFT_STEP`` on (before: 0.1 % noise);
* a spike (x1.8) at ``SPIKE_STEP``; a NaN loss at ``NAN_STEP``;
* the golden log misses ``GOLDEN_GAP`` (a step the target alone has).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

STEPS = 60
OVERFLOW_STEP = 2
SECOND_OVERFLOW = 40
DRIFT_STEP = 31
SPIKE_STEP = 45
NAN_STEP = 55
GOLDEN_GAP = 20
STEP_OFFSET = -1          # dump step = log step - 1 (dumps count from 0, Megatron from 1)
INITIAL_SCALE = 65536.0


def curve_runs(seed: int = 0) -> dict[str, dict[str, np.ndarray]]:
    """{"target"|"golden": {"step", "loss", "grad_norm", "loss_scale", "skipped"}}."""
    rng = np.random.default_rng(seed)
    steps = np.arange(1, STEPS + 1)
    golden = 10.0 * np.exp(-steps / 25.0) + 2.0 + 0.05 * rng.standard_normal(STEPS)
    error = 0.001 * rng.uniform(-1.0, 1.0, STEPS)
    error[steps >= DRIFT_STEP] = 0.06
    target = golden * (1.0 + error)
    target[steps == SPIKE_STEP] *= 1.8
    target[steps == NAN_STEP] = math.nan
    g_norm = 5.0 * np.exp(-steps / 30.0) + 1.0 + 0.02 * rng.standard_normal(STEPS)
    t_norm = g_norm * (1.0 + error)
    skipped = np.isin(steps, [OVERFLOW_STEP, SECOND_OVERFLOW])
    scale = np.full(STEPS, INITIAL_SCALE)
    scale[steps >= OVERFLOW_STEP] /= 2
    scale[steps >= SECOND_OVERFLOW] /= 2
    keep = steps != GOLDEN_GAP
    return {
        "target": {"step": steps, "loss": target, "grad_norm": t_norm, "loss_scale": scale, "skipped": skipped},
        "golden": {"step": steps[keep], "loss": golden[keep], "grad_norm": g_norm[keep],
                   "loss_scale": np.full(int(keep.sum()), INITIAL_SCALE), "skipped": np.zeros(int(keep.sum()), bool)},
    }


def megatron_log(run: dict) -> str:
    """Megatron-LM ``training_log`` lines (log interval 1): a NaN loss is not printed, only counted."""
    lines = []
    for k, step in enumerate(run["step"]):
        loss = run["loss"][k]
        line = (f" [2026-01-01 10:{step // 60:02d}:{step % 60:02d}] iteration {step:8d}/{STEPS:8d} |"
                f" consumed samples: {step * 32:12d} | elapsed time per iteration (ms): 512.3 |"
                f" learning rate: {1e-4:.6E} | global batch size: {32:5d} |")
        if math.isfinite(loss):
            line += f" lm loss: {loss:.6E} |"
        line += f" loss scale: {run['loss_scale'][k]:.1f} | grad norm: {run['grad_norm'][k]:.3f} |"
        line += f" number of skipped iterations: {int(run['skipped'][k]):3d} |"
        line += f" number of nan iterations: {int(not math.isfinite(loss)):3d} |"
        lines.append(line)
    return "\n".join(lines) + "\n"


def deepspeed_log(run: dict) -> str:
    """DeepSpeed: the overflow line of a skipped step, then the engine's and the pipeline
    engine's progress lines of that step."""
    lines, skipped = [], 0
    for k, step in enumerate(run["step"]):
        if run["skipped"][k]:
            skipped += 1
            before = run["loss_scale"][k - 1] if k else INITIAL_SCALE
            lines.append(f"[2026-01-01 10:00:{step % 60:02d},000] [INFO] [stage_1_and_2.py:1900:step] "
                         f"[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: "
                         f"{int(before)}, reducing to {int(run['loss_scale'][k])}")
        lines.append(f"[2026-01-01 10:00:{step % 60:02d},001] [INFO] [logging.py:96:log_dist] [Rank 0] "
                     f"step={step}, skipped={skipped}, lr=[0.0001], mom=[(0.9, 0.999)]")
        lines.append(f"steps: {step} loss: {run['loss'][k]:0.4f} iter time (s): 0.512 samples/sec: 62.500")
    return "\n".join(lines) + "\n"


def mindformers_log(run: dict) -> str:
    """MindFormers ``MFLossMonitor`` lines (dataset sink mode)."""
    lines = []
    for k, step in enumerate(run["step"]):
        lines.append(f"2026-01-01 10:00:00,000 - mindformers[mindformers/core/callback/callback.py:500] - INFO - "
                     f"{{ Epoch:[  1/  1], step:[{step:5d}/{STEPS:5d}], loss: {run['loss'][k]:5.3f}, "
                     f"per_step_time: 512ms, lr: 0.0001, overflow cond: {bool(run['skipped'][k])}, "
                     f"loss_scale: {run['loss_scale'][k]:.1f}, global_norm: [{run['grad_norm'][k]:.6f}]")
    return "\n".join(lines) + "\n"


def csv_log(run: dict) -> str:
    rows = ["step,loss,grad_norm,loss_scale,skipped"]
    for k, step in enumerate(run["step"]):
        rows.append(f"{step},{float(run['loss'][k])!r},{float(run['grad_norm'][k])!r},{float(run['loss_scale'][k])!r},"
                    f"{str(bool(run['skipped'][k])).lower()}")
    return "\n".join(rows) + "\n"


def jsonl_log(run: dict) -> str:
    rows = []
    for k, step in enumerate(run["step"]):
        loss = float(run["loss"][k])
        rows.append(json.dumps({"step": int(step), "loss": loss if math.isfinite(loss) else "nan",
                                "grad_norm": float(run["grad_norm"][k]), "loss_scale": float(run["loss_scale"][k]),
                                "skipped": bool(run["skipped"][k])}))
    return "\n".join(rows) + "\n"


def write_curve_pair(folder: Path, seed: int = 0) -> dict:
    """A Megatron-style target/golden pair in ``folder`` (beside the multi-rank workspace); the
    truth for the manifest."""
    folder.mkdir(parents=True, exist_ok=True)
    runs = curve_runs(seed)
    (folder / "target_megatron.log").write_text(megatron_log(runs["target"]), encoding="utf-8")
    (folder / "golden_megatron.log").write_text(megatron_log(runs["golden"]), encoding="utf-8")
    return {"target": str(folder / "target_megatron.log"), "golden": str(folder / "golden_megatron.log"),
            "overflow_step": OVERFLOW_STEP, "step_offset": STEP_OFFSET,
            "dump_step": OVERFLOW_STEP + STEP_OFFSET}
