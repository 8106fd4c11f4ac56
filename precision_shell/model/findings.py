"""The current finding list (overflow or compare) and the cursor ``next``/``prev``/``goto`` move."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from precision_shell.errors import CommandError


@dataclass
class FindingCursor:
    kind: str              # "overflow" | "compare"
    items: list[Any]       # findings, each with an ``op`` attribute
    pos: int = -1          # -1: before the first item

    def _at(self, pos: int) -> Any:
        if not self.items:
            raise CommandError(f"the {self.kind} finding list is empty")
        if not 0 <= pos < len(self.items):
            raise CommandError(f"no {self.kind} finding {pos + 1}: the list has {len(self.items)} "
                               f"(1..{len(self.items)})")
        self.pos = pos
        return self.items[pos]

    def next(self) -> Any:
        if self.pos + 1 >= len(self.items):
            raise CommandError(f"end of the {self.kind} list ({len(self.items)} findings); `prev` or `goto K`")
        return self._at(self.pos + 1)

    def prev(self) -> Any:
        if self.pos <= 0:
            raise CommandError(f"at the start of the {self.kind} list; `next` or `goto K`")
        return self._at(self.pos - 1)

    def goto(self, k: int) -> Any:
        return self._at(k - 1)

    @property
    def position_text(self) -> str:
        return f"{self.kind} {self.pos + 1}/{len(self.items)}" if self.pos >= 0 else f"{self.kind} -/{len(self.items)}"
