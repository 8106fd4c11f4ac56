"""What a tool answers: the command's JSON document, its evidence, and the size cap.

The document is the one ``--format json`` prints (product.md §6 keys). Evidence is gathered from
it, so every command gets it without knowing about agents: the files it names (read, or written
into the output folder: CSVs, DOT/SVG, exports, reproducers) and the tensor names it judged.
The cap keeps an answer within what an agent can read: long lists are cut to their first items
and long strings shortened, each cut said in ``notes``; never a whole array.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from precision_shell.jsonable import jsonable

# keys whose string values name files (kept only when the file exists)
_FILE_KEYS = frozenset({"file", "files", "dump", "csv", "source", "path", "dot", "svg", "exported",
                        "opdebug_file", "report", "html", "journal", "config", "golden_file", "npy",
                        "reproducer", "script", "output_dir", "target", "golden"})
# keys naming inputs that may be folders (curve's logs, a framework dump): kept when they exist
_INPUT_KEYS = frozenset({"target", "golden"})
# keys naming what a command wrote (also: anything under the session's output folder)
_WRITTEN_KEYS = frozenset({"csv", "dot", "svg", "exported", "report", "html", "journal", "config",
                           "reproducer", "script"})
_TENSOR_KEYS = frozenset({"tensor", "golden_tensor", "upstream_input", "failed_outputs", "failed_inputs"})

DEFAULT_MAX_ITEMS = 50
DEFAULT_MAX_CHARS = 60_000
_MAX_STRING = 4_000


@dataclass(frozen=True)
class AnswerLimits:
    """The size cap (``pshell mcp --max-items N --max-chars N``)."""

    max_items: int = DEFAULT_MAX_ITEMS
    max_chars: int = DEFAULT_MAX_CHARS


def _strings_under(value: Any, keys: frozenset[str], found: list[tuple[str, str]], key: str = "") -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _strings_under(v, keys, found, k)
    elif isinstance(value, list):
        for v in value:
            _strings_under(v, keys, found, key)
    elif isinstance(value, str) and key in keys and value:
        found.append((key, value))


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def evidence(document: Any, output_dir: Path | None, written_keys: frozenset[str] = frozenset()) -> dict:
    """Files the document names (absolute, existing), split into read and written, and tensors."""
    found: list[tuple[str, str]] = []
    _strings_under(document, _FILE_KEYS, found)
    out_root = output_dir.resolve() if output_dir is not None else None
    read, written = [], []
    for key, text in found:
        try:
            path = Path(text).expanduser()
            if not path.exists():
                continue
            path = path.resolve()
        except (OSError, ValueError):
            continue
        in_output = out_root is not None and (path == out_root or out_root in path.parents)
        if key in _WRITTEN_KEYS or key in written_keys or in_output:
            written.append(str(path))
        elif path.is_file() or key in _INPUT_KEYS:
            read.append(str(path))
    tensors: list[tuple[str, str]] = []
    _strings_under(document, _TENSOR_KEYS, tensors)
    return {"files_read": _unique(read), "files_written": _unique(written),
            "tensors": _unique([t for _, t in tensors])}


def _cut(value: Any, caps: tuple[int, int], where: str, notes: list[str], depth: int) -> Any:
    """Lists at depth 0-1 (the rows, a document's top lists) cut to ``caps[0]`` items, deeper
    ones to ``caps[1]``; strings to ``_MAX_STRING`` characters."""
    if isinstance(value, dict):
        return {k: _cut(v, caps, f"{where}.{k}", notes, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        cap = caps[0] if depth <= 1 else caps[1]
        if len(value) > cap:
            notes.append(f"{where}: first {cap} of {len(value)} items (answer cap; narrow it with "
                         "the tool's limit/filters or a tensor slice)")
            value = value[:cap]
        return [_cut(v, caps, f"{where}[]", notes, depth + 1) for v in value]
    if isinstance(value, str) and len(value) > _MAX_STRING:
        notes.append(f"{where}: first {_MAX_STRING} of {len(value)} characters (answer cap)")
        return value[:_MAX_STRING]
    return value


def _size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, allow_nan=False))


def _halvings(n: int) -> list[int]:
    out = [max(1, n)]
    while out[-1] > 1:
        out.append(out[-1] // 2)
    return out


def answer_of(tool: str, command: str, document: Any, *, output_dir: Path | None, warnings: list[str],
              notes: list[str], interrupted: bool, limits: AnswerLimits,
              written_keys: frozenset[str] = frozenset(), extra_evidence: dict | None = None,
              totals: dict | None = None) -> dict:
    """The tool's answer ``{tool, command, result, evidence, notes, warnings, interrupted}``
    within the limits: rows are cut first (fewer and fewer until the answer fits), then the lists
    inside each row; each cut is a note. Evidence names what the answer shows. ``totals``: the
    counts of a list whose result is a page of it (``failing_ops``), after ``result``."""
    document = jsonable(document)
    schedule = [(top, limits.max_items) for top in _halvings(limits.max_items)] + \
               [(1, inner) for inner in _halvings(limits.max_items)[1:]]
    for caps in schedule:
        cuts: list[str] = []
        result = _cut(document, caps, "result", cuts, 0)
        found = evidence(result, output_dir, written_keys)
        found = {k: _cut(v, (caps[1], caps[1]), f"evidence.{k}", cuts, 0) for k, v in found.items()}
        found.update(extra_evidence or {})
        answer = {"tool": tool, "command": command, "result": result,
                  **({"totals": totals} if totals is not None else {}), "evidence": found,
                  "notes": [*notes, *cuts], "warnings": [_cut(w, caps, "warnings", [], 9) for w in warnings],
                  "interrupted": interrupted}
        if _size(answer) <= limits.max_chars:
            return answer
    size = _size(answer["result"])
    answer["result"] = None
    answer["notes"].append(f"result: {size} characters even at 1 item per list, over the cap of "
                           f"{limits.max_chars} (pshell mcp --max-chars): narrow the request")
    return answer
