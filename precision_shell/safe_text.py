"""Names from data are shown, never executed by the terminal or a spreadsheet.

Op, entry, tensor and file names come from files other people made. A name holding
``ESC ] 0 ; title BEL`` (OSC 0) retitles the terminal, OSC 52 writes the clipboard, CSI moves
the cursor, and a newline forges an output line (``error: FAKE ...``). Every renderer passes text
from data through :func:`escape_controls` (C0 and C1 controls and DEL become ``\\xNN``, ``\\n``,
``\\r``, ``\\t`` escapes) at a few choke points: table cells, panel values, messages, errors and
warnings, the toolbar, completion menu and chart labels.

A CSV cell that starts with ``=``, ``+``, ``-`` or ``@`` (or a tab/CR) is a formula to a
spreadsheet (``=HYPERLINK(...)`` from a dump's ``data_name``): :func:`csv_cell` prefixes such a
text cell with ``'`` as OWASP's CSV-injection advice says; numbers stay numbers.
"""

from __future__ import annotations

import re

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# C0 (0x00-0x1f), DEL (0x7f), C1 (0x80-0x9f)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_CONTROL_BUT_NEWLINE = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")
# pshell's own colours (render.style): the only escape sequences it prints itself
_OWN_SGR = re.compile(r"\x1b\[(?:0|1|2|31|32|33|34|35|36|1;31|1;33)m")
_ANY_SGR = re.compile(r"\x1b\[[0-9;]*m")   # plotext's colours (chart labels are escaped first)


def _escape(match: re.Match) -> str:
    ch = match.group()
    return _NAMED.get(ch) or f"\\x{ord(ch):02x}"


def escape_controls(text: str) -> str:
    """``text`` on one line with every control character written as an escape."""
    text = str(text)
    return _CONTROL.sub(_escape, text) if _CONTROL.search(text) else text


def escape_lines(text: str) -> str:
    """Rendered multi-line text: its line breaks kept, every other control escaped."""
    return _CONTROL_BUT_NEWLINE.sub(_escape, text) if _CONTROL_BUT_NEWLINE.search(text) else text


def escape_styled(text: str, any_colour: bool = False) -> str:
    """Rendered text with pshell's own colour codes (render.style; with ``any_colour``, every
    SGR colour code, as plotext draws them) kept, every other control except line breaks
    escaped: data holding such a code shows as colour at most, never moves or titles anything."""
    if not _CONTROL_BUT_NEWLINE.search(text):
        return text
    pattern = _ANY_SGR if any_colour else _OWN_SGR
    parts = pattern.split(text)
    codes = pattern.findall(text)
    out = [escape_lines(parts[0])]
    for code, part in zip(codes, parts[1:]):
        out += [code, escape_lines(part)]
    return "".join(out)


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def csv_cell(value):
    """A CSV cell a spreadsheet does not run: text from data starting with ``= + - @`` (or a
    tab/CR) gets a leading ``'``; numbers (``-1.5``, ``-inf``), a lone ``-`` and non-text values
    unchanged."""
    if (isinstance(value, str) and len(value) > 1 and value.startswith(_FORMULA_START)
            and not _is_number(value)):     # a lone "-" (no value) is no formula
        return "'" + value
    return value


# a row with no cell that could be a formula (the usual case: names, numbers, "-0.5") is
# passed as it is after one search over its joined text
_MAYBE_FORMULA = re.compile(r"(?:^|\x00)(?:[=+@\t\r]|-(?![0-9.]))")


def csv_row(row: list) -> list:
    """:func:`csv_cell` on every cell of a row (cheap for rows without a formula start)."""
    if not _MAYBE_FORMULA.search("\x00".join(c if isinstance(c, str) else "" for c in row)):
        return row
    return [csv_cell(c) for c in row]


def may_hold_formula(cells: list[str]) -> bool:
    """:func:`csv_row`'s test on string cells: True when some cell may need :func:`csv_cell`. It
    looks at each cell's start only, so a row's answer is any of its parts' answers."""
    return _MAYBE_FORMULA.search("\x00".join(cells)) is not None


def csv_uncell(text: str) -> str:
    """The text :func:`csv_cell` neutralised, as it was (reading pshell's own CSV back)."""
    if text.startswith("'") and csv_cell(text[1:]) == text:
        return text[1:]
    return text
