"""Capture overhead (issue 14): one training step of a 24-layer MLP (Linear 512 + ReLU, batch 64,
forward + backward, CPU, one thread), uncaptured vs pshell's capture (statistics, tensor) vs
msprobe's PrecisionDebugger (statistics L1, statistics mix, tensor mix) side by side.

    python bench/capture_overhead.py [--steps 7] [--msprobe-python /work/venvs/msprobe/bin/python]

Each configuration runs in its own process (msprobe's debugger can be set up once per process)
alternates captured and uncaptured steps (after two warm-up pairs) so that load from other
processes hits both alike; it reports the median of each and their ratio. Every captured step
writes its files (to a temporary folder), as a real capture does. msprobe runs in its own venv
(torch 2.13.0 too).
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
PSHELL = ("pshell statistics mix", "pshell tensor mix")
MSPROBE = ("msprobe statistics L1", "msprobe statistics mix", "msprobe tensor mix")


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


def _alternate(captured, plain, steps: int) -> tuple[float, float]:
    """Median ms of a captured and an uncaptured step, run alternately so that load from other
    processes on a shared machine hits both alike."""
    for _ in range(2):
        captured()
        plain()
    walls = {"captured": [], "plain": []}
    for _ in range(steps):
        for key, step in (("captured", captured), ("plain", plain)):
            start = time.perf_counter()
            step()
            walls[key].append(time.perf_counter() - start)
    return tuple(statistics.median(walls[k]) * 1000 for k in ("captured", "plain"))


def measure(config: str, steps: int, folder: str) -> tuple[float, float]:
    """(captured, uncaptured) median ms per step of one configuration, in this process."""
    model, x = _model()

    def plain():
        _train_step(model, x)
    if config.startswith("pshell"):
        from precision_shell.capture import capture
        mode = config.split()[1]
        counter = iter(range(10 ** 6))

        def captured():
            with capture(os.path.join(folder, str(next(counter))), model=model, mode=mode):
                _train_step(model, x)
        return _alternate(captured, plain, steps)
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
    return _alternate(captured, plain, steps)


def _child(python: str, config: str, steps: int) -> tuple[float, float] | None:
    done = subprocess.run([python, os.path.abspath(__file__), "--one", config, "--steps", str(steps)],
                          capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(
                              os.path.abspath(__file__)))})
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        print(f"warning: {config} with {python} failed: {done.stderr.strip().splitlines()[-1:]}",
              file=sys.stderr)
        return None
    found = json.loads(lines[-1])
    return found["captured"], found["uncaptured"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=7)
    p.add_argument("--msprobe-python", default="/work/venvs/msprobe/bin/python")
    p.add_argument("--one", help=argparse.SUPPRESS)
    opts = p.parse_args(argv)
    if opts.one:
        with tempfile.TemporaryDirectory() as folder:
            captured, plain = measure(opts.one, opts.steps, folder)
            print(json.dumps({"config": opts.one, "captured": captured, "uncaptured": plain}))
        return 0
    rows = []
    for python, configs in ((sys.executable, PSHELL), (opts.msprobe_python, MSPROBE)):
        if not os.path.exists(python):
            print(f"warning: {python} missing: {configs[0]} not measured", file=sys.stderr)
            continue
        for config in configs:
            found = _child(python, config, opts.steps)
            if found is None:
                rows.append((config, "-", "-", "-"))
                continue
            captured, plain = found
            rows.append((config, f"{plain:.1f}", f"{captured:.1f}", f"x{captured / plain:.1f}"))
    print(f"{LAYERS}-layer MLP, Linear {WIDTH}, batch {BATCH}, fwd+bwd, CPU, 1 thread; "
          f"median of {opts.steps} alternating steps")
    print("| capture | uncaptured ms/step | captured ms/step | ratio |")
    print("|---|---:|---:|---:|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
