"""``curve --plot``: the curve as charts (drawn by render.plot): target and golden, the relative
error with the tolerance line, the loss scale; events marked. Long runs are thinned to at most
``MAX_POINTS`` points per chart (every event step kept)."""

from __future__ import annotations

from typing import Any

import numpy as np

from precision_shell.commands.plot_cmd import require_plotext
from precision_shell.commands.results import Chain, Chart

MAX_POINTS = 2000
MARK_LABELS = {"skipped": "skipped", "scale_drop": "scale drop", "divergence": "divergence",
               "spike": "spike", "nonfinite": "nonfinite"}


def _thin(steps: np.ndarray, keep: set[int]) -> np.ndarray:
    """Positions to draw: every k-th point plus the event steps."""
    n = len(steps)
    if n <= MAX_POINTS:
        return np.arange(n)
    stride = int(np.ceil(n / MAX_POINTS))
    chosen = np.zeros(n, dtype=bool)
    chosen[::stride] = True
    chosen[-1] = True
    chosen |= np.isin(steps, np.fromiter(keep, dtype=np.int64, count=len(keep)))
    return np.flatnonzero(chosen)


def _marks(found: Any, shown: set[int]) -> dict[str, list[int]]:
    marks: dict[str, list[int]] = {}
    for e in found.events:
        if e.step in shown and e.kind != "nonfinite":
            marks.setdefault(MARK_LABELS[e.kind], []).append(e.step)
    return marks


def curve_charts(found: Any, panel: Any) -> Chain:
    require_plotext()
    t = found.target
    events = {e.step for e in found.events}
    at = _thin(t.steps, events)
    steps = [int(s) for s in t.steps[at]]
    shown = set(steps)
    overlay = {}
    if found.golden is not None:
        g = dict(zip(found.golden.steps.tolist(), found.golden.values.tolist()))
        overlay["golden"] = [g.get(s, float("nan")) for s in steps]
    charts = [Chart(f"{found.metric}: target" + (" (and golden)" if overlay else "") + " by step", "line",
                    steps, [float(v) for v in t.values[at]], [str(s) for s in steps], "target",
                    xlabel="step", marks=_marks(found, shown), overlay=overlay)]
    c = found.comparison
    if c is not None and len(c.steps):
        at = _thin(c.steps, events)
        cs = [int(s) for s in c.steps[at]]
        charts.append(Chart(f"relative error |t - g| / |g| (line: tolerance {found.params.tolerance:g})", "line",
                            cs, [float(v) for v in c.errors[at]], [str(s) for s in cs], "relative error",
                            xlabel="step", marks=_marks(found, set(cs)), hline=found.params.tolerance))
    scale = found.scale_series
    if scale is not None and len(scale):
        at = _thin(scale.steps, events)
        ss = [int(s) for s in scale.steps[at]]
        charts.append(Chart("loss scale by step", "line", ss, [float(v) for v in scale.values[at]],
                            [str(s) for s in ss], "loss scale", xlabel="step", marks=_marks(found, set(ss))))
    return Chain([panel, *charts], documents=[0])
