"""``next``/``n``, ``prev``/``p``, ``goto K``: step through the current finding list.

Each analysis registers how to show one of its findings in ``PANELS`` (kind -> builder), so the
cursor works the same for overflow and compare lists.
"""

from __future__ import annotations

from typing import Any, Callable

from precision_shell.commands.registry import arg, command
from precision_shell.commands.results import Sections, Table
from precision_shell.errors import CommandError, FormatError
from precision_shell.model.session import Session
from precision_shell.model.tensor_ref import golden_name_of, tensor_name

PANELS: dict[str, Callable[[Session, Any, str], Sections]] = {}


def golden_stats_rows(session: Session, op_name: str) -> Table | None:
    """Stats of the golden tensors an NPU op's outputs stand for (None when there are none)."""
    from precision_shell.analysis.compare.tensor import tensor_stats  # numpy: not at start-up
    from precision_shell.formats.golden_npy import load_npy

    graph = session.graph
    op = graph.ops.get(op_name) if graph is not None else None
    if op is None or session.golden.folder is None:
        return None
    rows = []
    for i, desc in enumerate(op.outputs):
        name = desc.origin_name or (op.golden_names()[0] if len(op.golden_names()) == 1 else None)
        if not name:
            continue
        idx = desc.origin_output_index if desc.origin_output_index is not None else i
        found = session.golden.find(name, idx)
        if found is None:
            rows.append([tensor_name(op_name, "output", i), golden_name_of(f"{name}:{idx}"), "-",
                         "(no golden file)", "", "", ""])
            continue
        try:
            s = tensor_stats(load_npy(found.path))
        except FormatError as exc:
            rows.append([tensor_name(op_name, "output", i), golden_name_of(f"{name}:{idx}"), "-",
                         f"error: {exc}", "", "", ""])
            continue
        rows.append([tensor_name(op_name, "output", i), golden_name_of(f"{name}:{idx}"), str(s.shape), f"{s.min:.4g}", f"{s.max:.4g}",
                     f"{s.mean:.4g}", f"{s.nan + s.pos_inf + s.neg_inf}"])
    if not rows:
        return None
    return Table(["tensor", "golden", "shape", "min", "max", "mean", "non-finite"], rows)


def _cursor(session: Session):
    cursor = session.results.get("cursor")
    if cursor is None:
        raise CommandError("no finding list yet: run `ac` (overflow) or `vcs` (compare) first")
    return cursor


def _show(session: Session, item: Any) -> Sections:
    cursor = _cursor(session)
    builder = PANELS.get(cursor.kind)
    if builder is None:
        raise CommandError(f"no panel for {cursor.kind} findings")
    return builder(session, item, f"{cursor.pos + 1}/{len(cursor.items)}")


@command("next", aliases=("n",), summary="Show the next item of the current finding list (full panel).",
         example="ac; next")
def next_(session: Session, args) -> Sections:
    return _show(session, _cursor(session).next())


@command("prev", aliases=("p",), summary="Show the previous item of the current finding list.",
         example="prev")
def prev(session: Session, args) -> Sections:
    return _show(session, _cursor(session).prev())


@command("goto", summary="Show item K of the current finding list: the `#` column of the last `vcs`/`ac`.",
         example="goto 3", args=[arg("k", type=int, help="position in the list (its # column), from 1")])
def goto(session: Session, args) -> Sections:
    return _show(session, _cursor(session).goto(args.k))
