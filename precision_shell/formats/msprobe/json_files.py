"""msprobe's JSON files read with a size bound, and a ``dump.json`` read entry by entry.

msprobe rewrites ``dump.json`` whole at every flush (framework-dumps.md A1), so a run killed while
writing, or a full disk, leaves a file that ends mid-entry. :func:`salvage_object` reads a whole,
valid file with one ``json.loads``; otherwise it parses the top level and the ``data`` object
member by member (the C scanner on each value; ~25% slower and, with keys not shared between
entries, ~50% more memory than one ``json.loads``, so only when needed), so that:

- a cut keeps every entry before it;
- one bad entry (nested deeper than Python's recursion limit, a number of more than 4300 digits,
  a syntax error, a byte that is not UTF-8) is skipped and named, and the entries after it load:
  the skip finds the entry's end by its brackets;
- an entry name given twice is counted; the last one is kept, as ``json.load`` (and so msprobe's
  own compare) keeps it.

Bare ``NaN``/``Infinity`` literals, which msprobe writes for overflowed statistics, are accepted
(the stdlib decoder's default).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from json.scanner import make_scanner

from ...errors import FormatError
from ..input_files import open_regular

MAX_JSON_BYTES = 1 << 30     # a 100k-entry L1 dump.json is ~100 MB
_WS = " \t\n\r"


def _read_blob(path: str, max_bytes: int) -> bytes:
    try:
        with os.fdopen(open_regular(path), "rb") as f:     # a planted FIFO must not hang start-up
            size = os.fstat(f.fileno()).st_size
            if size > max_bytes:
                raise FormatError(path, f"{size} bytes, over the {max_bytes >> 20} MB limit for a JSON file")
            return f.read(max_bytes + 1)
    except IsADirectoryError:
        raise FormatError(path, "is a directory, not a JSON file") from None
    except FileNotFoundError:
        raise FormatError(path, "no such file") from None
    except OSError as e:
        raise FormatError(path, f"cannot read: {e.strerror or e}") from None


def read_json_text(path: str | os.PathLike, max_bytes: int = MAX_JSON_BYTES) -> str:
    path = os.fspath(path)
    blob = _read_blob(path, max_bytes)
    try:
        return blob.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise FormatError(path, f"not UTF-8 text (byte {e.start})") from None


def read_json_text_lenient(path: str | os.PathLike, max_bytes: int = MAX_JSON_BYTES) -> tuple[str, bool]:
    """The text of a JSON file, and whether some bytes were not UTF-8: those become lone
    surrogates (``surrogateescape``) for :func:`salvage_object` to skip the members holding
    them, instead of the whole file being refused."""
    path = os.fspath(path)
    blob = _read_blob(path, max_bytes)
    try:
        return blob.decode("utf-8-sig"), False
    except UnicodeDecodeError:
        return blob.decode("utf-8-sig", "surrogateescape"), True


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


_WS_RE = re.compile(r"[ \t\n\r]*")
# a JSON string, or one bracket: what finding the end of a value that did not parse needs
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')
_SCALAR_END = re.compile(r'[^,}\]]*')
_SURROGATE = re.compile("[\udc80-\udcff]")    # a byte that was not UTF-8 (surrogateescape)


@dataclass
class Salvaged:
    """What :func:`salvage_object` made of a JSON text."""
    doc: dict
    cut: str | None = None                       # why it stopped before the end, if it did
    skipped: list[tuple[str, str]] = field(default_factory=list)   # (member name, reason)
    duplicates: list[str] = field(default_factory=list)            # names given more than once


class _Cut(Exception):
    def __init__(self, pos: int, what: str):
        super().__init__(what)
        self.pos, self.what = pos, what


def _skip_ws(text: str, pos: int) -> int:
    return _WS_RE.match(text, pos).end()


def _why(e: BaseException) -> str:
    if isinstance(e, RecursionError):
        return "nests too deeply"
    if isinstance(e, json.JSONDecodeError):
        return f"invalid JSON ({e.msg} at char {e.pos})"
    if isinstance(e, StopIteration):     # the C scanner's "no value starts here"
        return f"invalid JSON (expecting a value at char {e.value})"
    return "a number of more than 4300 digits"     # json's int() is the other ValueError


def _value_end(text: str, pos: int) -> int | None:
    """Where the value starting at ``pos`` ends, by its brackets (strings skipped), for a value
    the decoder refused; None when the text ends first."""
    if text.startswith(("{", "["), pos):
        depth = 0
        for m in _TOKEN.finditer(text, pos):
            token = m.group()
            if token in "{[":
                depth += 1
            elif token in "}]":
                depth -= 1
                if depth == 0:
                    return m.end()
        return None
    end = _SCALAR_END.match(text, pos).end()
    return end if end < len(text) else None


_COLON = re.compile(r"[ \t\n\r]*:[ \t\n\r]*")
_NEXT = re.compile(r"[ \t\n\r]*(?:(,)[ \t\n\r]*|\})")     # group 1 set: another member follows


def _members(text: str, pos: int, into: Salvaged, out: dict, scan, descend: str | None,
             surrogates: bool) -> int:
    """Parse ``"key": value`` members of the object whose ``{`` precedes ``pos`` into ``out``;
    the member named ``descend`` (an object) is itself parsed member by member. A value that
    does not parse is skipped (``into.skipped``) when its end can be found. Returns the position
    after ``}``; raises _Cut where the text stops making sense."""
    pos = _skip_ws(text, pos)
    if text.startswith("}", pos):
        return pos + 1
    while True:
        start = pos
        try:
            key, pos = scan(text, pos)
        except (ValueError, RecursionError, StopIteration):  # incl. JSONDecodeError
            raise _Cut(pos, "a member name") from None
        if type(key) is not str:
            raise _Cut(start, "a member name")
        colon = _COLON.match(text, pos)
        if colon is None:
            raise _Cut(_skip_ws(text, pos), "':'")
        pos = colon.end()
        if key == descend and text.startswith("{", pos):
            inner: dict = {}
            out[key] = inner
            pos = _members(text, pos + 1, into, inner, scan, None, surrogates)
        else:
            try:
                value, pos = scan(text, pos)
            except (ValueError, RecursionError, StopIteration) as e:  # incl. JSONDecodeError
                end = _value_end(text, pos)
                if end is None:
                    raise _Cut(pos, f"the value of {key!r:.80}") from None
                into.skipped.append((_shown(key), _why(e)))
                pos = end
            else:
                if surrogates and _SURROGATE.search(text, start, pos):
                    into.skipped.append((_shown(key), "not UTF-8 text"))
                else:
                    if key in out:
                        into.duplicates.append(key)
                    out[key] = value
        after = _NEXT.match(text, pos)
        if after is None:
            raise _Cut(_skip_ws(text, pos), "',' or '}'")
        pos = after.end()
        if after.group(1) is None:
            return pos


def _shown(key: str) -> str:
    """A member name for a warning line: bytes that were not UTF-8 as ``\\xNN``."""
    return key.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _may_repeat(text: str, data, descend: str) -> bool:
    """Whether the ``descend`` object of a whole text may name an entry twice (json.loads keeps
    the last without a word). msprobe writes dump.json indented, each entry name at the start of
    a line at one depth: counting that line start (one C-speed pass) equals ``len(data)`` unless
    a name repeats. Another layout counts differently and goes to the exact member-by-member
    read, as a repeat does."""
    if not isinstance(data, dict) or not data:
        return False
    first = re.search(r'"%s"[ \t\n\r]*:[ \t\n\r]*\{([ \t\n\r]*)"' % re.escape(descend), text)
    if first is None or "\n" not in first.group(1):
        return True
    return text.count("\n" + first.group(1).rpartition("\n")[2] + '"', first.start(1)) != len(data)


def salvage_object(text: str, descend: str = "data", surrogates: bool = False) -> Salvaged:
    """The members of a top-level JSON object that parse, in order, with what was skipped and
    where it stopped (``"cut at char 1234 of 5678 (expected the value of 'x')"``). A whole,
    valid text is one ``json.loads`` (keys shared, the fastest); a text that is not, or whose
    ``descend`` object may repeat a name, is read member by member, ``descend`` entry by entry.
    ``surrogates``: the text was decoded with ``surrogateescape``
    (:func:`read_json_text_lenient`); a member holding such a byte is skipped."""
    if not surrogates:
        try:
            whole = json.loads(text)
        except (ValueError, RecursionError):   # ValueError: JSONDecodeError, or a 4300+ digit number
            whole = None
        if isinstance(whole, dict) and not _may_repeat(text, whole.get(descend), descend):
            return Salvaged(whole)
    into = Salvaged({})
    pos = _skip_ws(text, 0)
    if not text.startswith("{", pos):
        into.cut = "not a JSON object"
        return into
    try:
        end = _members(text, pos + 1, into, into.doc, make_scanner(json.JSONDecoder()), descend, surrogates)
    except _Cut as cut:
        into.cut = f"cut at char {cut.pos} of {len(text)} (expected {cut.what})"
        return into
    if _skip_ws(text, end) != len(text):
        into.cut = f"extra text after char {end}"
    return into
