"""One ``curve`` analysis: the target (and golden) log read, the rules applied (rules.py), every
finding also an event, and the link to the dumped steps. JSON keys as product.md §13."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from precision_shell.analysis.curve import rules
from precision_shell.analysis.curve.select import pick_loss_scale, pick_metric
from precision_shell.formats.logs.series import LogRead, Series, printable

EVENT_ORDER = {"skipped": 0, "scale_drop": 1, "nonfinite": 2, "divergence": 3, "spike": 4}


@dataclass
class CurveParams:
    metric: str = "loss"
    tolerance: float = 0.02
    window: int = 10
    spike: float = 0.5
    step_offset: int = 0


@dataclass
class CurveFindings:
    params: CurveParams
    target_path: str
    golden_path: str | None
    metric: str                      # the series' own name in the target log
    target: Series
    golden: Series | None
    comparison: rules.Comparison | None
    first_nonfinite_step: int | None
    spikes: list[tuple[int, float, float]]
    loss_scale: rules.LossScale | None
    scale_series: Series | None
    events: list[rules.CurveEvent]
    suggested_step: int | None
    dump_steps: list[int] = field(default_factory=list)
    suggested_dump_step: int | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> str | None:
        return self.comparison.verdict if self.comparison else None

    @property
    def first_divergent_step(self) -> int | None:
        return self.comparison.first_divergent_step if self.comparison else None

    @property
    def steps(self) -> int:
        """Steps judged: those common to both runs, or the target's without golden."""
        return len(self.comparison.steps) if self.comparison else len(self.target)

    def fails(self) -> bool:
        """The CI gate (--fail-on-findings): a fail verdict or a non-finite target step."""
        return self.verdict == "fail" or self.first_nonfinite_step is not None

    def to_json(self) -> dict:
        c = self.comparison
        return {
            "metric": self.metric, "target": self.target_path, "golden": self.golden_path,
            "steps": self.steps, "tolerance": self.params.tolerance, "window": self.params.window,
            "mean_relative_error": c.mean_relative_error if c else None, "verdict": self.verdict,
            "first_divergent_step": self.first_divergent_step,
            "first_nonfinite_step": self.first_nonfinite_step,
            "spikes": [s for s, _, _ in self.spikes],
            "loss_scale": self.loss_scale.to_json() if self.loss_scale else None,
            "dump_steps": self.dump_steps, "suggested_step": self.suggested_step,
            "suggested_dump_step": self.suggested_dump_step,
            "events": [e.to_json() for e in self.events],
        }


def _names(read: LogRead) -> str:
    names = [printable(n) for n in read.metrics]
    return ", ".join(names[:8]) + (" ..." if len(names) > 8 else "") if names else "none"


def pick(read: LogRead, metric: str) -> str | None:
    return pick_metric(list(read.metrics), metric)


def analyse(target: LogRead, golden: LogRead | None, params: CurveParams) -> CurveFindings:
    """All findings of §13; ``target`` must hold the metric (the command checks)."""
    warnings: list[str] = []
    name = pick(target, params.metric)
    t = target.metrics[name]
    g = None
    if golden is not None:
        g_name = pick(golden, params.metric)
        if g_name is None:
            warnings.append(f"{golden.path}: no series matching {printable(params.metric)!r} (it has: "
                            f"{_names(golden)}): single-run findings only")
        else:
            g = golden.metrics[g_name]
    comparison = None
    if g is not None:
        comparison = rules.compare(t.steps, t.values, g.steps, g.values, params.tolerance, params.window)
        missing = len(t) - len(comparison.steps)
        if missing:
            warnings.append(f"{golden.path}: {missing} of the target's {len(t)} steps have no golden "
                            f"value: judged on the {len(comparison.steps)} common steps")
        if comparison.golden_nonfinite:
            warnings.append(f"{golden.path}: {comparison.golden_nonfinite} golden values are NaN/Inf: "
                            "those steps are not judged")
        if not len(comparison.steps):
            warnings.append(f"{golden.path}: no step in common with the target: nothing compared")
        nonfinite = comparison.first_nonfinite_step
    else:
        nonfinite = rules.first_nonfinite(t.steps, t.values)
    spikes = rules.spikes(t.steps, t.values, params.spike, params.window)
    scale_name = pick_loss_scale(list(target.metrics))
    scale_series = target.metrics[scale_name] if scale_name else None
    scale = rules.loss_scale(scale_series.steps if scale_series else None,
                             scale_series.values if scale_series else None, target.drops, target.skipped)
    events = _events(comparison, nonfinite, spikes, scale, params, t)
    suggested = rules.suggested_step(scale, nonfinite, comparison.first_divergent_step if comparison else None)
    return CurveFindings(params, target.path, golden.path if golden else None, name, t, g, comparison,
                         nonfinite, spikes, scale, scale_series, events, suggested,
                         warnings=target.warnings + (golden.warnings if golden else []) + warnings)


def _value_at(series: Series, step: int) -> float:
    k = int(np.searchsorted(series.steps, step))
    return float(series.values[k]) if k < len(series) and series.steps[k] == step else float("nan")


def _events(c, nonfinite, spikes, scale, params: CurveParams, t: Series) -> list[rules.CurveEvent]:
    out = []
    if scale is not None:
        out += [rules.CurveEvent(s, "skipped", "step skipped (overflow)") for s in scale.skipped_steps]
        out += [rules.CurveEvent(d.step, "scale_drop", f"loss scale {d.before:g} -> {d.after:g}")
                for d in scale.drops]
    if nonfinite is not None:
        out.append(rules.CurveEvent(nonfinite, "nonfinite", f"target {_value_at(t, nonfinite)}"
                                    + (", golden finite" if c is not None else "")))
    if c is not None and c.first_divergent_step is not None:
        s = c.first_divergent_step
        k = int(np.searchsorted(c.steps, s))
        out.append(rules.CurveEvent(s, "divergence", f"target {c.target[k]:.6g} vs golden {c.golden[k]:.6g}: "
                                    f"mean relative error of the {params.window} steps to here exceeds "
                                    f"{params.tolerance:g}"))
    out += [rules.CurveEvent(s, "spike", f"{v:.6g} > {1 + params.spike:g} x median {m:.6g} of the "
                             f"previous {params.window}") for s, v, m in spikes]
    out.sort(key=lambda e: (e.step, EVENT_ORDER[e.kind]))
    return out


def link_dumps(found: CurveFindings, dump_steps: list[int]) -> str | None:
    """Fill ``dump_steps`` and ``suggested_dump_step``; the line saying which step to dump when
    the suggested one was not dumped (None otherwise)."""
    found.dump_steps = sorted(dump_steps)
    if found.suggested_step is None:
        return None
    wanted = found.suggested_step + found.params.step_offset
    if wanted in found.dump_steps:
        found.suggested_dump_step = wanted
        return None
    offset = f" (log step {found.suggested_step} + offset {found.params.step_offset})" if found.params.step_offset else ""
    have = ", ".join(map(str, found.dump_steps[:10])) or "none"
    return f"dump step {wanted}{offset} to look inside: it is not dumped (dumped steps: {have})"
