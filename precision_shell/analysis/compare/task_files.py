"""The files of one ``vc`` task (:mod:`.tasks`): headers, open files and reusable buffers.

Each dump file is opened once per task and each tensor read with one ``pread`` into a buffer
of the thread; the bytes of a producer's output that later inputs of the task repeat
(aliases) are kept, or checked against those inputs at once (``check_aliases``), within
:data:`_KEEP_BUDGET`.
"""

from __future__ import annotations

import math
import os

import numpy as np

from precision_shell.analysis.compare import fused_metrics
from precision_shell.errors import PshellError
from precision_shell.formats.dump_file import DumpHeader, TensorEntry, pread_into, read_dump_header, thread_buffers
from precision_shell.formats.golden_npy import read_npy_into

# Bytes of producer outputs kept per task for the alias checks of later inputs (beyond: re-read).
_KEEP_BUDGET = 64 << 20
# Files a task keeps open (an op's dump file, its producers', goldens are opened per read).
_OPEN_FILES = 8


def _unpack_header(path: str, packed: tuple) -> DumpHeader:
    file_size, inputs, outputs = packed
    return DumpHeader(path, "", "", 0, "v2", 0, file_size,
                      [TensorEntry("input", i, *e[:5], None, None, *e[5:]) for i, e in enumerate(inputs)],
                      [TensorEntry("output", i, *e[:5], None, None, *e[5:]) for i, e in enumerate(outputs)])


