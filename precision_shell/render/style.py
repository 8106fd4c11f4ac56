"""ANSI styling that switches off for pipes, NO_COLOR and ``--no-color``."""

from __future__ import annotations

import os
import sys

_CODES = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33", "blue": "34",
          "magenta": "35", "cyan": "36", "bold_red": "1;31", "bold_yellow": "1;33"}


def color_wanted(stream=None, requested: bool = True) -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set (https://no-color.org)."""
    stream = stream or sys.stdout
    if not requested or os.environ.get("NO_COLOR"):
        return False
    return bool(getattr(stream, "isatty", lambda: False)())


class Style:
    def __init__(self, color: bool = False):
        self.color = color

    def __call__(self, text: str, style: str) -> str:
        if not self.color or style not in _CODES:
            return text
        return f"\x1b[{_CODES[style]}m{text}\x1b[0m"


PLAIN = Style(False)
