"""Which ops fail the compare, and which of them started it (``vcs``; product.md §5).

An op *fails* when one of its outputs fails: cosine at or below the threshold, cosine NaN (the
vendor's "cannot compare" included: e.g. an all-zero NPU output against a non-zero golden), a
non-finite max absolute error (NaN/Inf on one side only; this also catches single-element
tensors, whose cosine the vendor forces to 1), or a user ``--metric`` condition. Tensors that
could not be compared at all (no golden file, shape mismatch) never fail: there is nothing to
judge. Neither do bit-identical tensors of two NPU runs (``--against``), even when both hold
the same NaN/Inf and the vendor's cosine is therefore NaN.

The op is a ``root`` when every data input still passes (its dumped input compared with the
golden output of the producer) while an output fails: the error was born inside this op. It is
``propagated`` when an input already fails. The first root in execution order is the first
divergence. A fused root names the fusion passes that made it (fusion blame).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Iterable

from precision_shell.analysis.compare.engine import CompareResult, TensorResult
from precision_shell.analysis.compare.metrics import JSON_KEYS
from precision_shell.errors import UsageError
from precision_shell.model.tensor_ref import golden_json_name, golden_name_of, name_of

FUSION_SWITCH_HINT = "export suspects --format fusion-switch"
_CONDITION = re.compile(r"^\s*([A-Za-z_ ]+?)\s*(<=|>=|<|>|==|!=)\s*([-+0-9.eEinfINFaA]+)\s*$")
_OPS = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
        ">=": lambda a, b: a >= b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b}
# Metric names a condition may use: the JSON keys, the vendor column names, short aliases.
_METRIC_NAMES = {key: key for key in JSON_KEYS.values() if key != "standard_deviation"}
_METRIC_NAMES.update({col.lower(): key for col, key in JSON_KEYS.items() if key != "standard_deviation"})
_METRIC_NAMES.update({"cos": "cosine", "max_abs": "max_abs_error", "kl": "kl_divergence",
                      "mae": "mean_abs_error", "red": "relative_euclidean_distance",
                      "max_rel": "max_relative_error", "mean_rel": "mean_relative_error",
                      "mean_npu": "mean_npu", "std_npu": "std_npu"})


@dataclass(frozen=True)
class Condition:
    """``NAME<VALUE`` from ``--metric``: a tensor fails when the comparison holds."""

    key: str
    op: str
    value: float
    text: str

    def holds(self, tensor: TensorResult) -> bool:
        value = getattr(tensor.metrics, self.key)
        return value == value and _OPS[self.op](value, self.value)


def metric_key(name: str) -> str | None:
    """The metric a name means (JSON key, vendor column name or short alias), or None."""
    name = name.strip().lower().replace(" ", "_")
    return _METRIC_NAMES.get(name) or _METRIC_NAMES.get(name.replace("_", ""))


def metric_names() -> list[str]:
    """The metric JSON keys, for completion and messages."""
    return sorted(k for k in JSON_KEYS.values() if k != "standard_deviation")


def parse_condition(text: str) -> Condition:
    m = _CONDITION.match(text)
    if not m:
        raise UsageError(f"--metric {text!r}: write NAME<VALUE, e.g. max_abs_error>0.1 or "
                         f"'mean_relative_error>=0.01'")
    key = metric_key(m.group(1))
    if key is None:
        names = ", ".join(metric_names())
        raise UsageError(f"--metric {text!r}: unknown metric {m.group(1)!r} (use one of {names})")
    try:
        value = float(m.group(3))
    except ValueError:
        raise UsageError(f"--metric {text!r}: {m.group(3)!r} is not a number") from None
    return Condition(key, m.group(2), value, text.strip())


@dataclass(frozen=True)
class Criteria:
    threshold: float
    conditions: tuple[Condition, ...] = ()

    def fails(self, tensor: TensorResult) -> bool:
        if not tensor.compared or tensor.identical:
            return False
        m = tensor.metrics
        if m.cosine != m.cosine or m.cosine <= self.threshold:
            return True
        if not math.isfinite(m.max_abs_error) and "max_abs_error" not in m.not_computed:
            return True
        return any(c.holds(tensor) for c in self.conditions)


@dataclass
class Suspect:
    """One failing op of the ``vcs`` list."""

    order: int                      # execution position (the compare's Index)
    op: str
    type: str
    role: str                       # "root" | "propagated"
    worst: TensorResult             # the failing output shown in the list
    outputs: list[TensorResult]
    inputs: list[TensorResult]
    failed_outputs: list[str]
    failed_inputs: list[str]
    golden_ops: list[str]
    passes: list[str] = field(default_factory=list)
    pass_kinds: dict[str, str] = field(default_factory=dict)   # pass -> "graph" | "ub" | "unknown"
    fused: bool = False
    first: bool = False

    @property
    def fusion_blame(self) -> str | None:
        if self.role != "root" or not self.fused or not self.passes:
            return None
        return (f"fused by {', '.join(self.passes)}; to confirm, rerun with these passes off: "
                f"`{FUSION_SWITCH_HINT}`")

    def to_json(self) -> dict:
        metrics = self.worst.metrics.as_json()
        row = {"order": self.order, "op": self.op, "type": self.type, "tensor": self.worst.tensor,
               "golden": self.golden_ops, "golden_tensor": golden_json_name(self.worst.golden_ref)}
        row.update(metrics)
        row.update({
            "role": self.role, "first": self.first,
            "failed_outputs": self.failed_outputs, "failed_inputs": self.failed_inputs,
            "inputs": [_tensor_json(t) for t in self.inputs],
            "outputs": [_tensor_json(t) for t in self.outputs],
            "fused": self.fused, "passes": self.passes,
            "pass_kinds": self.pass_kinds,
            "suggestion": FUSION_SWITCH_HINT if self.fusion_blame else None,
        })
        from precision_shell.analysis.root_cause.schema import with_shared

        return with_shared(row, "kernel")


    def to_flat_json(self) -> dict:
        """``to_json`` with every value a scalar (one CSV cell each) and tensors by the names
        tables print (``OP:0``, ``OP:in1``, ``golden:OP:0``): a spreadsheet is read by people, who
        paste its names into ``pt``."""
        row = self.to_json()
        row["tensor"] = name_of(row["tensor"])
        row["golden_tensor"] = golden_name_of(row["golden_tensor"]) if row["golden_tensor"] else None
        for key in ("inputs", "outputs"):
            row[key] = "; ".join(f"{name_of(t['tensor'])} {'-' if t['cosine'] is None else round(t['cosine'], 6)}"
                                 for t in row[key])
        for key in ("failed_outputs", "failed_inputs"):
            row[key] = [name_of(t) for t in row[key]]
        for key in ("golden", "failed_outputs", "failed_inputs", "passes", "modules"):
            row[key] = ",".join(row[key])
        row["pass_kinds"] = ",".join(f"{p}:{k}" for p, k in row["pass_kinds"].items())
        row.update(row.pop("standard_deviation"))
        return row


@dataclass
class SuspectList:
    """What the last ``vcs`` found (``session.results["vcs"]``: ``export suspects``, ``ni``)."""

    suspects: list[Suspect]
    criteria: Criteria
    source: str                     # "compare" | "partial compare" | "vendor CSV"


def _tensor_json(t: TensorResult) -> dict:
    return {"tensor": t.tensor, "golden": t.golden_ref,
            "cosine": t.metrics.cosine if t.compared and t.metrics.cosine == t.metrics.cosine else None,
            "max_abs_error": t.metrics.max_abs_error if t.compared else None,
            "compared": t.compared, "reason": t.reason or None}


def _worst(outputs: list[TensorResult], failed: set[str]) -> TensorResult:
    """The failing output with the lowest cosine (NaN counts as lowest)."""
    candidates = [t for t in outputs if t.tensor in failed] or outputs
    return min(candidates, key=lambda t: (-math.inf if t.metrics.cosine != t.metrics.cosine
                                          else t.metrics.cosine, t.index))


def pass_kind_map(fusion_stats: Iterable) -> dict[str, str]:
    """pass name -> "graph" | "ub", from fusion_result.json (session.fusion)."""
    kinds: dict[str, str] = {}
    for graph in fusion_stats or ():
        for p in getattr(graph, "passes", ()):
            kinds.setdefault(p.name, p.kind)
    return kinds


def guess_pass_kind(name: str, known: dict[str, str]) -> str:
    if name in known:
        return known[name]
    # FE's UB-fusion passes are named Tbe*FusionPass; graph-fusion passes are not
    return "ub" if name.startswith("Tbe") else "unknown"


def _candidate_ops(result: CompareResult, criteria: Criteria) -> list:
    """The ops that may fail: all of them, or, for a result kept in arrays, only those with an
    output that a vectorised superset of ``Criteria.fails`` flags (200k rows would otherwise
    each become an object just to be looked at)."""
    store = result.store
    if store is None or criteria.conditions:
        return result.ops
    from precision_shell.analysis.compare.results import candidate_rows

    rows = candidate_rows(store, criteria.threshold)
    op_pos = store.plan.table.op_pos
    positions = sorted({op_pos[r] for r in rows.tolist()})
    return [store.plan.ops[i] for i in positions]


def find_suspects(result: CompareResult, criteria: Criteria, fusion_stats: Iterable = ()) -> list[Suspect]:
    """Failing ops in execution order, each ``root`` or ``propagated``; the first root is
    marked ``first``."""
    known = pass_kind_map(fusion_stats)
    suspects: list[Suspect] = []
    for plan in sorted(_candidate_ops(result, criteria), key=lambda p: p.order):
        rows = result.rows_of(plan)
        outputs = [t for t in rows if t.io == "output"]
        inputs = [t for t in rows if t.io == "input"]
        failed_out = [t.tensor for t in outputs if criteria.fails(t)]
        if not failed_out:
            continue
        failed_in = [t.tensor for t in inputs if criteria.fails(t)]
        suspects.append(Suspect(
            order=plan.order, op=plan.op, type=plan.type,
            role="propagated" if failed_in else "root",
            worst=_worst(outputs, set(failed_out)), outputs=outputs, inputs=inputs,
            failed_outputs=failed_out, failed_inputs=failed_in, golden_ops=list(plan.golden_ops),
            passes=list(plan.passes), pass_kinds={p: guess_pass_kind(p, known) for p in plan.passes},
            fused=plan.fused))
    first = next((s for s in suspects if s.role == "root"), None)
    if first is not None:
        first.first = True
    return suspects


# ------------------------------------------------------------------------------------------------
# what to do about the roots: the two actionable exports

def fusion_switch_config(suspects: list[Suspect]) -> tuple[dict, list[str]]:
    """A fusion switch config (the ``--fusion_switch_file`` / ``fusion_switch.cfg`` JSON) turning
    off every pass behind a fused root op, and the passes it could not classify (kept under
    GraphFusion: a pass FE does not know in a section is ignored, not an error)."""
    graph: dict[str, str] = {}
    ub: dict[str, str] = {}
    unknown: list[str] = []
    for s in suspects:
        if s.role != "root" or not s.fused:
            continue
        for p in s.passes:
            kind = s.pass_kinds.get(p, "unknown")
            (ub if kind == "ub" else graph)[p] = "off"
            if kind == "unknown" and p not in unknown:
                unknown.append(p)
    return {"Switch": {"GraphFusion": graph, "UBFusion": ub}}, unknown


def keep_fp32_names(suspects: list[Suspect]) -> list[str]:
    """Framework op names of the root ops (what a mixed-precision keep-list takes), in order."""
    names: list[str] = []
    for s in suspects:
        if s.role != "root":
            continue
        for name in s.golden_ops or [s.op]:
            if name not in names:
                names.append(name)
    return names
