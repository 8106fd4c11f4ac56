"""A sorted, case-folded index of names with fast prefix, substring and fuzzy lookup.

Built once per loaded workspace (100k op names take ~0.2 s) and then queried on every keystroke,
so a query never loops over the names in Python:

- prefix matches come from ``bisect`` on the sorted folded names;
- matches at a path component (``MatMul`` finds ``fc1/MatMul``) and plain substrings come from
  ``str.find`` over all names joined by newlines;
- fuzzy (subsequence) matches come from one regular expression over the same text that walks the
  lines with possessive quantifiers: each line is scanned at most twice and never backtracks, so
  the worst case stays ~20 ms for 100k names (measured in ``bench/completer_latency.py``).

Results come prefix matches first, then component starts, substrings, and fuzzy matches ranked by
how tight the match is (fuzzy only when the text typed begins no name: it is then an
abbreviation or a typo, not a name being typed from its start).
"""

from __future__ import annotations

import bisect
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable

# Fuzzy matches collected before ranking; more would only cost time on very loose queries.
_FUZZY_SCAN_CAP = 2000
_FUZZY_CACHE_SIZE = 32


def _fuzzy_pattern(query: str) -> re.Pattern:
    """A pattern whose group 1 matches a line holding ``query`` as a subsequence.

    ``[^\\n c]*+ c`` finds the first ``c`` after the previous match without backtracking (taking
    the earliest occurrence of each character is optimal for a subsequence test). Lines that do
    not match are consumed by the leading loop inside the same match attempt, which avoids the
    regex engine restarting at every character of the text.
    """
    line = "".join(f"[^\\n{re.escape(c)}]*+{re.escape(c)}" for c in query)
    return re.compile(f"(?m)^(?:(?!{line})[^\\n]*+\\n)*+(?:({line})|\\Z)")


