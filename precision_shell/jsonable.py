"""JSON for scripts: NaN becomes null, +/-inf the strings "inf"/"-inf" (JSON has neither),
numpy scalars and paths become plain values."""

from __future__ import annotations

import json
import math
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
    return json.dumps(jsonable(data), ensure_ascii=False, allow_nan=False)
