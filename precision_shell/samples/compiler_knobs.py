"""The two compiler knobs the sample honours: a fusion switch file and a keep-fp32 list.

``--fusion-switch FILE`` is the vendor's fusion switch config (``--fusion_switch_file``)::

    {"Switch": {"GraphFusion": {"LayerNormFusionPass": "off"}, "UBFusion": {"ALL": "off"}}}

A pass is off only when named in its own section (FE ignores a graph pass listed under UBFusion);
``"ALL": "off"`` switches a whole section off. ``--keep-fp32 FILE`` lists framework op names, one
per line (``#`` comments and blank lines ignored); an NPU op is kept in fp32 when one of its
original ops (or its own name) is listed. Both are honoured as the compiler would: a pass switched
off leaves the original ops unfused, an op kept in fp32 computes and dumps in fp32 (see
``compiled_ops``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .fusion_report import UB_PASSES
from .kernels import F32

_SECTIONS = {"GraphFusion": "graph", "UBFusion": "ub"}


@dataclass(frozen=True)
class CompilerKnobs:
    fusion_off: frozenset[str] = frozenset()     # pass names; "ALL:graph" / "ALL:ub" for a section
    keep_fp32: frozenset[str] = frozenset()      # framework (or NPU) op names
    used_keep: set[str] = field(default_factory=set, compare=False)   # the names some op matched

    @property
    def any(self) -> bool:
        return bool(self.fusion_off or self.keep_fp32)

    def fused(self, pass_name: str) -> bool:
        section = "ub" if pass_name in UB_PASSES else "graph"
        return pass_name not in self.fusion_off and f"ALL:{section}" not in self.fusion_off

    def dtype_for(self, names: list[str], default) -> np.dtype:
        """fp32 when one of ``names`` (an op's original ops) is kept, else ``default``."""
        hit = [n for n in names if n in self.keep_fp32]
        self.used_keep.update(hit)
        return np.dtype(F32) if hit else np.dtype(default)

    def unused_keep(self) -> list[str]:
        return sorted(self.keep_fp32 - self.used_keep)

    def manifest_entry(self) -> dict:
        return {"fusion_off": sorted(self.fusion_off), "keep_fp32": sorted(self.keep_fp32)}


def read_fusion_switch(path: str | Path) -> frozenset[str]:
    """The passes a fusion switch file turns off; ValueError (one line naming the file) if bad."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"{path}: not a fusion switch file ({getattr(exc, 'strerror', None) or exc})") from None
    switch = doc.get("Switch") if isinstance(doc, dict) else None
    if not isinstance(switch, dict):
        raise ValueError(f'{path}: not a fusion switch file (no "Switch" object)')
    off: set[str] = set()
    for section, kind in _SECTIONS.items():
        passes = switch.get(section, {})
        if not isinstance(passes, dict):
            raise ValueError(f"{path}: Switch.{section} must be an object of pass names")
        for name, state in passes.items():
            if str(state).lower() not in ("on", "off"):
                raise ValueError(f"{path}: Switch.{section}.{name} must be \"on\" or \"off\", not {state!r}")
            if str(state).lower() != "off":
                continue
            if name == "ALL":
                off.add(f"ALL:{kind}")
            elif (name in UB_PASSES) == (kind == "ub"):    # FE ignores a pass in the other section
                off.add(name)
    return frozenset(off)


def read_keep_fp32(path: str | Path) -> frozenset[str]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: cannot read keep-fp32 list ({getattr(exc, 'strerror', None) or exc})") from None
    names = {line.strip() for line in text.splitlines()}
    return frozenset(n for n in names if n and not n.startswith("#"))
