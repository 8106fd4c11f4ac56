"""File-name grammar of NPU dumps, golden ``.npy`` files and ``mapping.csv`` (formats.md §1.1, §5, A.4).

Dump names are ``{op_type}.{op_name}.{task_id}[.{stream_id}].{timestamp}[...]``; the number of
dot-separated fields tells the forms apart:

* 4 fields: ``type.name.task.ts`` (old CANN, no stream id)
* 5 fields: ``type.name.task.stream.ts`` (the normal form)
* 8 fields: ``type.name.task.ts.task_type.context_id.thread_id.device_id`` (doc form without stream)
* 9 fields: ``type.name.task.stream.ts.task_type.context_id.thread_id.device_id`` (FFTS+/newer)
* 6, 7 or 10+ fields: msaccucmp's regex accepts these (it is not end-anchored); we read them the
  way its greedy match does (task, stream, timestamp first) and leave the extra fields unnamed.

Every field after the op name must be all digits, which is what separates a dump from its decoded
siblings (``….input.0.npy``, ``….output.0.json``), stats ``.csv`` files and ``mapping.csv``.
"""

from __future__ import annotations

import csv
import operator
import os
import re
from typing import Iterable, NamedTuple

from ..errors import FormatError
from .input_files import open_regular
from .quoting import clipped

_ESCAPED_CHARS = str.maketrans({".": "_", "/": "_", "\\": "_", " ": "_"})


# NamedTuples, not dataclasses: a workspace has 10^5 of them, and tuples are the cheapest Python
# objects to make.
class DumpName(NamedTuple):
    op_type: str
    op_name: str                 # escaped, as on disk
    task_id: int
    stream_id: int | None
    timestamp: int
    task_type: int | None
    context_id: int | None
    thread_id: int | None
    device_id: int | None
    n_fields: int

    @property
    def is_opdebug(self) -> bool:
        return self.op_type == "Opdebug"


class GoldenName(NamedTuple):
    op_name: str                 # escaped
    output_index: int
    timestamp: int | None


def escape_op_name(name: str) -> str:
    """The on-disk spelling of an op name: ``.``, ``/``, ``\\`` and space become ``_`` (lossy)."""
    return name.translate(_ESCAPED_CHARS)


# One match decides whether a name is a dump: the start-up scan tests 10^5 names and parses them
# only when an op is looked up. [0-9], not \d: \d also matches non-ASCII digits (e.g. "²"), which
# are not numbers in a dump name. At most 30 digits a field: a real name from mapping.csv is not
# bounded by the file system, and int() refuses more than 4300 digits.
_DUMP_NAME = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+(?:\.[0-9]{1,30}){2,}\Z")
# {op}.{idx}.{ts}.npy, else {op}.{idx}.npy: the shortest op wins, so two trailing numbers are
# read as (index, timestamp), as in the field rules; an empty op is rejected after the match.
_GOLDEN_NAME = re.compile(r"([.A-Za-z0-9_-]*?)\.([0-9]+)(?:\.([0-9]+))?\.npy\Z")
_DECODED = ("input", "output")  # ….input.0.npy / ….output.0.npy are decoded NPU files, not goldens


def is_dump_name(name: str) -> bool:
    """``parse_dump_name(name) is not None`` for a bare file name (no folder part), without
    building the result."""
    return _DUMP_NAME.match(name) is not None


def dump_names_in(names: Iterable[str]) -> list[str]:
    """The bare file names among ``names`` that are dump names (``is_dump_name``), in order."""
    return list(filter(_DUMP_NAME.match, names))


# what a dump folder holds beside dumps: decoded siblings, stats, mapping.csv, notes
_NOT_DUMP_SUFFIXES = (".npy", ".json", ".csv", ".txt", ".log", ".md", ".pb", ".pbtxt", ".png", ".svg",
                      ".html", ".gz", ".tar", ".zip", ".ini", ".yaml", ".yml", ".sh", ".py")


def unparseable_dump_names(names: Iterable[str]) -> list[str]:
    """Names that look like dump names (``type.name.fields...``, no other file's suffix) but do
    not parse (a field that is not all digits, too few fields): a renamed or damaged dump, said
    with a count rather than skipped without a word."""
    return [n for n in names if n.count(".") >= 2 and not n.isdigit() and _DUMP_NAME.match(n) is None
            and not n.lower().endswith(_NOT_DUMP_SUFFIXES) and not n.startswith(".")]


_dump_name = DumpName._make  # tuple.__new__ directly: a third of the cost of DumpName(...)
_golden_name = GoldenName._make


def _parse_dump_base(base: str) -> DumpName | None:
    if _DUMP_NAME.match(base) is None:
        return None
    parts = base.split(".")
    n = len(parts)
    if n == 5:  # the normal form
        return _dump_name((parts[0], parts[1], int(parts[2]), int(parts[3]), int(parts[4]),
                           None, None, None, None, 5))
    nums = [int(p) for p in parts[2:]]
    stream = task_type = context = thread = device = None
    if n == 4:
        task, ts = nums
    elif n == 8:
        task, ts, task_type, context, thread, device = nums
    elif n >= 9:
        task, stream, ts, task_type, context, thread, device = nums[:7]
    else:  # 6, 7 fields
        task, stream, ts = nums[:3]
    return _dump_name((parts[0], parts[1], task, stream, ts, task_type, context, thread, device, n))


