"""Which entries of a framework run fail the compare, and which started it (``vcs`` on msprobe
dumps), with :mod:`.root_cause`'s rule: an entry *fails* when one of its outputs fails
(:func:`.framework_compare.is_failing`: cosine at or below the threshold, or NaN/Inf); it is a
``root`` when every data input still passes and ``propagated`` when one fails. The first root
in dump (execution) order is the first divergence.

msprobe dumps every input, so an input is judged by its own compare; an input that could not be
compared (no golden row, no file) is judged through the dataflow graph instead: it fails when
the output that produced it fails. Forward entries only unless ``backward`` (then backward and
``parameters_grad`` entries too).

A failing ``parameters_grad`` entry gets its own role, ``param_grad``, never ``root``: msprobe
records a parameter's gradient as an entry with no inputs (framework-dumps.md A2, ``{param:
[leaf]}``), so "every input passes" would hold vacuously; the gradient is accumulated by the
backward of the module that owns the parameter, whose entries are judged themselves. It is
listed (a failing gradient is worth seeing), never the first divergence nor a keep-fp32 name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from ..model.framework_run import FrameworkRun, FrameworkTensor
from .framework_compare import RowResult, TensorMetrics, is_failing


@dataclass
class FrameworkSuspect:
    index: int                    # dump order
    op: str
    kind: str                     # forward | backward | parameters_grad
    role: str                     # root | propagated | param_grad (module docstring)
    failed_outputs: list[str]     # pshell tensor names
    failed_inputs: list[str]
    cosine: float | str           # the worst failing output's (msprobe's value or text)
    modules: list[str]            # enclosing modules, outermost first
    downstream: list[str] = field(default_factory=list)    # failing entries reached by dataflow
    first: bool = False

    def to_json(self) -> dict:
        return {"order": self.index, "op": self.op, "kind": self.kind, "role": self.role,
                "first": self.first, "cosine": self.cosine, "failed_outputs": self.failed_outputs,
                "failed_inputs": self.failed_inputs, "modules": self.modules,
                "downstream": self.downstream}


def find_framework_suspects(run: FrameworkRun, results: Iterable[RowResult], threshold: float,
                            backward: bool = False) -> list[FrameworkSuspect]:
    by_name = {r.name: r for r in results}
    kinds = ("forward", "backward", "parameters_grad") if backward else ("forward",)

    def compared(t: FrameworkTensor) -> TensorMetrics | None:
        r = by_name.get(t.compare_name)
        return r.metrics if r is not None and r.pair.golden is not None and t.leaf.file else None

    def fails(t: FrameworkTensor) -> bool:
        metrics = compared(t)
        if metrics is not None:
            return is_failing(metrics, threshold)
        edge = run.producer(t.name)
        return edge is not None and is_failing(compared(run.tensor(edge.src)), threshold)

    suspects: list[FrameworkSuspect] = []
    for op in run.ops:
        if op.kind not in kinds:
            continue
        failed_out = [t for t in op.outputs if fails(t)]
        if not failed_out:
            continue
        failed_in = [t.name for t in op.inputs if fails(t)]
        role = "param_grad" if op.kind == "parameters_grad" else "propagated" if failed_in else "root"
        suspects.append(FrameworkSuspect(
            op.index, op.name, op.kind, role,
            [t.name for t in failed_out], failed_in, _worst(failed_out, compared),
            run.module_path(op.name)))
    failing = {s.op for s in suspects}
    for s in suspects:
        s.downstream = [name for name in run.downstream(s.op) if name in failing]
    first = next((s for s in suspects if s.role == "root"), None)
    if first is not None:
        first.first = True
    return suspects


def _worst(tensors: list[FrameworkTensor], compared) -> float | str:
    values = [m.cosine for m in (compared(t) for t in tensors) if m is not None]
    numbers = [v for v in values if isinstance(v, float) and v == v]
    texts = [v for v in values if not isinstance(v, float)]
    if texts:
        return texts[0]       # Nan / N/A: worse than any number
    return min(numbers) if numbers else "N/A"
