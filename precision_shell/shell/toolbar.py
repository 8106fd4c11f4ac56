"""The bottom toolbar: workspace, active run/device/step, cosine threshold, finding cursor."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from precision_shell.safe_text import escape_controls


def describe_cursor(cursor: Any) -> str:
    """The position in the current finding list, whatever shape ``results["cursor"]`` has.

    Understood: a ``position_text`` attribute (``FindingCursor``), an object or dict with ``index`` (0-based) or ``position`` (1-based) plus
    ``total`` (and optionally ``kind``/``name``, e.g. "overflow"), a ``(index, total)`` pair,
    else its ``str()``.
    """
    if cursor is None:
        return ""
    text = getattr(cursor, "position_text", None)   # model.findings.FindingCursor
    if isinstance(text, str):
        return text
    get = cursor.get if isinstance(cursor, dict) else (lambda k: getattr(cursor, k, None))
    total = get("total")
    position = get("position")
    index = get("index")
    kind = get("kind") or get("name") or ""
    if isinstance(cursor, (tuple, list)) and len(cursor) == 2 and all(
            isinstance(v, int) for v in cursor):
        index, total = cursor
    if total is not None and (position is not None or index is not None):
        shown = position if position is not None else index + 1
        return f"{kind} {shown}/{total}".strip()
    return str(cursor)


def _short_path(path: Path | None, width: int = 40) -> str:
    if path is None:
        return "-"
    text = str(path)
    home = str(Path.home())
    if text.startswith(home + "/"):
        text = "~" + text[len(home):]
    return text if len(text) <= width else "…" + text[-(width - 1):]


def toolbar_items(session: Any) -> list[tuple[str, str]]:
    """(label, value) pairs shown left to right; duck-typed over the session."""
    items: list[tuple[str, str]] = []
    ws = getattr(session, "workspace", None)
    if ws is not None:
        items.append(("ws", _short_path(getattr(ws, "precision_data", None) or ws.root)))
    active = getattr(session, "active", None)
    selected = getattr(session, "selected", None)      # a framework session: the step and rank in use
    if getattr(session, "kind", "graph") != "graph" and selected is not None:   # msprobe, MindSpore graph
        loc = selected.location
        golden = "vs golden" if getattr(session, "golden_dump", None) is not None else "no golden"
        where = [getattr(session.target, "framework", None) or "msprobe",
                 f"step {loc.step}" if loc.step is not None else "", loc.rank, golden]
        items.append(("dump", " ".join(p for p in where if p)))
    elif active is not None:
        parts = [getattr(active, "run", "")]
        for label, attr in (("dev", "device"), ("step", "step")):
            value = getattr(active, attr, "")
            if value:
                parts.append(f"{label} {value}")
        items.append(("run", " ".join(p for p in parts if p)))
    else:
        items.append(("run", "no dumps"))
    settings = getattr(session, "settings", None)
    if settings is not None:
        items.append(("cos", f"{settings.threshold:g}"))
    results = getattr(session, "results", None) or {}
    cursor = results.get("cursor") if hasattr(results, "get") else None
    if cursor is not None:
        items.append(("finding", describe_cursor(cursor)))
    return [(label, escape_controls(value)) for label, value in items]   # paths, runs from data


# When the toolbar is too wide, items go in this order of importance (the rest are dropped): where
# you are in the finding list and which run is active matter most while stepping.
_IMPORTANCE = ("finding", "run", "dump", "cos", "ws")
_SEPARATOR = "  │ "


def _width(items: list[tuple[str, str]]) -> int:
    return sum(len(label) + 2 + len(value) for label, value in items) + len(_SEPARATOR) * (len(items) - 1)


def fit_items(items: list[tuple[str, str]], width: int | None) -> list[tuple[str, str]]:
    """All items in their order when they fit ``width``; else the most important first
    (finding cursor, run), dropping the least important until they fit."""
    if not width or _width(items) <= width:
        return items
    rank = {label: pos for pos, label in enumerate(_IMPORTANCE)}
    kept = sorted(items, key=lambda item: rank.get(item[0], len(rank)))
    while len(kept) > 1 and _width(kept) > width:
        kept.pop()
    return kept


def toolbar_fragments(session: Any, width: int | None = None) -> list[tuple[str, str]]:
    """Formatted text for prompt_toolkit's ``bottom_toolbar`` (fitted to ``width`` columns)."""
    fragments: list[tuple[str, str]] = []
    try:
        items = fit_items(toolbar_items(session), width)
    except Exception as exc:  # never let the toolbar take the prompt down
        return [("class:bottom-toolbar", f" toolbar: {type(exc).__name__}")]
    for pos, (label, value) in enumerate(items):
        if pos:
            fragments.append(("class:bottom-toolbar", _SEPARATOR))
        fragments.append(("class:bottom-toolbar.label", f" {label} "))
        fragments.append(("class:bottom-toolbar", value))
    return fragments


def toolbar_text(session: Any) -> str:
    """The toolbar as plain text (tests, logs)."""
    return "".join(text for _, text in toolbar_fragments(session))