class NameIndex:
    """Names sorted case-insensitively; ``search`` returns up to ``limit`` names, best first."""

    def __init__(self, names: Iterable[str]):
        pairs = sorted({(name.lower(), name) for name in names if name and "\n" not in name})
        self.names: list[str] = [name for _, name in pairs]
        self._keys: list[str] = [key for key, _ in pairs]
        # Every key followed by "\n": a match's offset maps back to its name by bisect.
        self._text = "".join(key + "\n" for key in self._keys)
        self._starts = _line_starts(self._keys)
        self._chars = frozenset(self._text)
        # Fuzzy scans of recent queries: typing one more character only has to look at the
        # names the shorter query matched (a subsequence of q+c is one of q), plus the names
        # past the point where that scan hit its cap.
        self._fuzzy_cache: OrderedDict[str, tuple[list[int], int | None]] = OrderedDict()
        self._cache_lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.names)

    def __contains__(self, name: str) -> bool:
        i = bisect.bisect_left(self._keys, name.lower())
        return i < len(self._keys) and self.names[i] == name

    def _index_at(self, offset: int) -> int:
        return bisect.bisect_right(self._starts, offset) - 1

    def prefix(self, query: str, limit: int) -> list[int]:
        key = query.lower()
        start = bisect.bisect_left(self._keys, key)
        out = []
        for i in range(start, min(start + limit, len(self._keys))):
            if not self._keys[i].startswith(key):
                break
            out.append(i)
        return out

    def _component(self, key: str, limit: int, seen: set[int], out: list[int]) -> None:
        """Names where ``key`` starts a path component (right after a ``/``), in order.

        ``str.find`` of ``"/" + key``: every hit is a real component start, so the Python loop
        runs once per result, never once per occurrence of ``key``.
        """
        needle, pos = "/" + key, 0
        while len(out) < limit:
            pos = self._text.find(needle, pos)
            if pos < 0:
                return
            i = self._index_at(pos)
            if i not in seen:
                seen.add(i)
                out.append(i)
            pos = self._starts[i] + len(self._keys[i]) + 1

    def _substring(self, key: str, limit: int, seen: set[int], out: list[int]) -> None:
        """Names containing ``key`` anywhere, in sorted order."""
        text, pos = self._text, 0
        while len(out) < limit:
            pos = text.find(key, pos)
            if pos < 0:
                return
            i = self._index_at(pos)
            if i not in seen:
                seen.add(i)
                out.append(i)
            pos = self._starts[i] + len(self._keys[i]) + 1  # next name: nothing more here

    def _cached_scan(self, key: str) -> tuple[list[int], int | None] | None:
        """The scan of the longest cached query that ``key`` extends: (its matches, the offset
        in the full text where that scan stopped, None when it ran to the end)."""
        best = None
        with self._cache_lock:   # the completer thread of an older keystroke may be writing
            cached_items = list(self._fuzzy_cache.items())
        for cached, entry in cached_items:
            if key.startswith(cached) and (best is None or len(cached) > len(best[0])):
                best = (cached, entry)
        return None if best is None else best[1]

    def _scan(self, pattern: re.Pattern, key: str, text: str, starts: list[int],
              ids: list[int] | None, begin: int, found: list[tuple[int, int]]) -> bool:
        """Append (index, span) of lines of ``text`` from ``begin`` that match; False when the
        scan cap stopped it early."""
        for m in pattern.finditer(text, begin):
            if m.group(1) is None:
                break
            line = bisect.bisect_right(starts, m.start(1)) - 1
            # how spread out the match is: from the first query character to the last
            first = text.find(key[0], m.start(1), m.end(1))
            found.append((line if ids is None else ids[line], m.end(1) - first))
            if len(found) >= _FUZZY_SCAN_CAP:
                return False
        return True

    def _fuzzy(self, key: str, limit: int, seen: set[int], out: list[int]) -> None:
        if not set(key) <= self._chars:
            return  # a character no name has: nothing can match, skip the scan
        pattern = _fuzzy_pattern(key)
        cached = self._cached_scan(key)
        found: list[tuple[int, int]] = []
        if cached is None:
            complete = self._scan(pattern, key, self._text, self._starts, None, 0, found)
        else:
            # Only the shorter query's matches can match in the part it scanned; past the
            # point where its scan stopped, every name is still a candidate.
            candidates, stopped_at = cached
            sub_keys = [self._keys[i] for i in candidates]
            sub_text = "".join(k + "\n" for k in sub_keys)
            complete = self._scan(pattern, key, sub_text, _line_starts(sub_keys), candidates, 0, found)
            if complete and stopped_at is not None:
                complete = self._scan(pattern, key, self._text, self._starts, None, stopped_at, found)
        stop = None
        if not complete:
            last = found[-1][0]
            stop = self._starts[last] + len(self._keys[last]) + 1
        with self._cache_lock:
            self._fuzzy_cache[key] = ([i for i, _ in found], stop)
            while len(self._fuzzy_cache) > _FUZZY_CACHE_SIZE:
                self._fuzzy_cache.popitem(last=False)
        ranked = sorted((span, len(self._keys[i]), i) for i, span in found if i not in seen)
        for _, _, i in ranked[: max(0, limit - len(out))]:
            seen.add(i)
            out.append(i)

    def search(self, query: str, limit: int = 100, fuzzy: bool = True) -> list[str]:
        """Prefix matches, then component starts, substrings, then fuzzy matches."""
        if not query:
            return self.names[:limit]
        key = query.lower()
        out = self.prefix(key, limit)
        has_prefix_match = bool(out)
        seen = set(out)
        if "\n" in key:
            return [self.names[i] for i in out]
        for step in (self._component, self._substring):
            if len(out) < limit:
                step(key, limit, seen, out)
        # Text that begins some names is being typed literally: fuzzy matches would only add
        # noise below them (and cost a scan), so they fill in only for abbreviations and typos.
        if fuzzy and len(out) < limit and len(key) > 1 and not has_prefix_match:
            self._fuzzy(key, limit, seen, out)
        return [self.names[i] for i in out]


def _line_starts(keys: list[str]) -> list[int]:
    starts, pos = [], 0
    for key in keys:
        starts.append(pos)
        pos += len(key) + 1
    return starts
