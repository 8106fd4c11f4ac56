"""Opening a statistics ``dump.json`` in one C pass (``_stats_scan.c``): the entries, the header
and the statistics columns, without parsing the document.

A 100k-entry statistics dump.json is 93 MB; ``json.loads`` of it and the leaf checks cost ~2.5 s
and ~300 MB a side, and the columns ``vc`` pairs ~0.9 s more. The scanner walks the bytes once:
an entry whose leaves are all the common float leaf (see the C file) goes into the columns
there and becomes an :class:`.dump.Entry` holding only its byte span (its JSON parsed
when its leaves are first asked for; it gives no warning and names no file, so nothing at
open needs it); any other entry is parsed alone (``json.loads`` of its span) and read as the
whole-document reader reads it (``take_body``: the checks, warnings and files), its rows added
by the Python builder in its place. The result is the whole-document reader's by construction;
bytes that are not the plain layout (a cut, a BOM, bytes that are not UTF-8, a name twice, ...)
give None and the caller reads the file as before.
"""

from __future__ import annotations

import json
import mmap
import os
import re
from dataclasses import dataclass

from ...errors import FormatError
from ..input_files import open_regular
from .columns import StatsColumns, _Builder, _scanner, scanner_usable
from .entry_list import EntryList

_STATISTICS = re.compile(rb'"task"\s*:\s*"statistics"')


@dataclass
class ScannedDump:
    header: dict             # the top-level members other than "data", parsed
    entries: EntryList       # in dump order: plain ones made into Entry objects when read, the others take_body's
    columns: StatsColumns    # the statistics columns of those entries (the columns module)


class _NotPlain(Exception):
    """An entry's span that json.loads refuses (the whole-document reader decides)."""


class JsonFile:
    """The dump.json the plain entries' bodies are read from when first needed (``os.pread`` of
    their spans): the file bytes are not kept. FormatError when it changed since it was read."""

    def __init__(self, path: str, stat: os.stat_result):
        self.path, self._stamp, self._fd = path, (stat.st_size, stat.st_mtime_ns, stat.st_ino), None

    def read(self, start: int, end: int) -> bytes:
        try:
            if self._fd is None:
                self._fd = open_regular(self.path)      # never a FIFO planted since
            stat = os.fstat(self._fd)
            if (stat.st_size, stat.st_mtime_ns, stat.st_ino) != self._stamp:
                raise FormatError(self.path, "changed since the dump was opened; open it again")
            data = os.pread(self._fd, end - start, start)
        except OSError as e:
            raise FormatError(self.path, f"cannot read: {e.strerror or e}") from None
        if len(data) != end - start:
            raise FormatError(self.path, "cut short since the dump was opened; open it again")
        return data

    def __del__(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass


_RELEASE = 8 << 20      # bytes scanned between giving their pages back (each is resident RSS/PSS until then)


def scan_statistics(path: str, make_entry, take_body) -> ScannedDump | None:
    """The statistics dump.json at ``path`` read by the scanner, through a read-only map whose
    pages are given back as the scan passes them (no copy of the file stays in memory).
    ``make_entry(name, start, end, leaves, source)``: the Entry of a plain entry (its body is
    ``source.read(start, end)``, a :class:`JsonFile`), called when the entry is first read
    (:class:`.entry_list.EntryList`); ``take_body(name, body)``: the Entry of
    another entry's parsed body, or None when it is skipped. None when the scanner is not used
    or not fit for this file (then nothing was changed)."""
    if not scanner_usable():
        return None
    try:
        with os.fdopen(open_regular(path), "rb") as file:     # a planted FIFO must not hang start-up
            stat = os.fstat(file.fileno())
            if stat.st_size == 0:
                return None
            with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as view:
                return _scan(view, JsonFile(path, stat), make_entry, take_body)
    except (OSError, ValueError):     # unreadable, or gone: the whole-document reader words it
        return None


def _scan(blob: mmap.mmap, source: JsonFile, make_entry, take_body) -> ScannedDump | None:
    if not _STATISTICS.search(blob, 0, 4096):
        return None
    builder = _Builder()
    entries = EntryList(lambda name, start, end, leaves: make_entry(name, start, end, leaves, source))
    skipped: list[str] = []      # names of entries take_body skipped (a name twice: not ours)
    released = [0]
    can_release = getattr(blob, "madvise", None) and getattr(mmap, "MADV_DONTNEED", None)

    def release(name_start: int) -> None:      # pages behind this entry: done
        upto = (name_start - 1) // mmap.PAGESIZE * mmap.PAGESIZE
        if upto > released[0]:
            blob.madvise(mmap.MADV_DONTNEED, released[0], upto - released[0])
            released[0] = upto

    def on_entry(name, name_start, name_end, start, end, leaves):
        """An entry the scanner did not take (it keeps the plain ones in ``entries`` itself)."""
        if name is None:         # escapes in the name: JSON decodes it
            name = _loads(blob[name_start - 1:name_end + 1])
        if leaves >= 0:
            entries.add_span(name, start, end, leaves)
            return
        entry = take_body(name, _loads(blob[start:end]))
        if entry is None:
            skipped.append(name)
            return
        entries.append(entry)
        builder.add_entry(entry.name, entry.kind, entry.leaf_sources(), entry.tensor_dir)

    try:
        found = _scanner.scan(blob, builder, on_entry,
                              (*entries.scan_targets(), release if can_release else None, _RELEASE))
        # json.loads keeps the last of a name; bytes that are not ASCII: whether they are UTF-8
        # is the whole-document reader's question (it reads bad bytes member by member)
        names = entries.names + skipped
        if found is None or len(set(names)) != len(names) or found[2]:
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
