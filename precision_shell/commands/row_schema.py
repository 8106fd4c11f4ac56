"""One JSON row schema per list command, whatever kind of dump the session has (product.md §15):
scripts read the same keys from a graph-mode and a framework session. A key one kind has no
value for is null there (``passes`` of an msprobe entry, ``modules`` of a GE op); keys keep the
order given here. ``vcs`` rows are schema'd in ``analysis/suspect_schema``; multi-set summary
rows (``vcs --ranks``) are one class for both kinds (``multi_set.RankLine``)."""

from __future__ import annotations

SCHEMAS: dict[str, tuple[str, ...]] = {
    # ls without a filter: a histogram of op types (entries = ops: a framework dump's word for them)
    "op_types": ("type", "ops", "entries", "fused"),
    # ls with a filter: the matching ops
    "ops": ("order", "op", "type", "kind", "passes", "original_ops", "modules"),
    # li / lo: one row per edge to a producer / consumer
    "edges": ("depth", "op", "type", "edge", "output", "input", "parent", "repeated", "tensor", "other_tensor"),
    # ac (and ac --ranks/--steps): one row per overflowing op
    "overflow": ("order", "rank", "step", "op", "type", "kind", "source", "status", "role", "first", "timestamp",
                 "outputs", "inputs", "bad_outputs", "bad_inputs", "modules", "dump", "records"),
}


def conform(rows: list[dict], schema: str) -> list[dict]:
    """``rows`` with every key of ``schema`` (missing ones null), in its order; a key outside the
    schema is a programming error (the schema test would miss it on the other kind)."""
    keys = SCHEMAS[schema]
    known = set(keys)
    out = []
    for row in rows:
        extra = set(row) - known
        if extra:
            raise KeyError(f"{schema} row keys outside the schema: {sorted(extra)}")
        out.append({k: row.get(k) for k in keys})
    return out
