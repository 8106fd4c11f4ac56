"""The statistics-mode CSV from columns (:class:`.column_pairing.ColumnPairing`): the chunks of
:mod:`.stats_table` made from both sides' arrays instead of row objects -- the same cells, the
same verdicts (:func:`.stats_table.judged_columns`), the same bytes (tests compare the paths).

A chunk is ``CHUNK`` target rows or a little more (never splitting an entry): every diff and
relative error of its simple rows (float tensors with four finite statistics on both sides) is
one array expression; the other rows take msprobe's per-cell rules (:func:`.engine._stats_diff`
on the texts the reader kept for them).
"""

from __future__ import annotations

import csv
import os
import signal
import struct
import tempfile
from typing import Callable, Iterator

import numpy as np

from precision_shell.formats.msprobe.columns import GRAD_TEXTS, NONE_LEAF, StatsColumns
from .cells import csv_line_bytes
from .column_pairing import ColumnPairing
from precision_shell.atomic_write import write_atomic
from .csv_layout import header
from .engine import _cell
from .tensor_metrics import N_A
from .stats_table import CHUNK, _csv_column, _texts, diff_texts, judged_columns, odd_row_cells
from .stats_verdicts import _SUMMARY

_N_A_CELLS = [(N_A, "na", None)] * 4


def _bounds(row_entry: np.ndarray, size: int) -> list[tuple[int, int]]:
    """(start, end) of consecutive slices of about ``size`` rows cut at entry starts."""
    n = len(row_entry)
    starts = np.flatnonzero(np.r_[True, row_entry[1:] != row_entry[:-1]]) if n else np.zeros(0, int)
    cuts, at = [], 0
    while at < n:
        end = at + size
        if end >= n:
            end = n
        else:
            end = int(starts[np.searchsorted(starts, end)]) if end <= starts[-1] else n
        cuts.append((at, end))
        at = end
    return cuts


def _cells(side: StatsColumns, row: int, ok: bool, values: list[float]):
    """msprobe's cells (text, class, number) of one row's statistics."""
    if ok:
        return [(repr(v), "num", v) for v in values]
    return [_cell(text) for text in side.cells[row]]


def _summary_texts(values: np.ndarray, joined: list[str] | None) -> list[list[str]]:
    """The four summary columns of ``values``: ``repr`` of each, except in rows whose texts
    come joined from dump.json (``joined[i]``): "" there (the line takes the joined text)."""
    if joined is None:
        return _texts(values)
    n = len(joined)
    columns = [[""] * n for _ in range(4)]
    for i in [i for i, text in enumerate(joined) if not text]:
        for k, value in enumerate(values[i].tolist()):
            columns[k][i] = repr(value)
    return columns


def _with_n_a(texts) -> np.ndarray:
    """A text table as an object array with N/A appended (index len(texts))."""
    table = np.empty(len(texts) + 1, dtype=object)
    table[:-1] = list(texts)
    table[-1] = N_A
    return table


