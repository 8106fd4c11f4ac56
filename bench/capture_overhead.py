"""Capture overhead (issue 14): one training step of a 24-layer MLP (Linear 512 + ReLU, batch 64,
forward + backward, CPU, one thread), uncaptured vs pshell's capture (statistics, tensor) vs
msprobe's PrecisionDebugger (statistics L1, statistics mix, tensor mix) side by side.

    python bench/capture_overhead.py [--steps 7] [--msprobe-python /work/venvs/msprobe/bin/python]

Each configuration runs in its own process (msprobe's debugger can be set up once per process)
and reports the median wall time of ``--steps`` steps after two warm-up steps; every captured
step writes its files (to a temporary folder), as a real capture does. Ratios are against the
uncaptured step measured in the same interpreter (msprobe's venv has its own torch 2.13.0).
Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

LAYERS, WIDTH, BATCH = 24, 512, 64
PSHELL = ("uncaptured", "pshell statistics (mix)", "pshell tensor (mix)")
MSPROBE = ("uncaptured", "msprobe statistics L1", "msprobe statistics mix", "msprobe tensor mix")


def _model():
    import torch
    torch.manual_seed(0)
    torch.set_num_threads(1)
    layers = []
    for _ in range(LAYERS):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers), torch.randn(BATCH, WIDTH)


def _train_step(model, x) -> None:
    model.zero_grad(set_to_none=True)
    model(x).pow(2).mean().backward()


def _time_steps(step, steps: int) -> float:
    for _ in range(2):
        step()
    walls = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        walls.append(time.perf_counter() - start)
    return statistics.median(walls) * 1000


def measure(config: str, steps: int, folder: str) -> float:
    """Median ms per step of one configuration, in this process."""
    model, x = _model()
    if config == "uncaptured":
        return _time_steps(lambda: _train_step(model, x), steps)
    if config.startswith("pshell"):
        from precision_shell.capture import capture
        mode = config.split()[1]
        counter = iter(range(10 ** 6))

        def captured():
            with capture(os.path.join(folder, str(next(counter))), model=model, mode=mode):
                _train_step(model, x)
        return _time_steps(captured, steps)
    from msprobe.pytorch import PrecisionDebugger
    _, task, level = config.split()
    per_task = {"scope": [], "list": [], "data_mode": ["all"]}
    if task == "statistics":
        per_task["summary_mode"] = "statistics"
    config_path = os.path.join(folder, "config.json")
    with open(config_path, "w") as f:
        json.dump({"task": task, "level": level, "dump_path": os.path.join(folder, "dump"),
                   "rank": [], "step": [], task: per_task}, f)
    debugger = PrecisionDebugger(config_path=config_path)

    def captured():
        debugger.start(model=model)
        _train_step(model, x)
        debugger.stop()
        debugger.step()
    return _time_steps(captured, steps)


def _child(python: str, config: str, steps: int) -> float | None:
    done = subprocess.run([python, os.path.abspath(__file__), "--one", config, "--steps", str(steps)],
                          capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(
                              os.path.abspath(__file__)))})
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        print(f"warning: {config} with {python} failed: {done.stderr.strip().splitlines()[-1:]}",
              file=sys.stderr)
        return None
    return json.loads(lines[-1])["ms"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=7)
    p.add_argument("--msprobe-python", default="/work/venvs/msprobe/bin/python")
    p.add_argument("--one", help=argparse.SUPPRESS)
    opts = p.parse_args(argv)
    if opts.one:
        with tempfile.TemporaryDirectory() as folder:
            print(json.dumps({"config": opts.one, "ms": measure(opts.one, opts.steps, folder)}))
        return 0
    rows = []
    for python, configs in ((sys.executable, PSHELL), (opts.msprobe_python, MSPROBE)):
        if not os.path.exists(python):
            print(f"warning: {python} missing: {configs[1].split()[0]} not measured", file=sys.stderr)
            continue
        base = None
        for config in configs:
            ms = _child(python, config, opts.steps)
            base = ms if config == "uncaptured" else base
            ratio = f"x{ms / base:.1f}" if ms is not None and base else "-"
            rows.append((config if config != "uncaptured" else f"uncaptured ({os.path.basename(os.path.dirname(os.path.dirname(python))) or 'python'})",
                         "-" if ms is None else f"{ms:.1f}", ratio))
    print(f"| {LAYERS}-layer MLP, Linear {WIDTH}, batch {BATCH}, fwd+bwd, CPU, 1 thread | ms/step | vs uncaptured |")
    print("|---|---:|---:|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
