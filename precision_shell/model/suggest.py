"""Did-you-mean for names a user typed (op names, tensor kinds): the closest known names by
difflib's ratio, no new dependency."""

from __future__ import annotations

import re
from typing import Iterable

# Past this many candidates difflib's full ratio is too slow for an error message (10^5 ops:
# seconds): the candidates sharing a character pair with the typo are ranked instead.
_DIRECT = 5000
_PART = re.compile(r"[/.]")     # scopes (graph ops) and dotted entry names (framework)


def close_names(word: str, candidates: Iterable[str], n: int = 3, cutoff: float = 0.6) -> list[str]:
    import difflib   # (here: only an error message needs it, not the commands importing this)

    names = list(dict.fromkeys(candidates))
    if len(names) > _DIRECT:
        lowered = word.lower()
        pairs = {lowered[i:i + 2] for i in range(len(lowered) - 1)}
        scored = sorted(names, key=lambda name: -sum(p in name.lower() for p in pairs))
        names = scored[:_DIRECT]
    close = difflib.get_close_matches(word, names, n=n, cutoff=cutoff)
    if close or _PART.search(word):
        return close
    # a scope path is long and the typo short (ni LayerNrom, ni softmx): match the name's parts
    parts: dict[str, list[str]] = {}
    for name in names:
        for part in _PART.split(name):
            parts.setdefault(part, []).append(name)
    hits = difflib.get_close_matches(word, list(parts), n=n, cutoff=cutoff)
    return list(dict.fromkeys(name for hit in hits for name in parts[hit]))[:n]


def did_you_mean(word: str, candidates: Iterable[str], n: int = 3) -> str:
    """``"; did you mean a or b?"`` or ``""`` when nothing is close."""
    close = close_names(word, candidates, n)
    return f"; did you mean {' or '.join(close)}?" if close else ""
