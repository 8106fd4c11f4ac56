"""JSON for scripts: NaN becomes null, +/-inf the strings "inf"/"-inf" (JSON has neither),
numpy scalars and paths become plain values."""

from __future__ import annotations

import json
import math
import re
import sys
from typing import Any


# values JSON takes as they are: not looked at further (a 100k-row vcs document holds ~6M values)
_AS_IS = frozenset({str, int, bool, type(None)})


def jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k if type(k) is str else str(k): v if type(v) in _AS_IS else jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [v if type(v) in _AS_IS else jsonable(v) for v in value]
    np = sys.modules.get("numpy")  # no numpy loaded: no numpy values (start-up stays numpy-free)
    if np is not None and isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        if math.isnan(value):
            return None
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
    if isinstance(value, (set, frozenset)):
        return sorted(jsonable(v) for v in value)
    if hasattr(value, "__fspath__"):
        return str(value)
    return value


_CHUNK = 4096


def to_json_text(data: Any) -> str:
    """One line of JSON. A long list is converted and encoded a chunk of rows at a time (the
    same text): a 100k-row ``vcs`` document is not copied whole by :func:`jsonable` first."""
    if isinstance(data, list) and len(data) > _CHUNK:
        parts = [json.dumps(jsonable(data[at:at + _CHUNK]), ensure_ascii=False, allow_nan=False)[1:-1]
                 for at in range(0, len(data), _CHUNK)]
        text = "[" + ", ".join(parts) + "]"
    else:
        text = json.dumps(jsonable(data), ensure_ascii=False, allow_nan=False)
    return escape_high_controls(text)


def escape_high_controls(text: str) -> str:
    """JSON text from ``json.dumps(..., ensure_ascii=False)`` as pshell prints it: json escapes
    C0 controls; DEL and C1 (a lone 0x9b is CSI to many terminals) are escaped too. Outside
    strings JSON is ASCII, so this only rewrites characters inside strings."""
    if text.isascii() and "\x7f" not in text:      # (isascii is a flag of the string: no scan)
        return text
    return _C1.sub(lambda m: f"\\u{ord(m.group()):04x}", text) if _C1.search(text) else text


_C1 = re.compile("[\x7f-\x9f]")