def _column_chunk(pairing: ColumnPairing, lo: int, hi: int) -> tuple[list[list[str]], list[bool], list[float],
                                                                     list[str] | None, list[str] | None]:
    """Columns up to Requires_grad Consistent of target rows ``lo:hi``, which rows were simple,
    each row's NormRelativeErr fraction (as :func:`.stats_table._chunk_columns`), and each side's
    summary texts copied from dump.json (``StatsColumns.summary``; None: none): in those rows
    the four summary cells are "" and :func:`_lines` puts the copied text instead. Only simple
    rows have them, and the verdicts read no summary cell of a row whose side is simple."""
    t, g = pairing.target, pairing.golden
    found = pairing.golden_row[lo:hi]
    has = found >= 0
    at = np.where(has, found, 0)
    t_vals = t.stats[lo:hi]
    g_vals = g.stats[at] if len(g) else np.full_like(t_vals, np.nan)
    t_ok = t.simple[lo:hi]
    g_ok = (g.simple[at] & has) if len(g) else np.zeros_like(has)
    diffs, rels, same, rel = diff_texts(t_vals, g_vals)
    t_joined = t.summary_slice(lo, hi)
    g_joined = g.summary_rows(at) if len(g) else None
    if g_joined is not None:
        g_joined = [text if h else "" for text, h in zip(g_joined, has.tolist())]
    t_summary, g_summary = _summary_texts(t_vals, t_joined), _summary_texts(g_vals, g_joined)
    simple = t_ok & g_ok
    percent = np.where(simple & ~same[:, 3] & (g_vals[:, 3] != 0), rel[:, 3] / 100, -1.0).tolist()
    t_ok_list, g_ok_list, has_list = t_ok.tolist(), g_ok.tolist(), has.tolist()
    for i in np.flatnonzero(~simple).tolist():     # msprobe's per-cell rules for the rest
        t_stat = _cells(t, lo + i, t_ok_list[i], t_vals[i].tolist())
        g_stat = _cells(g, int(found[i]), g_ok_list[i], g_vals[i].tolist()) if has_list[i] else None
        odd_row_cells(i, t_stat, g_stat, t_ok_list[i], g_ok_list[i], (t_summary, g_summary, diffs, rels, percent))
    # text columns: codes into each side's table with N/A appended (numpy takes, no per-row Python)
    t_table, grad_table = _with_n_a(t.texts), _with_n_a(GRAD_TEXTS)
    na_t, na_grad = len(t_table) - 1, len(grad_table) - 1
    n_grads = grad_table[t.grad[lo:hi]].tolist()
    g_names = [n if h else N_A for n, h in zip(g.names.take(at), has_list)] if len(g) else [N_A] * len(has_list)
    if len(g):
        g_table = _with_n_a(g.texts)
        na_g = len(g_table) - 1
        b_dtypes = g_table[np.where(has & (g.kind[at] != NONE_LEAF), g.dtype_text[at], na_g)].tolist()
        b_shapes = g_table[np.where(has, g.shape[at], na_g)].tolist()
        b_grads = grad_table[np.where(has, g.grad[at], na_grad)].tolist()
    else:
        b_dtypes = b_shapes = b_grads = [N_A] * len(has_list)
    n_dtypes = t_table[np.where(t.kind[lo:hi] != NONE_LEAF, t.dtype_text[lo:hi], na_t)].tolist()
    n_shapes = t_table[t.shape[lo:hi]].tolist()
    return [t.names[lo:hi], g_names, n_dtypes, b_dtypes, n_shapes, b_shapes, n_grads, b_grads,
            *diffs, *rels, *t_summary, *g_summary,
            ["True" if a == b else "False" for a, b in zip(n_grads, b_grads)]], simple.tolist(), percent, \
        t_joined, g_joined


def column_chunks(pairing: ColumnPairing, bounds: list[tuple[int, int]], joined: list | None = None) -> Iterator:
    """What :func:`.stats_table.judged_columns` takes, for the slices ``bounds`` of target rows;
    each slice's (target, golden) copied summary texts appended to ``joined``."""
    t = pairing.target
    row_entry = t.row_entry
    for lo, hi in bounds:
        cols, simple, percent, t_joined, g_joined = _column_chunk(pairing, lo, hi)
        if joined is not None:
            joined.append((t_joined, g_joined))
        entries = row_entry[lo:hi]
        at = np.flatnonzero(np.r_[True, entries[1:] != entries[:-1]])
        starts, names = at.tolist(), t.entry_names
        ends = starts[1:] + [hi - lo]
        yield cols, simple, percent, [(s, e, names[i]) for s, e, i in zip(starts, ends, entries[at].tolist())]


def _texts_of(pairing: ColumnPairing, bounds, stack, dtype_is_error) -> Iterator[tuple[bytes, int]]:
    """(CSV lines as UTF-8, rows) of each slice."""
    joined: list = []
    for cols in judged_columns(column_chunks(pairing, bounds, joined), stack, dtype_is_error):
        yield _lines(cols, *joined.pop(0)), len(cols[0])


def _lines(cols: list[list[str]], t_joined: list[str] | None, g_joined: list[str] | None) -> bytes:
    """:func:`.stats_table.csv_lines` of a slice whose summary cells are "" where a side's
    texts were copied from dump.json (numbers: no cell of them is quoted or neutralised)."""
    merged = {at: _merged_summary(cols[at:at + 4], joined)
              for at, joined in ((_SUMMARY, t_joined), (_SUMMARY + 4, g_joined)) if joined is not None}
    out, final, k = [], set(), 0
    while k < len(cols):
        if k in merged:      # four cells as one, written as they are: the copied texts hold their commas
            final.add(len(out))
            out.append(merged[k])
            k += 4
        else:
            out.append(cols[k])
            k += 1
    return csv_line_bytes(out, frozenset(final), _csv_column)


def _merged_summary(block: list[list[str]], joined: list[str]) -> list[str]:
    """The four summary cells of each row as one text: the copied one, or (a row without) its
    four cells as the CSV writes them (each column guarded and quoted whole, as a column of the
    chunk: whether a cell is guarded depends on its column), joined by ","."""
    missing = [i for i, text in enumerate(joined) if not text]
    if not missing:
        return joined
    a, b, c, d = (_csv_column(column) for column in block)
    merged = list(joined)
    for i in missing:
        merged[i] = f"{a[i]},{b[i]},{c[i]},{d[i]}"
    return merged


