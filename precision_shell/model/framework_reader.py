"""The golden msprobe dump read beside the target, in a forked process, at start-up.

Opening ``pshell TARGET --golden GOLDEN`` reads two ``dump.json`` files; each costs ~1.5 s of
CPU at 100k entries (JSON parsing, then the leaf checks), almost all of it in the interpreter, so
two threads would take as long as one. :func:`start_reading` forks a child that reads the golden
while this process reads the target; the child sends back what start-up shows of the golden (its
ranks, header fields, warnings, entry counts) as JSON through a pipe -- data only, never pickled
objects. The golden's entries themselves are read in this process when a command first needs
them (:func:`full_rank`: ``vc``, ``pt golden:...``), one rank at a time; its warnings were shown at
start-up already.

Where fork is not available or fails, the golden is read here, as before.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import struct
from dataclasses import dataclass

from precision_shell.errors import PshellError
from precision_shell.formats.msprobe.dump import MsprobeDump, RankDump, read_msprobe_dump, read_rank_dump
from precision_shell.formats.msprobe.layout import RankDir

_HEADER = ("framework", "task", "level", "dump_data_dir")


def summary_of(dump: MsprobeDump) -> dict:
    """What start-up needs of a dump, JSON-safe: no entries, their count per rank."""
    return {"root": dump.root, "warnings": dump.warnings,
            **{key: getattr(dump, key) for key in _HEADER[:3]},
            "ranks": [{"location": [r.location.path, r.location.step, r.location.rank, r.location.rank_id,
                                    r.location.mode],
                       "entries": len(r.entries), "undescribed_files": r.undescribed_files,
                       "warnings": r.warnings, **{key: getattr(r, key) for key in _HEADER}}
                      for r in dump.ranks]}


def dump_of(summary: dict) -> MsprobeDump:
    """The MsprobeDump of :func:`summary_of`, each rank deferred (entries read by :func:`full_rank`)."""
    ranks = [RankDump(RankDir(*r["location"]), **{key: r[key] for key in _HEADER},
                      undescribed_files=r["undescribed_files"], warnings=r["warnings"], deferred=r["entries"])
             for r in summary["ranks"]]
    return MsprobeDump(summary["root"], ranks, summary["framework"], summary["task"], summary["level"],
                       warnings=summary["warnings"])


def full_rank(rank: RankDump) -> RankDump:
    """``rank`` with its entries: read now when it was deferred."""
    return rank if rank.deferred is None else read_rank_dump(rank.location)


@dataclass
class PendingRead:
    """A dump being read by a child process (``pid``), its summary coming through ``fd``; or,
    where no child could be forked, the dump (or why not) read here already (``done``).

    After the summary the child makes the statistics columns of each rank (statistics task:
    what a statistics ``vc`` pairs, :mod:`.msprobe.columns`), writes them into an anonymous
    in-memory file made before the fork (``memfd``; Linux) and ends; :meth:`columns` reads them
    from there when ``vc`` asks. Without a memfd the columns come through the pipe, and the
    child waits until they are read or this process ends (the pipe closes under it)."""
    path: str
    pid: int | None = None
    fd: int | None = None
    done: MsprobeDump | PshellError | None = None
    memfd: int | None = None
    _pipe: object = None
    _columns: list | None = None

    def result(self) -> MsprobeDump:
        """The dump (ranks deferred when a child read it); PshellError as the read raised it."""
        if self.pid is not None and self._pipe is None:
            self.done = self._reply()
        if isinstance(self.done, PshellError):
            raise self.done
        return self.done

    def _reply(self) -> MsprobeDump | PshellError:
        self._pipe = os.fdopen(self.fd, "rb")
        reply = None
        try:
            reply = json.loads(_message(self._pipe))
        except (ValueError, OSError):
            pass
        if not isinstance(reply, dict):
            self._finish()
            return _read_here(self.path)      # the child died: read it here instead
        if "error" in reply:
            self._finish()
            return PshellError(reply["error"])
        return dump_of(reply["dump"])

    def columns(self, index: int):
        """The statistics columns the child made of rank ``index`` (StatsColumns), or None
        (not a statistics rank, no child, or it failed)."""
        if self._columns is None:
            self._columns = []
            if self._pipe is not None and isinstance(self.done, MsprobeDump):
                from precision_shell.formats.msprobe.columns import decode

                try:
                    for _ in self.done.ranks:
                        data = _message(self._pipe)
                        if data[:1] == b"M":
                            data = _pread(self.memfd, *_PLACE.unpack(data[1:]))
                        self._columns.append(decode(memoryview(data)[1:]) if data else None)
                except (ValueError, OSError, struct.error):
                    self._columns = []
            self._finish()
        return self._columns[index] if index < len(self._columns) else None

    def __del__(self) -> None:
        if self._pipe is not None or self.memfd is not None:    # columns never asked for
            try:
                if self.pid is not None:
                    os.kill(self.pid, signal.SIGKILL)
                self._finish()
            except (OSError, AttributeError):    # gone already, or the interpreter is ending
                pass

    def _finish(self) -> None:
        """Close the pipe and reap the child."""
        if self._pipe is not None:
            self._pipe.close()
        elif self.fd is not None:
            os.close(self.fd)
        self.fd = None
        if self.memfd is not None:
            os.close(self.memfd)
            self.memfd = None
        if self.pid is not None:
            os.waitpid(self.pid, 0)
            self.pid = None


_LENGTH = struct.Struct("<Q")
_PLACE = struct.Struct("<QQ")       # offset and size of a rank's columns in the memfd


def _pread(fd: int, offset: int, size: int) -> bytes:
    """``size`` bytes at ``offset`` of ``fd`` (a R tag in front, as the pipe sends them)."""
    parts, got = [b"R"], 0
    while got < size:
        part = os.pread(fd, min(size - got, 1 << 26), offset + got)
        if not part:
            raise ValueError("columns cut short")
        parts.append(part)
        got += len(part)
    return b"".join(parts)


def _message(pipe) -> bytes:
    """One length-prefixed message; ValueError when the pipe ends first."""
    head = pipe.read(_LENGTH.size)
    if len(head) != _LENGTH.size:
        raise ValueError("pipe closed")
    (size,) = _LENGTH.unpack(head)
    data = pipe.read(size)
    if len(data) != size:
        raise ValueError("pipe closed")
    return data


def _send(pipe, chunks: list[bytes]) -> None:
    pipe.write(_LENGTH.pack(sum(len(c) for c in chunks)))
    for chunk in chunks:
        pipe.write(chunk)


def _read_here(path: str) -> MsprobeDump | PshellError:
    try:
        return read_msprobe_dump(path)
    except PshellError as exc:
        return exc


def _child(path: str, write_fd: int, memfd: int | None) -> None:
    """Read, send the summary, then per rank a message: empty (no columns), ``R`` and the
    columns, or ``M`` and where they are in ``memfd``."""
    done = _read_here(path)
    reply = {"error": str(done)} if isinstance(done, PshellError) else {"dump": summary_of(done)}
    with os.fdopen(write_fd, "wb") as pipe:
        _send(pipe, [json.dumps(reply).encode()])
        pipe.flush()
        if isinstance(done, PshellError):
            return
        from precision_shell.formats.msprobe.columns import encode, rank_columns

        offset = 0
        for rank in done.ranks:
            chunks = encode(rank_columns(rank)) if rank.task == "statistics" else []
            rank.entries, rank.columns = [], None      # freed before the next rank's columns
            if chunks and memfd is not None:
                size = sum(len(c) for c in chunks)
                for chunk in chunks:
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(memfd, view):]
                chunks, offset = [b"M", _PLACE.pack(offset, size)], offset + size
            elif chunks:
                chunks = [b"R", *chunks]
            _send(pipe, chunks)
            pipe.flush()


def start_reading(path: str | os.PathLike) -> PendingRead:
    """A child process reading the dump at ``path`` (or the dump read here, where no process
    can be forked); :meth:`PendingRead.result` waits for it."""
    path = os.fspath(path)
    if not hasattr(os, "fork"):
        return PendingRead(path, done=_read_here(path))
    read_fd, write_fd = os.pipe()
    try:
        memfd = os.memfd_create("pshell-golden-columns", os.MFD_CLOEXEC) if hasattr(os, "memfd_create") else None
    except OSError:
        memfd = None
    try:
        pid = os.fork()
    except OSError:
        for fd in (read_fd, write_fd, memfd):
            if fd is not None:
                os.close(fd)
        return PendingRead(path, done=_read_here(path))
    if pid == 0:     # the child: read, reply, and leave without running the parent's clean-up
        code = 1
        try:
            os.close(read_fd)
            gc.disable()     # ~5 objects per leaf, no cycles, and the process ends here
            _child(path, write_fd, memfd)
            code = 0
        finally:
            os._exit(code)
    os.close(write_fd)
    return PendingRead(path, pid, read_fd, memfd=memfd)
