"""One JSON schema for ``vcs`` rows on every kind of dump (product.md §15).

Graph-mode rows (:meth:`.root_cause.Suspect.to_json`) and framework rows (:func:`framework_row`)
carry the same keys: what both kinds know under one name (``order``, ``op``, ``type``, ``tensor``
-- the worst failing output --, ``role``, ``first``, ``failed_outputs``, ``failed_inputs``,
``cosine`` and the other metrics as numbers or null), and what only one kind has as null or
empty on the other (``fused``/``passes`` on GE, ``modules``/``statistic`` on msprobe).
"""

from __future__ import annotations

import math

from precision_shell.analysis.compare.metrics import JSON_KEYS, STD_KEYS

# keys only some kinds fill: their value on the others
SHARED_DEFAULTS = {"kind": None, "modules": [], "downstream": None, "statistic": None, "stat_error": None}


def _number(value) -> float | None:
    return value if isinstance(value, float) and math.isfinite(value) else None


_NO_METRICS: dict = {key: None for key in JSON_KEYS.values()}
_NO_METRICS.update(standard_deviation=None, count=None)
_NO_STD = {name: None for name in STD_KEYS}


def _metrics(metrics) -> dict:
    """msprobe's tensor metrics under the graph-mode keys (null where msprobe has none)."""
    out = _NO_METRICS.copy()        # a statistics vcs makes ~100k rows: copies, not comprehensions
    out["standard_deviation"] = _NO_STD.copy()
    if metrics is not None:
        out.update(cosine=_number(metrics.cosine), max_abs_error=_number(metrics.max_abs_err),
                   max_relative_error=_number(metrics.max_relative_err),
                   one_thousandth_err_ratio=_number(metrics.one_thousandth),
                   five_thousandths_err_ratio=_number(metrics.five_thousandths))
    return out


def framework_row(s) -> dict:
    """A :class:`.framework_root_cause.FrameworkSuspect` as a ``vcs`` JSON row."""
    row = {"order": s.index, "op": s.op, "type": s.type, "tensor": s.tensor or None,
           "golden": [], "golden_tensor": None}
    row.update(_metrics(s.metrics))
    if s.metrics is None and isinstance(s.cosine, float):
        row["cosine"] = _number(s.cosine)
    row.update({"role": s.role, "first": s.first, "failed_outputs": s.failed_outputs,
                "failed_inputs": s.failed_inputs, "inputs": [], "outputs": [], "fused": False, "passes": [],
                "pass_kinds": {}, "suggestion": None, "kind": s.kind, "modules": s.modules,
                "downstream": s.downstream, "statistic": s.statistic or None,
                "stat_error": _number(s.stat_error)})
    return row


def framework_flat_row(s) -> dict:
    """:func:`framework_row` with every value a scalar (a CSV cell each), tensors by the names
    tables print (``ENTRY:0``), lists joined by commas -- as graph mode's ``to_flat_json``."""
    from precision_shell.model.tensor_ref import name_of

    row = framework_row(s)
    row["tensor"] = name_of(row["tensor"]) if row["tensor"] else None
    for key in ("failed_outputs", "failed_inputs"):
        row[key] = [name_of(t) for t in row[key]]
    for key in ("golden", "failed_outputs", "failed_inputs", "passes", "modules", "downstream", "inputs", "outputs"):
        row[key] = ",".join(row[key])
    row["pass_kinds"] = ""
    row.update(row.pop("standard_deviation"))
    return row


def with_shared(row: dict, kind: str) -> dict:
    """A graph-mode row completed with the keys only other kinds fill."""
    for key, value in SHARED_DEFAULTS.items():
        row.setdefault(key, list(value) if isinstance(value, list) else value)
    row["kind"] = row["kind"] or kind
    return row