def parse_dump_name(filename: str) -> DumpName | None:
    """Fields of an NPU dump file name, or ``None`` when the name is not a dump."""
    return _parse_dump_base(os.path.basename(filename))


def parse_dump_names(names: Iterable[str]) -> list[DumpName | None]:
    """``parse_dump_name`` of each bare file name (no folder part), for many names at once."""
    return list(map(_parse_dump_base, names))


def _parse_golden_base(base: str) -> GoldenName | None:
    m = _GOLDEN_NAME.match(base)
    if m is None:
        return None
    op, index, ts = m.groups()
    if not op or (op.endswith(_DECODED) and op.rpartition(".")[2] in _DECODED):
        return None
    return _golden_name((op, int(index), None if ts is None else int(ts)))


def parse_golden_name(filename: str) -> GoldenName | None:
    """``{op}.{idx}.{ts}.npy`` or ``{op}.{idx}.npy``; ``None`` for anything else.

    Two trailing numbers are read as (index, timestamp), as both reference tools do. Decoded NPU
    files (``….input.0.npy`` / ``….output.0.npy``) are rejected so they are not taken for goldens.
    """
    return _parse_golden_base(os.path.basename(filename))


def parse_golden_names(names: Iterable[str]) -> list[GoldenName | None]:
    """``parse_golden_name`` of each bare file name (no folder part), for many names at once."""
    return list(map(_parse_golden_base, names))


def golden_keys_in(names: Iterable[str]) -> list[tuple[str, str, int]]:
    """``(name, op_name, output_index)`` for each golden file name among bare ``names``, in order:
    what start-up needs to count tensors, at half the cost of parsing the names."""
    found = []
    for m in filter(None, map(_GOLDEN_NAME.match, names)):
        op, index = m.group(1, 2)
        if op and not (op.endswith(_DECODED) and op.rpartition(".")[2] in _DECODED):
            found.append((m.string, op, int(index)))
    return found


def golden_names_counted(names: list[str]) -> tuple[list[str], int]:
    """(the golden file names among bare ``names``, in order; how many distinct (op, index) keys
    they hold): what start-up needs, as ``golden_keys_in`` gives it. A folder of golden files
    only (the usual one) is read by one regex pass over its joined names, no object per name
    but the key; other folders, and names at the rules' corners (decoded-file suffixes, an
    empty op), take ``golden_keys_in``'s way."""
    joined = "\n".join(names)
    framed = "\n" + joined  # each name after a "\n": "\n" + text is a name's start
    if joined.count("\n") == len(names) - 1 and not any(corner in framed for corner in _CORNERS):
        keys = _GOLDEN_LINES.findall(joined)  # "op.index" of each golden name, index as written
        if len(keys) == len(names):
            if _LEADING_ZERO.search(joined):  # maybe "x.01" and "x.1": one index
                return list(names), len({(op, int(index)) for op, _, index in map(_rpartition_dot, keys)})
            return list(names), len(set(keys))
    keyed = golden_keys_in(names)
    return [n for n, _, _ in keyed], len({(op, index) for _, op, index in keyed})


# _GOLDEN_NAME for one line of names joined by "\n" (no name holds one: checked before use)
# and its key as one string (an op ends where the all-digit index starts: the pair is recovered)
_GOLDEN_LINES = re.compile(r"^([.A-Za-z0-9_-]*?\.[0-9]+)(?:\.[0-9]+)?\.npy$", re.MULTILINE)
_rpartition_dot = operator.methodcaller("rpartition", ".")
_CORNERS = ("\n.", ".input.", ".output.", "\ninput.", "\noutput.")  # an empty op, a decoded file
_LEADING_ZERO = re.compile(r"\.0[0-9]")


def read_mapping_csv(path: str | os.PathLike) -> dict[str, str]:
    """``mapping.csv`` of a dump directory: on-disk (hashed, numeric) name -> real dump name.

    Two columns, no header. Blank lines are skipped; any other row shape is a FormatError.
    """
    try:
        with os.fdopen(open_regular(path), newline="", encoding="utf-8") as f:   # no FIFO hang
            rows = list(csv.reader(f))
    except UnicodeDecodeError:
        raise FormatError(path, "mapping file is not UTF-8 text") from None
    except csv.Error as e:
        raise FormatError(path, f"malformed mapping file: {clipped(e)}") from None
    except OSError as e:
        raise FormatError(path, f"cannot read: {e.strerror or e}") from None
    mapping: dict[str, str] = {}
    for line_no, row in enumerate(rows, 1):
        if not row or all(not cell.strip() for cell in row):
            continue
        if len(row) != 2 or not row[0].strip() or not row[1].strip():
            raise FormatError(path, f"line {line_no}: expected 2 columns 'disk_name,real_name', got {len(row)}")
        mapping[row[0].strip()] = row[1].strip()
    return mapping
