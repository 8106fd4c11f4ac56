"""What Tab offers in a framework (msprobe) session, in the shapes the completer takes for graph
mode: entry names in dump order, each entry's tensors as tables print them (``ENTRY:0``,
``ENTRY:in1``, parameters by name) with dtype and shape, the golden side's tensors, and the
steps and ranks ``use`` can select.

The run models are built on first use (the REPL's warm-up thread does it at start-up), so a
first Tab on a 100k-entry dump does not wait for them.
"""

from __future__ import annotations

from typing import Any


def is_framework(session: Any) -> bool:
    return getattr(session, "kind", "graph") != "graph"


def target_run(session: Any) -> Any:
    """The selected run model (the completer's op source), or None when the session has none."""
    try:
        return session.run
    except Exception:   # a dump.json that cannot be modelled: no names, never a traceback at Tab
        return None


def golden_run(session: Any) -> Any:
    if getattr(session, "golden_rank", None) is None:
        return None
    try:
        return session.golden_run()
    except Exception:
        return None


def entry_names(run: Any) -> list[str]:
    return [op.name for op in run.ops]


def golden_tensor_names(run: Any) -> list[str]:
    """The golden run's tensors as ``pt`` takes them after ``golden:``."""
    return [t.printed(golden=True)[len("golden:"):] for op in run.ops for t in op.tensors]


def find_entry(run: Any, name: str) -> Any:
    """The entry of exactly that name, else None (``run.op`` also matches a part of a name)."""
    try:
        op = run.op(name)
    except Exception:
        return None
    return op if op.name == name else None


def entry_meta(op: Any, leaf_meta) -> str:
    """``forward bf16 [2,16,64]``: the entry's kind and its first output."""
    outputs = op.outputs
    parts = [op.kind, leaf_meta(outputs[0].leaf) if outputs else ""]
    if len(outputs) > 1:
        parts.append(f"+{len(outputs) - 1} out")
    return " ".join(p for p in parts if p)


def tensor_refs(op: Any, leaf_meta) -> list[tuple[str, str]]:
    return [(t.printed(), leaf_meta(t.leaf)) for t in op.tensors]


def api_type_values(session: Any) -> list[tuple[str, str]]:
    """``ls -t``: the API types of the selected run (``Functional.linear``), each with its count."""
    run = target_run(session)
    counts: dict[str, int] = {}
    for op in run.ops if run is not None else []:
        kind = f"{op.entry.prefix}.{op.entry.op}"
        counts[kind] = counts.get(kind, 0) + 1
    return [(t, f"{n} entr{'ies' if n != 1 else 'y'}") for t, n in counts.items()]


def step_values(session: Any) -> list[tuple[str, str]]:
    """``use --step``: the target's steps, each with its rank count."""
    counts: dict[str, int] = {}
    for rank in session.target.ranks:
        step = rank.location.step
        if step is not None:
            counts[str(step)] = counts.get(str(step), 0) + 1
    return [(s, f"{n} rank{'s' * (n != 1)}") for s, n in counts.items()]


def rank_values(session: Any) -> list[tuple[str, str]]:
    """``use --rank``: the target's rank folders, each with its entry count in the first step."""
    seen: dict[str, str] = {}
    for rank in session.target.ranks:
        if rank.location.rank:
            seen.setdefault(rank.location.rank, f"{len(rank.entries):,} entries")
    return list(seen.items())
