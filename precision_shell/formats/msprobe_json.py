"""msprobe's JSON files read with a size bound, and a ``dump.json`` cut short read up to the cut.

msprobe rewrites ``dump.json`` whole at every flush (framework-dumps.md A1), so a run killed while
writing, or a full disk, leaves a file that ends mid-entry. :func:`salvage_object` parses the top
level and the ``data`` object member by member with ``json.JSONDecoder.raw_decode`` and keeps
every entry before the cut. Bare ``NaN``/``Infinity`` literals, which msprobe writes for overflowed
statistics, are accepted (the stdlib decoder's default).

Deeply nested JSON is bounded by the C decoder itself (it raises RecursionError at Python's
recursion limit), and a number of more than 4300 digits by json's int() (ValueError): both are a
FormatError or the point where salvage stops, never a traceback (as in fusion_result/graph_json).
"""

from __future__ import annotations

import json
import os

from ..errors import FormatError
from .input_files import open_regular

MAX_JSON_BYTES = 1 << 30     # a 100k-entry L1 dump.json is ~100 MB
_WS = " \t\n\r"


def read_json_text(path: str | os.PathLike, max_bytes: int = MAX_JSON_BYTES) -> str:
    path = os.fspath(path)
    try:
        with os.fdopen(open_regular(path), "rb") as f:     # a planted FIFO must not hang start-up
            size = os.fstat(f.fileno()).st_size
            if size > max_bytes:
                raise FormatError(path, f"{size} bytes, over the {max_bytes >> 20} MB limit for a JSON file")
            blob = f.read(max_bytes + 1)
    except IsADirectoryError:
        raise FormatError(path, "is a directory, not a JSON file") from None
    except FileNotFoundError:
        raise FormatError(path, "no such file") from None
    except OSError as e:
        raise FormatError(path, f"cannot read: {e.strerror or e}") from None
    try:
        return blob.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise FormatError(path, f"not UTF-8 text (byte {e.start})") from None


def load_json(path: str | os.PathLike, max_bytes: int = MAX_JSON_BYTES):
    """The parsed JSON value of a whole, valid file; FormatError for anything else."""
    text = read_json_text(path, max_bytes)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise FormatError(path, f"invalid JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
    except RecursionError:
        raise FormatError(path, "JSON nests too deeply") from None
    except ValueError:   # json's int(): a number of more than 4300 digits
        raise FormatError(path, "a number in the JSON is too long (over 4300 digits)") from None


def _skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in _WS:
        pos += 1
    return pos


class _Cut(Exception):
    def __init__(self, pos: int, what: str):
        super().__init__(what)
        self.pos, self.what = pos, what


def _members(text: str, pos: int, out: dict, decoder: json.JSONDecoder, descend: str | None) -> int:
    """Parse ``"key": value`` members of the object whose ``{`` precedes ``pos`` into ``out``;
    the member named ``descend`` (an object) is itself parsed member by member. Returns the
    position after ``}``; raises _Cut where the text stops making sense."""
    pos = _skip_ws(text, pos)
    if text.startswith("}", pos):
        return pos + 1
    while True:
        try:
            key, pos = decoder.raw_decode(text, _skip_ws(text, pos))
        except (ValueError, RecursionError):  # incl. JSONDecodeError
            raise _Cut(pos, "a member name") from None
        if not isinstance(key, str):
            raise _Cut(pos, "a member name")
        pos = _skip_ws(text, pos)
        if not text.startswith(":", pos):
            raise _Cut(pos, "':'")
        pos = _skip_ws(text, pos + 1)
        if key == descend and text.startswith("{", pos):
            inner: dict = {}
            out[key] = inner
            pos = _members(text, pos + 1, inner, decoder, None)
        else:
            try:
                out[key], pos = decoder.raw_decode(text, pos)
            except (ValueError, RecursionError):  # incl. JSONDecodeError
                raise _Cut(pos, f"the value of {key!r}") from None
        pos = _skip_ws(text, pos)
        if text.startswith(",", pos):
            pos += 1
        elif text.startswith("}", pos):
            return pos + 1
        else:
            raise _Cut(pos, "',' or '}'")


def salvage_object(text: str, descend: str = "data") -> tuple[dict, str | None]:
    """The members of a top-level JSON object that parse, in order, and None when the whole text
    parsed, else why it stopped (``"cut at char 1234 (expected the value of 'x')"``). The member
    ``descend`` is salvaged entry by entry, so a dump.json cut inside entry N keeps entries < N."""
    try:  # a whole file (the usual case) in one C-speed pass; member by member only when cut
        whole = json.loads(text)
    except (ValueError, RecursionError):   # ValueError: JSONDecodeError, or a 4300+ digit number
        whole = None
    if isinstance(whole, dict):
        return whole, None
    out: dict = {}
    pos = _skip_ws(text, 0)
    if not text.startswith("{", pos):
        return out, "not a JSON object"
    try:
        end = _members(text, pos + 1, out, json.JSONDecoder(), descend)
    except _Cut as cut:
        return out, f"cut at char {cut.pos} of {len(text)} (expected {cut.what})"
    if _skip_ws(text, end) != len(text):
        return out, f"extra text after char {end}"
    return out, None
