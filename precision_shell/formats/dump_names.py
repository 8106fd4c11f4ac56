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
import os
import re
from typing import NamedTuple

from ..errors import FormatError

_NAME_FIELD = re.compile(r"[A-Za-z0-9_-]+\Z")
_GOLDEN_OP = re.compile(r"[.A-Za-z0-9_-]+\Z")
_ESCAPED_CHARS = str.maketrans({".": "_", "/": "_", "\\": "_", " ": "_"})


def _is_number(text: str) -> bool:
    # isascii first: str.isdigit() also accepts e.g. superscripts, which int() rejects
    return text.isascii() and text.isdigit()


# NamedTuples, not dataclasses: a workspace has 10^5 of them and the start-up cache unpickles
# tuples several times faster.
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


def parse_dump_name(filename: str) -> DumpName | None:
    """Fields of an NPU dump file name, or ``None`` when the name is not a dump."""
    parts = os.path.basename(filename).split(".")
    n = len(parts)
    if n < 4 or not _NAME_FIELD.match(parts[0]) or not _NAME_FIELD.match(parts[1]):
        return None
    numbers = parts[2:]
    if not all(_is_number(p) for p in numbers):
        return None
    nums = [int(p) for p in numbers]
    stream = task_type = context = thread = device = None
    if n == 4:
        task, ts = nums
    elif n == 8:
        task, ts, task_type, context, thread, device = nums
    elif n >= 9:
        task, stream, ts, task_type, context, thread, device = nums[:7]
    else:  # 5, 6, 7 fields
        task, stream, ts = nums[:3]
    return DumpName(parts[0], parts[1], task, stream, ts, task_type, context, thread, device, n)


def parse_golden_name(filename: str) -> GoldenName | None:
    """``{op}.{idx}.{ts}.npy`` or ``{op}.{idx}.npy``; ``None`` for anything else.

    Two trailing numbers are read as (index, timestamp), as both reference tools do. Decoded NPU
    files (``….input.0.npy`` / ``….output.0.npy``) are rejected so they are not taken for goldens.
    """
    base = os.path.basename(filename)
    if not base.endswith(".npy"):
        return None
    parts = base[: -len(".npy")].split(".")
    if len(parts) >= 3 and _is_number(parts[-1]) and _is_number(parts[-2]):
        op_parts, index, ts = parts[:-2], int(parts[-2]), int(parts[-1])
    elif len(parts) >= 2 and _is_number(parts[-1]):
        op_parts, index, ts = parts[:-1], int(parts[-1]), None
    else:
        return None
    if op_parts[-1] in ("input", "output"):
        return None
    op = ".".join(op_parts)
    if not op or not _GOLDEN_OP.match(op):
        return None
    return GoldenName(op, index, ts)


def read_mapping_csv(path: str | os.PathLike) -> dict[str, str]:
    """``mapping.csv`` of a dump directory: on-disk (hashed, numeric) name -> real dump name.

    Two columns, no header. Blank lines are skipped; any other row shape is a FormatError.
    """
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
    except UnicodeDecodeError:
        raise FormatError(path, "mapping file is not UTF-8 text") from None
    except csv.Error as e:
        raise FormatError(path, f"malformed mapping file: {e}") from None
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