class TaskFiles:
    """Headers, open files and buffers of one task: each file opened once, each tensor read with
    one pread into a reusable buffer, the raw bytes of outputs that later inputs of the task
    repeat (aliases) kept until those are checked."""

    def __init__(self, wanted: dict[tuple[str, int], int],
                 consumers: dict[tuple[str, int], list[tuple]] | None = None) -> None:
        self.headers: dict[str, DumpHeader] = {}
        self.fds: dict[str, int] = {}
        self.buffers = thread_buffers()
        self.row_buffers: list[np.ndarray] = []            # given back when the row is done
        self.wanted = wanted                               # (dump, output index) -> alias rows to come
        self.kept: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = {}   # -> (buffer, bytes)
        self.kept_bytes = 0
        self.held: list[np.ndarray] = []                   # buffers a queued pair batch reads
        self.busy: set[int] = set()                        # ids of kept buffers it reads too
        self.last_raw: tuple[np.ndarray, np.ndarray] | None = None   # raw()'s last (view, its buffer)
        # (dump, output index) -> alias rows of this task that repeat it: (row, dump, packed, index)
        self.consumers = consumers or {}
        self.checked: dict[int, int] = {}                  # alias row -> its bytes if checked same, -1 not

    def header(self, path: str, packed: tuple | None) -> DumpHeader:
        header = self.headers.get(path)
        if header is None:
            header = _unpack_header(path, packed) if packed is not None else read_dump_header(path)
            self.headers[path] = header
        return header

    def take(self, nbytes: int) -> np.ndarray:
        buf = self.buffers.take(nbytes)
        self.row_buffers.append(buf)
        return buf

    def alloc(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """``layout.restore_layout``'s output array, carved from a reusable buffer."""
        nbytes = math.prod(shape) * dtype.itemsize
        return self.take(nbytes)[:nbytes].view(dtype).reshape(shape)

    def row_done(self) -> None:
        for buf in self.row_buffers:
            if id(buf) in self.busy:
                self.held.append(buf)
            else:
                self.buffers.give(buf)
        self.row_buffers.clear()

    def hold_row(self, kept_key: tuple[str, int], raw: np.ndarray) -> None:
        """The row's buffers stay untouched until the pair batch that reads them is computed
        (``release_held``); so does the row's NPU output if it is kept for aliases."""
        self.held += self.row_buffers
        self.row_buffers.clear()
        kept = self.kept.get(kept_key)
        if kept is not None and kept[1] is raw:
            self.busy.add(id(kept[0]))

    def release_held(self) -> None:
        for buf in self.held:
            self.buffers.give(buf)
        self.held.clear()
        self.busy.clear()

    def close(self) -> None:
        self.last_raw = None
        self.row_done()
        self.release_held()
        for buf, _ in self.kept.values():
            self.buffers.give(buf)
        self.kept.clear()
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()

    def _fd(self, path: str) -> int:
        fd = self.fds.get(path)
        if fd is None:
            if len(self.fds) >= _OPEN_FILES:
                old = next(iter(self.fds))
                os.close(self.fds.pop(old))
            fd = self.fds[path] = os.open(path, os.O_RDONLY)
        return fd

    def raw(self, header: DumpHeader, entry: TensorEntry) -> np.ndarray | None:
        """The ``entry.size`` bytes of a tensor (uint8), or None when they cannot be read in full
        (the general reader then reports why)."""
        size = entry.size
        if entry.offset + size > header.file_size:
            return None
        base = self.take(size)
        buf = base[:size]
        try:
            got = pread_into(self._fd(header.path), buf, entry.offset)
        except OSError:
            return None
        self.last_raw = (buf, base)
        return buf if got == size else None

    def keep(self, path: str, index: int, raw: np.ndarray) -> None:
        """Keep an output's bytes while inputs of this task that repeat them are still to come."""
        key = (path, index)
        if not self.wanted.get(key) or key in self.kept or self.kept_bytes + raw.size > _KEEP_BUDGET:
            return
        if self.last_raw is not None and self.last_raw[0] is raw:   # (b.ctypes.data: ~5 us a buffer)
            base = self.last_raw[1]
        else:
            base = next(b for b in self.row_buffers if b.ctypes.data == raw.ctypes.data)   # raw = b[:size]
        self.row_buffers.remove(base)
        self.kept[key] = (base, raw)
        self.kept_bytes += raw.size

    def check_aliases(self, path: str, index: int, entry: TensorEntry, raw: np.ndarray) -> None:
        """Check the inputs of this task that repeat output ``index`` of ``path`` (bytes ``raw``,
        just read) now, while those bytes are in memory: each input's bytes are read from its
        file and compared in one kernel call with the GIL released (``checked``), so the check
        costs no buffer, no kept copy and almost no Python when its row comes. Inputs whose
        header cannot be read are left to the row (``tasks._alias_same``), which reports it."""
        rows = self.consumers.pop((path, index), None)
        if not rows:
            return
        key, desc, size = (path, index), entry_description(entry), entry.size
        for row, c_path, c_packed, c_index in rows:
            try:
                c_entry = self.header(c_path, c_packed).entry("input", c_index)
                if entry_description(c_entry) != desc or c_entry.size != size:
                    same = False
                else:
                    same = fused_metrics.file_same_bytes(self._fd(c_path), c_entry.offset, raw)
            except (PshellError, OSError):
                continue
            if same is None:   # no kernel: the row checks
                return
            self.checked[row] = size if same else -1
            left = self.wanted.get(key, 0) - 1
            if left > 0:
                self.wanted[key] = left
            else:
                self.wanted.pop(key, None)

    def producer_bytes(self, key: tuple[str, int], header: DumpHeader, entry: TensorEntry) -> np.ndarray | None:
        """An output's bytes for an alias check: kept when read earlier in this task, else read;
        the count of checks still to come is decreased, the kept copy released after the last."""
        kept = self.kept.get(key)
        left = self.wanted.get(key, 0) - 1
        if left > 0:
            self.wanted[key] = left
        else:
            self.wanted.pop(key, None)
        if kept is None:
            return self.raw(header, entry)
        if left <= 0:
            del self.kept[key]
            self.kept_bytes -= kept[1].size
            self.row_buffers.append(kept[0])        # still valid for this row, reused after it
        return kept[1]

    def golden(self, path: str) -> np.ndarray:
        return read_npy_into(path, self.take)


def entry_description(e: TensorEntry) -> tuple:
    return e.dtype, e.format, e.shape, e.original_shape, e.sub_format

