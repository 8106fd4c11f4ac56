"""The statistics-mode CSV from columns (:class:`.column_pairing.ColumnPairing`): the chunks of
:mod:`.stats_table` made from both sides' arrays instead of row objects -- the same cells, the
same verdicts (:func:`.stats_table.judged_columns`), the same bytes (tests compare the paths).

A chunk is ``CHUNK`` target rows or a little more (never splitting an entry): every diff and
relative error of its simple rows (float tensors with four finite statistics on both sides) is
one array expression; the other rows take msprobe's per-cell rules (:func:`.engine._stats_diff`
on the texts the reader kept for them).
"""

from __future__ import annotations

import os
from typing import Callable, Iterator

import numpy as np

from precision_shell.formats.msprobe_columns import GRAD_TEXTS, NONE_LEAF, StatsColumns
from .column_pairing import ColumnPairing
from .csv_layout import _SUMMARY_TEXT, _percent
from .engine import N_A, _cell, _stats_diff
from .stats_table import CHUNK, _texts, judged_columns, write_table_csv

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


def _column_chunk(pairing: ColumnPairing, lo: int, hi: int) -> tuple[list[list[str]], list[bool], list[float]]:
    """Columns up to Requires_grad Consistent of target rows ``lo:hi``, which rows were simple,
    each row's NormRelativeErr fraction (as :func:`.stats_table._chunk_columns`)."""
    t, g = pairing.target, pairing.golden
    found = pairing.golden_row[lo:hi]
    has = found >= 0
    at = np.where(has, found, 0)
    t_vals = t.stats[lo:hi]
    g_vals = g.stats[at] if len(g) else np.full_like(t_vals, np.nan)
    t_ok = t.simple[lo:hi]
    g_ok = (g.simple[at] & has) if len(g) else np.zeros_like(has)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        diff = t_vals - g_vals
        rel = np.abs(diff / g_vals * 100)
    diffs, rels = _texts(diff), [[x + "%" for x in column] for column in _texts(rel)]
    same = (t_vals == g_vals) & (np.signbit(t_vals) == np.signbit(g_vals))
    for i, k in zip(*np.nonzero(same)):
        diffs[k][i] = rels[k][i] = "0"
    for i, k in zip(*np.nonzero(~same & (g_vals == 0))):
        rels[k][i] = "inf"
    t_summary, g_summary = _texts(t_vals), _texts(g_vals)
    simple = t_ok & g_ok
    percent = np.where(simple & ~same[:, 3] & (g_vals[:, 3] != 0), rel[:, 3] / 100, -1.0).tolist()
    t_ok_list, g_ok_list, has_list = t_ok.tolist(), g_ok.tolist(), has.tolist()
    for i in np.flatnonzero(~simple).tolist():     # msprobe's per-cell rules for the rest
        t_stat = _cells(t, lo + i, t_ok_list[i], t_vals[i].tolist())
        if not t_ok_list[i]:
            for k, c in enumerate(t_stat):
                t_summary[k][i] = _SUMMARY_TEXT.get(c[0], c[0])
        if not has_list[i]:
            for k in range(4):
                g_summary[k][i] = diffs[k][i] = rels[k][i] = N_A
        else:
            g_stat = _cells(g, int(found[i]), g_ok_list[i], g_vals[i].tolist())
            computed = _stats_diff(t_stat, g_stat)
            for k in range(4):
                if not g_ok_list[i]:
                    c = g_stat[k][0]
                    g_summary[k][i] = _SUMMARY_TEXT.get(c, c)
                diffs[k][i], rels[k][i] = computed.diffs[k], computed.relative[k]
        text = rels[3][i]
        value = _percent(text) if text.endswith("%") else -1.0
        percent[i] = value if value == value else -1.0     # max() in _extreme passes NaN over
    t_texts, g_texts = t.texts, g.texts
    grads = (GRAD_TEXTS, GRAD_TEXTS)
    n_grads = [grads[0][c] for c in t.grad[lo:hi].tolist()]
    at_list = at.tolist()
    g_names = [g.names[r] if h else N_A for r, h in zip(at_list, has_list)] if len(g) else [N_A] * len(has_list)
    if len(g):
        g_kind, g_dtype = g.kind[at].tolist(), g.dtype_text[at].tolist()
        g_shape, g_grad = g.shape[at].tolist(), g.grad[at].tolist()
        b_dtypes = [N_A if not h or k == NONE_LEAF else g_texts[d] for h, k, d in zip(has_list, g_kind, g_dtype)]
        b_shapes = [g_texts[s] if h else N_A for h, s in zip(has_list, g_shape)]
        b_grads = [GRAD_TEXTS[c] if h else N_A for h, c in zip(has_list, g_grad)]
    else:
        b_dtypes = b_shapes = b_grads = [N_A] * len(has_list)
    n_dtypes = [N_A if k == NONE_LEAF else t_texts[d]
                for k, d in zip(t.kind[lo:hi].tolist(), t.dtype_text[lo:hi].tolist())]
    n_shapes = [t_texts[s] for s in t.shape[lo:hi].tolist()]
    return [t.names[lo:hi], g_names, n_dtypes, b_dtypes, n_shapes, b_shapes, n_grads, b_grads,
            *diffs, *rels, *t_summary, *g_summary,
            ["True" if a == b else "False" for a, b in zip(n_grads, b_grads)]], simple.tolist(), percent


def column_chunks(pairing: ColumnPairing, chunk: int = CHUNK) -> Iterator:
    """What :func:`.stats_table.judged_columns` takes, chunk by chunk."""
    t = pairing.target
    row_entry = t.row_entry
    for lo, hi in _bounds(row_entry, chunk):
        cols, simple, percent = _column_chunk(pairing, lo, hi)
        entries = row_entry[lo:hi]
        starts = np.flatnonzero(np.r_[True, entries[1:] != entries[:-1]]).tolist()
        ends = starts[1:] + [hi - lo]
        yield cols, simple, percent, [(s, e, t.entry_names[entries[s]]) for s, e in zip(starts, ends)]


def write_column_csv(path: str | os.PathLike, pairing: ColumnPairing, stack: dict[str, tuple[str, ...]] | None = None,
                     dtype_is_error: bool = False, advance: Callable[[int], None] | None = None,
                     chunk: int = CHUNK) -> None:
    """msprobe's statistics-mode CSV of a column pairing, chunk by chunk."""
    write_table_csv(path, judged_columns(column_chunks(pairing, chunk), stack, dtype_is_error), advance)
