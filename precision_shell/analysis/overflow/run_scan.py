"""NaN/Inf in a run (``ac`` on msprobe dumps and pshell captures): which ops produce them, which
pass them on. Written against the run model (``model/runs``): tensors' ``has_data``, ``stats``
and ``load``, ops' inputs/outputs/kind and dataflow ``producer``.

Each tensor leaf is judged from its values when its file was dumped (task tensor), else from its
dumped statistics as msprobe's own check does: Max or Min NaN or +-Inf (task statistics). Norm
and Mean are not read: an fp16 Norm overflows on finite values (Max 8200 over 64 elements: the
sum of squares passes 65504), and NaN/Inf anywhere shows in Max or Min. An entry *overflows* when an
output does; it is a ``producer`` when every data input is finite and ``propagated`` when one
is not. An input that has neither file nor statistics is judged through the dataflow graph (the
output that produced it). A ``parameters_grad`` entry has no inputs: its gradients are
``propagated`` when an earlier entry overflowed (they come out of that backward), else
``producer``; so is a ``parameter`` entry (a MindSpore graph-mode dump writes each weight's
file at the end of the iteration, after the optimizer wrote into it). The first producer in dump (execution) order is where to look first.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from precision_shell.errors import PshellError
from precision_shell.model.runs.base import Run, Tensor
from precision_shell.model.progress import silent_progress
from precision_shell.analysis.compare.tensor import tensor_stats


@dataclass(frozen=True)
class LeafCheck:
    tensor: str          # pshell tensor name
    nan: int | None      # counts from values; None when judged from statistics
    pos_inf: int | None
    neg_inf: int | None
    bad: bool
    source: str          # values | statistics | dataflow | unknown

    def to_json(self) -> dict:
        return {"tensor": self.tensor, "nan": self.nan, "pos_inf": self.pos_inf,
                "neg_inf": self.neg_inf, "bad": self.bad, "source": self.source}


@dataclass
class FrameworkOverflow:
    index: int                    # dump order
    op: str
    kind: str
    role: str                     # producer | propagated
    outputs: list[LeafCheck]
    inputs: list[LeafCheck]
    modules: list[str]
    first: bool = False

    def to_json(self) -> dict:
        return {"order": self.index, "op": self.op, "kind": self.kind, "role": self.role,
                "first": self.first, "bad_outputs": [c.tensor for c in self.outputs if c.bad],
                "bad_inputs": [c.tensor for c in self.inputs if c.bad], "modules": self.modules,
                "outputs": [c.to_json() for c in self.outputs], "inputs": [c.to_json() for c in self.inputs]}


@dataclass
class FrameworkOverflowScan:
    findings: list[FrameworkOverflow]
    tensors: int                  # leaves judged
    from_values: int              # of which from their files
    problems: list[str] = field(default_factory=list)    # files that could not be read

    @property
    def first_producer(self) -> FrameworkOverflow | None:
        return next((f for f in self.findings if f.first), None)


def _from_stats(t: Tensor) -> bool | None:
    stats = t.stats
    return None if stats is None else stats.overflows()


def scan_framework_overflow(run: Run, progress=None) -> FrameworkOverflowScan:
    checks: dict[str, LeafCheck] = {}
    problems: list[str] = []
    from_values = 0

    def own(t: Tensor) -> LeafCheck:
        nonlocal from_values
        if t.name in checks:
            return checks[t.name]
        check = None
        if t.has_data:
            try:
                s = tensor_stats(run.load(t.name))
                check = LeafCheck(t.name, s.nan, s.pos_inf, s.neg_inf,
                                  bool(s.nan or s.pos_inf or s.neg_inf), "values")
                from_values += 1
            except PshellError as exc:
                problems.append(str(exc))
        if check is None:
            bad = _from_stats(t)
            check = LeafCheck(t.name, None, None, None, bool(bad), "unknown" if bad is None else "statistics")
        checks[t.name] = check
        return check

    def judged(t: Tensor) -> LeafCheck:
        check = own(t)
        if check.source != "unknown":
            return check
        edge = run.producer(t.name)
        if edge is None:
            return check
        return LeafCheck(t.name, None, None, None, own(run.tensor(edge.src)).bad, "dataflow")

    findings: list[FrameworkOverflow] = []
    with (progress or silent_progress)("scanning for nan/inf", len(run.ops)) as bar:
        for op in run.ops:
            outputs = [own(t) for t in op.outputs]
            bar.advance()
            if not any(c.bad for c in outputs):
                continue
            inputs = [judged(t) for t in op.inputs]
            if op.kind in ("parameters_grad", "parameter"):    # no inputs: from earlier entries
                role = "propagated" if findings else "producer"
            else:
                role = "propagated" if any(c.bad for c in inputs) else "producer"
            findings.append(FrameworkOverflow(op.order, op.name, op.kind, role, outputs, inputs,
                                              run.module_path(op.name)))
    first = next((f for f in findings if f.role == "producer"), None)
    if first is not None:
        first.first = True
    return FrameworkOverflowScan(findings, len(checks), from_values, problems)

