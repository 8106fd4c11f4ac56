"""Read ``fusion_result.json``: per-graph counts of graph-fusion and UB-fusion passes (formats.md §4).

The file comes in four shapes, all handled by one ``json.JSONDecoder.raw_decode`` loop:

1. one object ``{"graph_fusion": {...}, "session_and_graph_id": "0_0", "ub_fusion": {...}}``;
2. several such objects back to back with no separator (FE appends one per session/graph);
3. a JSON array of such objects;
4. one object keyed ``"session_and_graph_id_{session}_{graph}"`` whose values hold the passes.

Older files name the id ``graphId``. Pass entries are ``{"match_times": "3", "effect_times": "1"}``
(counts are JSON strings; numbers are accepted too) plus ``repository_hit_times`` for UB passes in
newer CANN. Passes switched off with a fusion switch file are simply absent.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from ..errors import FormatError
from .input_files import read_regular
from .quoting import JSON_LONG_NUMBER, JSON_TOO_DEEP, shown

__all__ = ["FusionGraphStats", "FusionPass", "read_fusion_result"]

_KINDS = (("graph_fusion", "graph"), ("ub_fusion", "ub"))
_ID_KEYS = ("session_and_graph_id", "graphId")
_ID_PREFIX = "session_and_graph_id_"
_MAX_COUNT = 2**63 - 1  # FE writes int64 counters
_MAX_ARRAY_NESTING = 16  # shape 3 nests arrays one level; more is not a fusion report


@dataclass
class FusionPass:
    name: str
    kind: str  # "graph" | "ub"
    match_times: int
    effect_times: int
    repository_hit_times: int | None = None


@dataclass
class FusionGraphStats:
    graph_id: str  # "0_0" (session_graph); "" when the file gives none
    passes: list[FusionPass] = field(default_factory=list)


class _Bad(Exception):
    pass


def _count(value, where: str, optional: bool = False) -> int | None:
    if value is None:
        if optional:
            return None
        raise _Bad(f"{where} is missing")
    if isinstance(value, bool):
        raise _Bad(f"{where} is not a count: {shown(value)}")
    try:
        number = int(value) if isinstance(value, (int, str)) else None
    except ValueError:  # not digits, or more digits than Python converts
        number = None
    if number is None or not 0 <= number <= _MAX_COUNT:
        raise _Bad(f"{where} is not a count: {shown(value)}")
    return number


def _stats(obj: dict, graph_id: str) -> FusionGraphStats:
    stats = FusionGraphStats(graph_id=graph_id)
    for key, kind in _KINDS:
        passes = obj.get(key)
        if passes is None:
            continue
        if not isinstance(passes, dict):
            raise _Bad(f"graph {shown(graph_id or '?')}: {key} is not an object")
        for name, counts in passes.items():
            where = f"graph {shown(graph_id or '?')} {key} {shown(name)}"
            if not isinstance(counts, dict):
                raise _Bad(f"{where}: expected an object with match_times/effect_times")
            stats.passes.append(FusionPass(
                name=name, kind=kind, match_times=_count(counts.get("match_times"), f"{where} match_times"),
                effect_times=_count(counts.get("effect_times"), f"{where} effect_times"),
                repository_hit_times=_count(counts.get("repository_hit_times"),
                                            f"{where} repository_hit_times", optional=True)))
    return stats


def _graph_id(obj: dict, fallback: str = "") -> str:
    for key in _ID_KEYS:
        if key in obj and obj[key] is not None:
            return str(obj[key])
    return fallback


def _collect(value, out: list[FusionGraphStats], depth: int = 0) -> None:
    if isinstance(value, list):  # shape 3 (and lists nested in it)
        if depth >= _MAX_ARRAY_NESTING:
            raise _Bad(f"arrays nested more than {_MAX_ARRAY_NESTING} deep")
        for item in value:
            _collect(item, out, depth + 1)
        return
    if not isinstance(value, dict):
        raise _Bad(f"expected a JSON object or array, got {type(value).__name__}")
    if any(key in value for key, _ in _KINDS):  # shapes 1 and 2
        out.append(_stats(value, _graph_id(value)))
        return
    for key, inner in value.items():  # shape 4: {"session_and_graph_id_0_0": {...}}
        if isinstance(inner, dict) and any(k in inner for k, _ in _KINDS):
            fallback = key[len(_ID_PREFIX):] if key.startswith(_ID_PREFIX) else key
            out.append(_stats(inner, _graph_id(inner, fallback)))
        elif key not in _ID_KEYS:
            raise _Bad(f"unexpected key {shown(key)}: no graph_fusion/ub_fusion below it")


def read_fusion_result(path: str | os.PathLike) -> list[FusionGraphStats]:
    """All graphs' pass statistics in file order; FormatError for anything unreadable."""
    try:
        text = read_regular(path).decode("utf-8-sig")
    except OSError as exc:
        raise FormatError(path, f"cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise FormatError(path, f"not UTF-8 text (byte {exc.start})") from None
    if not text.strip():
        raise FormatError(path, "empty file")
    decoder, pos, out = json.JSONDecoder(), 0, []
    while True:
        while pos < len(text) and text[pos] in " \t\r\n":
            pos += 1
        if pos >= len(text):
            return out
        try:
            value, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise FormatError(path, f"not JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
        except RecursionError:  # the C decoder recurses per level: a bound, not a crash
            raise FormatError(path, JSON_TOO_DEEP) from None
        except ValueError:  # json's int(): a number of more than 4300 digits
            raise FormatError(path, JSON_LONG_NUMBER) from None
        try:
            _collect(value, out)
        except _Bad as exc:
            raise FormatError(path, str(exc)) from None