def write_column_csv(path: str | os.PathLike, pairing: ColumnPairing, stack: dict[str, tuple[str, ...]] | None = None,
                     dtype_is_error: bool = False, advance: Callable[[int], None] | None = None,
                     chunk: int = CHUNK, processes: int = 2) -> None:
    """msprobe's statistics-mode CSV of a column pairing, chunk by chunk. With ``processes`` 2
    a forked child formats the second half of the rows while this process formats the first
    (the floats' ``repr`` is most of the work, and it holds the GIL), then sends its lines."""
    bounds = _bounds(pairing.target.row_entry, chunk)
    half = len(pairing.golden_row) // 2
    split = next((k for k, (lo, _) in enumerate(bounds) if lo >= half), len(bounds))
    helper = _Helper.start(pairing, bounds[split:], stack, dtype_is_error, os.path.dirname(os.path.abspath(path))) \
        if processes > 1 and split < len(bounds) else None
    mine = bounds if helper is None else bounds[:split]

    def write(f) -> None:
        csv.writer(f).writerow(header("statistics"))
        f.flush()
        for data, rows in _texts_of(pairing, mine, stack, dtype_is_error):
            f.buffer.write(data)
            if advance is not None:
                advance(rows)
        if helper is None:
            return
        f.buffer.flush()
        got = 0
        for rows in helper.copy_results(f.fileno()):
            got += 1
            if advance is not None:
                advance(rows)
        if not helper.complete:       # the child failed: its slices from where it stopped, here
            for data, rows in _texts_of(pairing, bounds[split + got:], stack, dtype_is_error):
                f.buffer.write(data)
                if advance is not None:
                    advance(rows)

    try:
        write_atomic(path, write)
    finally:
        if helper is not None:
            helper.stop()


class _Helper:
    """A forked child formatting slices of the CSV into an unnamed temporary file beside the CSV
    (``spill``: its half of the lines, ~70 MB at 100k entries, in the page cache rather than in
    either process's memory while this process formats its own half), and announcing each slice
    through the pipe as (bytes, rows), then (0, 0). :meth:`copy_results` copies the slices into
    the CSV in the kernel (``os.sendfile``)."""
    _HEAD = struct.Struct("<QQ")

    def __init__(self, pid: int, fd: int, spill):
        self.pid, self.pipe, self.spill, self.complete = pid, os.fdopen(fd, "rb"), spill, False

    @classmethod
    def start(cls, pairing: ColumnPairing, bounds, stack, dtype_is_error, folder: str) -> "_Helper | None":
        if not hasattr(os, "fork"):
            return None
        try:
            spill = tempfile.TemporaryFile(dir=folder)
        except OSError:
            return None
        read_fd, write_fd = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            for fd in (read_fd, write_fd):
                os.close(fd)
            spill.close()
            return None
        if pid == 0:
            code = 1
            try:
                signal.signal(signal.SIGINT, signal.SIG_IGN)    # the parent stops it (stop())
                os.close(read_fd)
                with os.fdopen(write_fd, "wb", buffering=0) as pipe:
                    for data, rows in _texts_of(pairing, bounds, stack, dtype_is_error):
                        spill.write(data)
                        spill.flush()
                        pipe.write(cls._HEAD.pack(len(data), rows))
                    pipe.write(cls._HEAD.pack(0, 0))
                code = 0
            finally:
                os._exit(code)
        os.close(write_fd)
        return cls(pid, read_fd, spill)

    def copy_results(self, out_fd: int) -> Iterator[int]:
        """Each slice the child wrote, copied to ``out_fd`` at its position; yields its rows."""
        offset, spill_fd = 0, self.spill.fileno()
        while True:
            head = self.pipe.read(self._HEAD.size)
            if len(head) != self._HEAD.size:
                return
            size, rows = self._HEAD.unpack(head)
            if size == 0 and rows == 0:
                self.complete = True
                return
            end = offset + size
            while offset < end:
                try:
                    sent = os.sendfile(out_fd, spill_fd, offset, end - offset)
                except OSError:      # no file-to-file sendfile here: through a buffer
                    sent = os.write(out_fd, os.pread(spill_fd, min(end - offset, 1 << 24), offset))
                if sent <= 0:
                    return
                offset += sent
            yield rows

    def stop(self) -> None:
        """End the child (done, or interrupted here) and reap it."""
        self.pipe.close()
        self.spill.close()
        if self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except OSError:
                pass
            os.waitpid(self.pid, 0)
            self.pid = None
