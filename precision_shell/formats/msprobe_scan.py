"""Opening a statistics ``dump.json`` in one C pass (``_stats_scan.c``): the entries, the header
and the statistics columns, without parsing the document.

A 100k-entry statistics dump.json is 93 MB; ``json.loads`` of it and the leaf checks cost ~2.5 s
and ~300 MB a side, and the columns ``vc`` pairs ~0.9 s more. The scanner walks the bytes once:
an entry whose leaves are all the common float leaf (see the C file) goes into the columns
there and becomes an :class:`.msprobe_dump.Entry` holding only its byte span (its JSON parsed
when its leaves are first asked for; it gives no warning and names no file, so nothing at
open needs it); any other entry is parsed alone (``json.loads`` of its span) and read as the
whole-document reader reads it (``take_body``: the checks, warnings and files), its rows added
by the Python builder in its place. The result is the whole-document reader's by construction;
bytes that are not the plain layout (a cut, a BOM, bytes that are not UTF-8, a name twice, ...)
give None and the caller reads the file as before.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from .msprobe_columns import StatsColumns, _Builder, _scanner, scanner_usable

_STATISTICS = re.compile(rb'"task"\s*:\s*"statistics"')


@dataclass
class ScannedDump:
    header: dict             # the top-level members other than "data", parsed
    entries: list            # Entry objects (or what take_body made), in dump order
    columns: StatsColumns    # the statistics columns of those entries (msprobe_columns)


class _NotPlain(Exception):
    """An entry's span that json.loads refuses (the whole-document reader decides)."""


def scan_statistics(blob: bytes, make_entry, take_body) -> ScannedDump | None:
    """``make_entry(name, start, end, leaves)``: the Entry of a plain entry (its body is
    ``blob[start:end]``); ``take_body(name, body)``: the Entry of another entry's parsed body, or
    None when it is skipped. None when the scanner is not used or not fit for these bytes."""
    if not scanner_usable() or not _STATISTICS.search(blob, 0, 4096) or not _utf8(blob):
        return None
    builder = _Builder()
    entries, names = [], []

    def on_entry(name, name_start, name_end, start, end, leaves):
        if name is None:         # escapes in the name: JSON decodes it
            name = _loads(blob[name_start - 1:name_end + 1])
        names.append(name)
        if leaves >= 0:
            entries.append(make_entry(name, start, end, leaves))
            return
        entry = take_body(name, _loads(blob[start:end]))
        if entry is not None:
            entries.append(entry)
            builder.add_entry(entry.name, entry.kind, entry.leaf_sources(), entry.tensor_dir)

    try:
        found = _scanner.scan(blob, builder, on_entry)
        if found is None or len(set(names)) != len(names):    # json.loads keeps the last of a name
            return None
        header = {key: _loads(blob[start:end]) for key, start, end in found[1]}
    except _NotPlain:
        return None
    return ScannedDump(header, entries, builder.finish())


def _loads(data: bytes):
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        raise _NotPlain from None


def _utf8(blob: bytes) -> bool:
    if blob.isascii():
        return True
    try:
        blob.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
