"""JSON for scripts: NaN becomes null, +/-inf the strings "inf"/"-inf" (JSON has neither),
numpy scalars and paths become plain values."""

from __future__ import annotations

import json
import math
import re
import sys
from typing import Any


def jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
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


def to_json_text(data: Any) -> str:
    """One line of JSON."""
    text = json.dumps(jsonable(data), ensure_ascii=False, allow_nan=False)
    # json escapes C0 controls; DEL and C1 (a lone 0x9b is CSI to many terminals) are escaped
    # too: outside strings JSON is ASCII, so this only rewrites characters inside strings
    return _C1.sub(lambda m: f"\\u{ord(m.group()):04x}", text) if _C1.search(text) else text


_C1 = re.compile("[\x7f-\x9f]")
