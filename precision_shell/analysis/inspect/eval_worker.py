"""Run a checked ``eval`` expression where it cannot take the machine: a forked child process.

A numpy expression can ask for anything the shapes allow: ``np.ones(1200000000).sum()`` wants
9.6 GB, ``np.linalg.svd(np.ones((6000, 6000)))`` a minute of LAPACK that no signal interrupts.
The child gets an address-space limit (``RLIMIT_AS``: what it has mapped at the fork plus the
memory cap), so an allocation beyond the cap fails at once with MemoryError instead of being
made; the parent waits for its answer at most ``timeout`` seconds and kills it (SIGKILL) on
timeout or Ctrl-C, so the prompt comes back at once whatever the child is doing.

The answer comes back over a pipe without pickle: one JSON header line, then for an array its
raw C-order bytes (dtype and shape in the header).
"""

from __future__ import annotations

import fcntl
import json
import os
import resource
import select
import signal
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from precision_shell.errors import CommandError


@dataclass(frozen=True)
class EvalLimits:
    memory: int = 1 << 30       # bytes the expression may allocate beyond what the shell holds
    timeout: float = 30.0       # seconds


class EvalLimitError(CommandError):
    """The expression needs more memory or time than the limits allow (one line)."""


def _mapped_bytes() -> int:
    """The address space this process has mapped now (VmSize)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _dtype_spec(dtype: np.dtype) -> Any:
    return dtype.descr if dtype.names else dtype.name


def _dtype_of(spec: Any) -> np.dtype:
    if isinstance(spec, list):
        return np.dtype([tuple(field) for field in spec])
    try:
        return np.dtype(spec)
    except TypeError:       # bfloat16, float8_*: ml_dtypes' types, not numpy names
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, spec))


def _send(fd: int, value: Any) -> None:
    """Header line, then an array's bytes."""
    if isinstance(value, (bool, int, float, complex, np.generic, np.ndarray)) and not (
            isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 1 << 63):
        array = np.asarray(value, order="C")     # a scalar stays 0-d
        if array.dtype.kind == "O":
            _write(fd, {"kind": "error", "message": "the result is an array of Python objects"})
            return
        header = {"kind": "array", "dtype": _dtype_spec(array.dtype), "shape": list(array.shape),
                  "python": type(value).__name__ if not isinstance(value, (np.generic, np.ndarray))
                  else None}
        _write(fd, header)
        view = memoryview(array.reshape(-1).view(np.uint8)) if array.size else b""
        while view:
            written = os.write(fd, view[: 1 << 20])
            view = view[written:]
        return
    from precision_shell.jsonable import jsonable

    text = str(value)
    try:
        data = json.loads(json.dumps(jsonable(value), allow_nan=False))
    except (TypeError, ValueError):
        data = text
    _write(fd, {"kind": "value", "text": text, "json": data})


def _write(fd: int, header: dict) -> None:
    data = (json.dumps(header) + "\n").encode()
    while data:
        data = data[os.write(fd, data):]


def run_limited(compute: Callable[[], Any], limits: EvalLimits) -> Any:
    """``compute()`` in a forked child under ``limits``; its value (an array, a scalar, or for
    anything else its text and JSON form as a :class:`ForeignValue`). Errors the child meets
    come back as one CommandError line; KeyboardInterrupt kills the child and propagates."""
    read_fd, write_fd = os.pipe()
    try:    # a 1 MB pipe: an array result crosses in fewer, larger steps
        fcntl.fcntl(write_fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), 1 << 20)
    except OSError:
        pass
    pid = os.fork()
    if pid == 0:    # the child: compute, answer, never return into the shell
        code = 1
        try:
            os.close(read_fd)
            signal.signal(signal.SIGINT, signal.SIG_IGN)   # the parent kills it; no traceback
            quiet = os.open(os.devnull, os.O_WRONLY)     # LAPACK's own messages: not on screen
            os.dup2(quiet, 1)
            os.dup2(quiet, 2)
            cap = _mapped_bytes() + limits.memory
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
            try:
                value = compute()
            except MemoryError:
                _write(write_fd, {"kind": "memory"})
            except CommandError as exc:
                _write(write_fd, {"kind": "error", "message": str(exc)})
            else:
                _send(write_fd, value)
            code = 0
        except MemoryError:
            try:
                _write(write_fd, {"kind": "memory"})
            except OSError:
                pass
        except BaseException:   # noqa: BLE001 - the child must reach _exit whatever happens
            pass
        finally:
            os._exit(code)
    os.close(write_fd)
    try:
        return _receive(read_fd, pid, limits)
    finally:
        os.close(read_fd)
        _reap(pid)


def _reap(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


class _Reader:
    def __init__(self, fd: int, deadline: float, limits: EvalLimits):
        self.fd, self.deadline, self.limits = fd, deadline, limits
        self.pending = b""

    def wait(self) -> None:
        left = self.deadline - time.monotonic()
        if left <= 0 or not select.select([self.fd], [], [], left)[0]:
            raise EvalLimitError(f"eval: stopped after {self.limits.timeout:g} s (the eval_timeout "
                                 f"setting; `config set eval_timeout SECONDS`)")

    def chunk(self) -> bytes:
        self.wait()
        data = os.read(self.fd, 1 << 20)
        if not data:
            raise CommandError("eval: the worker ended without an answer (out of memory?)")
        return data

    def line(self) -> bytes:
        while b"\n" not in self.pending:
            self.pending += self.chunk()
            if len(self.pending) > (64 << 20):
                raise CommandError("eval: the worker's answer is too long")
        line, _, self.pending = self.pending.partition(b"\n")
        return line

    def into(self, buffer: memoryview) -> None:
        got = min(len(self.pending), len(buffer))
        buffer[:got] = self.pending[:got]
        self.pending = self.pending[got:]
        while got < len(buffer):
            self.wait()
            n = os.readv(self.fd, [buffer[got:]])
            if n == 0:
                raise CommandError("eval: the worker's answer was cut short")
            got += n


@dataclass(frozen=True)
class ForeignValue:
    """A result that is neither an array nor a number (a tuple of arrays, a string): its text."""

    text: str
    data: Any

    def __str__(self) -> str:
        return self.text


def _receive(fd: int, pid: int, limits: EvalLimits) -> Any:
    reader = _Reader(fd, time.monotonic() + limits.timeout, limits)
    header = json.loads(reader.line())
    kind = header.get("kind")
    if kind == "memory":
        raise EvalLimitError(f"eval: needs more than the {limits.memory / (1 << 30):g} GB memory "
                             f"cap (the eval_memory setting; `config set eval_memory 4G`)")
    if kind == "error":
        raise CommandError(header["message"])
    if kind == "value":
        return ForeignValue(header["text"], header["json"])
    dtype, shape = _dtype_of(header["dtype"]), tuple(header["shape"])
    array = np.empty(shape, dtype)
    if array.size:
        reader.into(memoryview(array.reshape(-1).view(np.uint8)))
    if header.get("python") is not None:    # a Python int/float/bool/complex
        return array.item()
    return array if shape else array[()]
