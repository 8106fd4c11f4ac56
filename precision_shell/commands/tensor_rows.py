"""Printing every value of a big tensor (``pt -a``) with each row's index in front, as tfdbg does
(``[12, :]``), and the window around one element (``pt X --at I,J``).

``-a`` formats the rows in chunks of about :data:`CHUNK_ELEMENTS` values through numpy's own
printing, so a 400k-element tensor shows a progress bar and Ctrl-C keeps the rows already done.
Columns line up within a chunk (numpy picks one width per call), and every row carries its index.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from precision_shell.errors import CommandError

CHUNK_ELEMENTS = 1 << 14
WINDOW_ROWS, WINDOW_COLUMNS = 3, 4      # --at: rows above/below, values left/right of the element


@dataclass
class Rows:
    lines: list[str]
    rows_done: int
    rows_total: int
    interrupted: bool = False


def _prefix(index: tuple[int, ...], tail: str) -> str:
    return "[" + ", ".join([str(i) for i in index] + [tail]) + "]"


def indexed_rows(array: np.ndarray, fmt: Callable[[np.ndarray, int], str], width: int,
                 progress: Any, max_lines: int = 0) -> Rows:
    """Every value of ``array`` (ndim >= 1), one row of the last axis after another, each row's
    first line prefixed with its index (``[3, 1, :]``; 1-D: the first element's, ``[120]``).
    ``fmt(chunk, width)`` is numpy's printing of a chunk; ``max_lines`` (0: all) stops early."""
    if array.ndim == 1:
        pad = len(f"[{max(0, array.shape[0] - 1)}]")

        def emit_flat(start: int, stop: int, lines: list[str]) -> None:
            position = start
            for line in fmt(array[start:stop], max(20, width - pad - 1))[1:-1].split("\n"):
                line = line[1:] if line.startswith(" ") else line
                lines.append(f"{f'[{position}]'.ljust(pad)} {line}")
                position += len(line.split())
        return _in_chunks(array.shape[0], CHUNK_ELEMENTS, emit_flat, progress, max_lines)
    lead = array.shape[:-1]
    rows2d = array.reshape(-1, array.shape[-1])
    pad = len(_prefix(tuple(d - 1 for d in lead), ":"))

    def emit(start: int, stop: int, lines: list[str]) -> None:
        chunk = rows2d[start:stop]
        for k, row in enumerate(_split_rows(fmt(chunk, max(20, width - pad - 1)), len(chunk))):
            index = tuple(int(i) for i in np.unravel_index(start + k, lead))
            lines.append(f"{_prefix(index, ':').ljust(pad)} {row[0]}")
            lines += [f"{' ' * pad} {line}" for line in row[1:]]
    per_chunk = max(1, CHUNK_ELEMENTS // max(1, array.shape[-1]))
    return _in_chunks(rows2d.shape[0], per_chunk, emit, progress, max_lines)


def _in_chunks(total: int, per_chunk: int, emit: Callable[[int, int, list[str]], None], progress: Any,
               max_lines: int) -> Rows:
    """``emit(start, stop, lines)`` for each chunk of ``total`` rows, with a progress bar; Ctrl-C
    keeps the chunks done, ``max_lines`` (0: all) stops after the chunk that reaches it."""
    lines: list[str] = []
    done = 0
    with progress("formatting values", math.ceil(total / per_chunk)) as bar:
        try:
            for start in range(0, total, per_chunk):
                stop = min(total, start + per_chunk)
                emit(start, stop, lines)
                done = stop
                bar.advance()
                if max_lines and len(lines) >= max_lines:
                    break
        except KeyboardInterrupt:
            return Rows(lines, done, total, interrupted=True)
    return Rows(lines, done, total)


def _split_rows(text: str, count: int) -> list[list[str]]:
    """numpy's text of a 2-D chunk (``[[a b]\\n [c d]]``) as each row's lines, outer brackets off."""
    body = text[1:-1].split("\n")
    rows: list[list[str]] = []
    for line in body:
        line = line[1:] if line.startswith(" ") else line   # rows after the first: one space in
        if line.startswith("["):
            rows.append([line])
        elif rows:
            rows[-1].append(line)
    if len(rows) != count:      # not numpy's usual layout: never print rows under wrong indices
        raise ValueError(f"expected {count} rows, found {len(rows)}")
    return rows


# ---------------------------------------------------------------------------------------------
# --at I,J

def parse_index(text: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """``"3,-1"`` -> (3, shape[1] - 1): one integer per axis, negatives from the end."""
    try:
        index = [int(part) for part in text.replace(" ", "").strip("[]()").split(",") if part != ""]
    except ValueError:
        raise CommandError(f"--at {text}: give one integer per axis, e.g. --at 3,7") from None
    if len(index) != len(shape):
        raise CommandError(f"--at {text}: the tensor has {len(shape)} ax{'e' if len(shape) != 1 else 'i'}s "
                           f"{tuple(shape)}; give {len(shape)} indices")
    out = []
    for axis, (i, n) in enumerate(zip(index, shape)):
        if not -n <= i < n:
            raise CommandError(f"--at {text}: index {i} is outside axis {axis} (size {n})")
        out.append(i % n)
    return tuple(out)


@dataclass
class Window:
    index: tuple[int, ...]
    rows: tuple[int, int]           # second-to-last axis span (1-D: (0, 1))
    columns: tuple[int, int]        # last axis span
    values: np.ndarray              # 2-D: the window
    lines: list[str]                # formatted, the element wrapped in the mark characters


def window_around(array: np.ndarray, index: tuple[int, ...], element_text: Callable[[Any], str],
                  mark: tuple[str, str]) -> Window:
    """The values around ``array[index]``: WINDOW_ROWS rows either side on the second-to-last
    axis, WINDOW_COLUMNS values either side on the last, the other axes fixed at ``index``."""
    last = index[-1]
    c0, c1 = max(0, last - WINDOW_COLUMNS), min(array.shape[-1], last + WINDOW_COLUMNS + 1)
    if array.ndim == 1:
        r0, r1, block, lead = 0, 1, array[None, c0:c1], ()
    else:
        row = index[-2]
        r0, r1 = max(0, row - WINDOW_ROWS), min(array.shape[-2], row + WINDOW_ROWS + 1)
        lead = index[:-2]
        block = array[lead + (slice(r0, r1), slice(c0, c1))]
    fmt = element_text(block)
    labels = []
    for r in range(r0, r1):
        rows_index = lead + ((r,) if array.ndim > 1 else ())
        labels.append(_prefix(rows_index, f"{c0}:{c1}"))
    pad = max(len(label) for label in labels)
    lines = []
    for k, r in enumerate(range(r0, r1)):
        cells = []
        for c in range(c0, c1):
            text = fmt(block[k, c - c0])
            here = (array.ndim == 1 or r == index[-2]) and c == last
            cells.append(f"{mark[0]}{text}{mark[1]}" if here else f"{text} ")
        lines.append(f"{labels[k].ljust(pad)} " + " ".join(cells))
    return Window(index, (r0, r1), (c0, c1), block, lines)
