"""Fitting text to a terminal width: tables whose columns shrink or drop by priority, an expanded
(one field per line) form, and prose wrapped at word boundaries.

Numbers and names are never split across lines: a cell wraps at spaces, and a column is never
narrower than its longest number or its longest word up to ``_NAME_WHOLE`` characters (an op or
tensor name cut in two would not paste back into ``pt``); when that does not fit, columns drop by
priority and then the table goes expanded. Only a word longer than that breaks, after ``/``,
``:``, ``_`` or ``,`` where it can, never between two digits. Without a width (pipes, files, CSV)
nothing is changed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

GAP = "  "
EXPANDED_MODES = ("auto", "on", "off")
# A column may be dropped to make room, lowest priority first, before the table is judged not to
# fit. Unknown headers get DEFAULT; KEY columns (what a row is about) are never dropped.
OPTIONAL = 2
DEFAULT = 5
KEY = 9
PRIORITIES = {
    "#": KEY, "op": KEY, "tensor": KEY, "command": KEY, "setting": KEY, "golden tensor": KEY,
    "fusion passes": 0, "not compared": 0, "origin": 0, "device": 1, "logical": 1, "kernel": 1,
    "golden": 2, "inputs (cosine)": 2, "dtype": 2, "consumers": 3, "alias": 3,
    "source": 3, "format": 3, "meaning": 4, "cosine": 8, "role": 7, "outputs": 7,
    # a tensor name cut in two would not paste back: its column gives way whole instead
    "output": 2, "failing outputs": 2, "failing inputs": 1, "order": 2, "±65504": 2,
    "std": 2, "compared with": 1,
}
_COMFORT = 16       # a prose column this wide still reads well; narrower only when it must
_NAME_COMFORT = 32  # ... and a one-word name up to this long (an op name) stays whole if it can
_NAME_WHOLE = 40    # a word (op or tensor name) up to this long is never cut
_MIN_BREAK = 10     # a longer word may be cut into pieces this long to fit a column
_NUMBER = re.compile(r"^[-+]?(\d[\d,_]*\.?\d*|\.\d+)(e[-+]?\d+)?%?$", re.IGNORECASE)
_BREAK_AFTER = "/:_,.-"
_GLUE = 14          # `output 0`, `in0 1.000000,`: a number stays on the line of the word before it


def units(text: str, limit: int = _GLUE) -> list[str]:
    """The words of ``text``, each number joined to the word before it when the pair is at most
    ``limit`` long (a label and its number are read together)."""
    out: list[str] = []
    for word in text.split():
        if out and is_number(word) and len(out[-1]) + 1 + len(word) <= limit:
            out[-1] += " " + word
        else:
            out.append(word)
    return out


def is_number(word: str) -> bool:
    return bool(_NUMBER.match(word.strip("()[]{};:,'\"")))


def _break_word(word: str, width: int) -> list[str]:
    """Pieces of at most ``width`` (numbers stay whole), preferring the end of a name part."""
    pieces = []
    while len(word) > width:
        cut = 0
        for i in range(width, 0, -1):
            if word[i - 1] in _BREAK_AFTER and not (word[i - 1] == "." and word[i:i + 1].isdigit()):
                cut = i
                break
        if cut < max(1, width // 2):    # no good place: anywhere except inside a number
            cut = width
            while cut > 1 and word[cut - 1].isdigit() and (word[cut].isdigit() or word[cut] == "."):
                cut -= 1
            if cut <= 1:
                cut = width
                while cut < len(word) and word[cut - 1].isdigit() and word[cut].isdigit():
                    cut += 1
        pieces.append(word[:cut])
        word = word[cut:]
    return pieces + [word] if word else pieces


def wrap(text: str, width: int, indent: str = "") -> list[str]:
    """``text`` in lines of at most ``width`` (continuations start with ``indent``), broken at
    spaces; words longer than a line break as in :func:`_break_word`, numbers stay whole."""
    if width <= 0 or len(text) <= width:
        return [text]
    lead = text[:len(text) - len(text.lstrip(" "))]
    lines: list[str] = []
    current = lead
    prefix_len = len(lead)
    for word in units(text, min(_GLUE, width - len(indent))):
        sep = "" if len(current) == prefix_len else " "
        if len(current) + len(sep) + len(word) <= width:
            current += sep + word
            continue
        if len(current) > prefix_len:
            lines.append(current)
            current = indent if lines else lead
            prefix_len = len(current)
        room = max(1, width - prefix_len)
        if len(word) <= room:
            current += word
            continue
        if " " in word:     # a glued pair that does not fit: its parts go on as plain words
            head, tail = word.rsplit(" ", 1)
            word = head
            pieces = _break_word(head, room) + [tail]
        else:
            pieces = [word] if is_number(word) else _break_word(word, room)
        for piece in pieces[:-1]:
            lines.append(current + piece)
            current = indent
            prefix_len = len(indent)
        current += pieces[-1]
    lines.append(current)
    return lines


def wrap_lines(text: str, width: int | None, indent: str = "  ") -> str:
    """Every line of ``text`` wrapped to ``width``; continuation lines keep the line's own
    leading spaces plus ``indent``."""
    if not width:
        return text
    out = []
    for line in text.split("\n"):
        lead = line[:len(line) - len(line.lstrip(" "))]
        out += wrap(line, width, lead + indent)
    return "\n".join(out)


@dataclass
class Fitted:
    """A table laid out for a width: per-row lists of lines, or ``None`` for expanded form."""

    header: list[str]
    rule: str
    rows: list[list[str]]
    hidden: list[str] = field(default_factory=list)


def _min_width(header: str, cells: list[str], natural: int) -> int:
    words = header.split() or [""]
    need = max(len(w) for w in words)
    for cell in cells:
        for word in units(cell):
            whole = " " in word or is_number(word) or len(word) <= _NAME_WHOLE
            need = max(need, len(word) if whole else _NAME_WHOLE)
    return min(natural, need)


def _longest_word(cells: list[str]) -> int:
    """A name (one word) up to _NAME_COMFORT long reads best uncut."""
    longest = max((len(w) for c in cells for w in c.split()), default=0)
    return longest if longest <= _NAME_COMFORT else 0


def _total(widths: list[int]) -> int:
    return sum(widths) + len(GAP) * (len(widths) - 1) if widths else 0


def _lines_of(cells: list[str], widths: list[int]) -> list[str]:
    wrapped = [wrap(c, w) if len(c) > w else [c] for c, w in zip(cells, widths)]
    height = max(len(w) for w in wrapped)
    lines = []
    for i in range(height):
        parts = [(w[i] if i < len(w) else "").ljust(width) for w, width in zip(wrapped, widths)]
        lines.append(GAP.join(parts).rstrip())
    return lines


def fit_table(headers: list[str], rows: list[list[str]], width: int | None,
              expanded: str = "off") -> Fitted | None:
    """Lay the table out in ``width`` columns; ``None`` means: show it expanded (``expanded`` is
    ``on``, or ``auto`` and the table cannot fit without dropping a column that matters)."""
    n = len(headers)
    if expanded == "on":
        return None
    columns = [[r[i] for r in rows] for i in range(n)]
    natural = [max([len(headers[i])] + [len(c) for c in columns[i]]) for i in range(n)]
    minimum = [_min_width(headers[i], columns[i], natural[i]) for i in range(n)]
    comfort = [min(natural[i], max(minimum[i], _COMFORT, _longest_word(columns[i]))) for i in range(n)]
    keep = list(range(n))
    if width and _total(natural) > width:
        def priority(i: int) -> tuple[int, int]:
            return (PRIORITIES.get(headers[i], DEFAULT), -i)

        droppable = sorted((i for i in range(1, n) if priority(i)[0] <= OPTIONAL), key=priority)
        for i in droppable:
            if _total([comfort[k] for k in keep]) <= width:
                break
            keep.remove(i)
        if _total([minimum[k] for k in keep]) > width:
            if expanded == "auto":
                return None
            rest = sorted((i for i in keep[1:] if priority(i)[0] < KEY), key=priority)
            for i in rest:
                if _total([minimum[k] for k in keep]) <= width:
                    break
                keep.remove(i)
    widths = [natural[k] for k in keep]
    if width:
        floor = [minimum[k] for k in keep]
        excess = _total(widths) - width
        while excess > 0:
            j = max(range(len(widths)), key=lambda x: (widths[x] - floor[x] > 0, widths[x]))
            if widths[j] <= floor[j]:
                break
            widths[j] -= 1
            excess -= 1
    header = _lines_of([headers[k] for k in keep], widths)
    rule = GAP.join("-" * w for w in widths)
    body = [_lines_of([row[k] for k in keep], widths) for row in rows]
    hidden = [headers[i] for i in range(n) if i not in keep and any(columns[i])]
    return Fitted(header, rule, body, hidden)


def expanded_records(headers: list[str], rows: list[list[str]], width: int | None) -> list[list[str]]:
    """psql's ``\\x`` form: a ``-[ RECORD N ]`` line, then one ``field  value`` line per column
    (empty values left out); values wrap under themselves."""
    label = max((len(h) for h in headers), default=0)
    records = []
    for pos, row in enumerate(rows, 1):
        title = f"-[ RECORD {pos} ]"
        lines = [title + "-" * max(0, min(width or 40, 40) - len(title))]
        for head, cell in zip(headers, row):
            if not cell:
                continue
            room = (width - label - len(GAP)) if width else 0
            parts = wrap(cell, room) if room >= _MIN_BREAK else [cell]
            lines.append(f"{(head or '-').ljust(label)}{GAP}{parts[0]}")
            lines += [" " * (label + len(GAP)) + p for p in parts[1:]]
        records.append(lines)
    return records
