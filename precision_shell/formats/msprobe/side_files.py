"""The side files of an msprobe rank folder: ``stack.json`` (call stacks by entry name) and
``construct.json`` (module parents), each optional; a bad one adds a warning line and reads as
empty. Moved out of :mod:`.dump` unchanged."""

from __future__ import annotations

import os

from ...errors import FormatError
from .json_files import load_json

def _read_optional_json(path: str, warnings: list[str]):
    if not os.path.exists(path):
        return None
    try:
        doc = load_json(path)
    except FormatError as e:
        warnings.append(str(e))
        return None
    if not isinstance(doc, dict):
        warnings.append(f"{path}: not a JSON object, ignored")
        return None
    return doc


def read_stack(path: str, warnings: list[str]) -> dict[str, tuple[str, ...]]:
    """Both formats (A3): grouped ``{"0": [[names], [frames]], ...}`` and ``{name: [frames]}``."""
    doc = _read_optional_json(path, warnings)
    stack: dict[str, tuple[str, ...]] = {}
    if not doc:
        return stack
    grouped = "0" in doc
    for key, value in doc.items():
        if grouped and isinstance(value, list) and len(value) == 2 and all(isinstance(v, list) for v in value):
            names, frames = value
        elif not grouped and isinstance(value, list):
            names, frames = [key], value
        else:
            warnings.append(f"{path}: {key}: unexpected {type(value).__name__}, ignored")
            continue
        frames = tuple(str(f) for f in frames)
        for name in names:
            if isinstance(name, str):
                stack[name] = frames
    return stack


def read_construct(path: str, warnings: list[str]) -> dict[str, str | None]:
    """``{node: parent}``; "" and null mean no parent; Megatron's ``[parent, micro_step]`` pairs
    keep the parent."""
    doc = _read_optional_json(path, warnings)
    construct: dict[str, str | None] = {}
    for node, parent in (doc or {}).items():
        if isinstance(parent, list) and parent:
            parent = parent[0]
        if parent is not None and not isinstance(parent, str):
            warnings.append(f"{path}: {node}: parent {parent!r:.60} is not a name, ignored")
            parent = None
        construct[node] = parent or None
    return construct

