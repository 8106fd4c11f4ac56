"""Run shell command lines as child processes, each in its own process group, several at once.

Used by ``bisect`` for its trials. Each process gets ``/bin/sh -c LINE`` in a new session (its own
process group, so no terminal signal reaches it and it can be killed with everything it started);
its stdout and stderr go to files in its folder, cut at ``OUTPUT_CAP`` bytes each (the rest is read
and dropped, so a check that writes gigabytes neither blocks nor fills the disk). A per-process
timeout kills the group (SIGTERM, then SIGKILL); so does Ctrl-C, for every running process,
before the KeyboardInterrupt goes on to the caller. When the main process exits, whatever it left
running in its group is killed too.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

OUTPUT_CAP = 16 << 20          # bytes kept per stream
KILL_GRACE = 0.3               # seconds between SIGTERM and SIGKILL
ORPHAN_PIPE_WAIT = 1.0         # seconds to drain pipes held open by a background child after exit
_CUT_NOTE = "\n[pshell: output cut at {} MiB; the rest was dropped]\n"


@dataclass
class ProcessSpec:
    command: str
    folder: Path
    env: dict[str, str]
    timeout: float | None = None


@dataclass
class ProcessOutcome:
    exit_code: int | None       # None: killed by a signal (see ``signal``)
    seconds: float
    signal: str | None = None
    timed_out: bool = False
    cut: list[str] = field(default_factory=list)    # "stdout" / "stderr" when cut at OUTPUT_CAP

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    def reason(self) -> str:
        """Why it failed beyond a plain non-zero exit, in words ("" when nothing to say)."""
        if self.timed_out:
            return "timed out; its process group was killed"
        if self.signal:
            return f"killed by {self.signal}"
        if self.exit_code == 127:
            return "exit 127: command not found"
        if self.exit_code == 126:
            return "exit 126: command not executable"
        return ""


class _Running:
    def __init__(self, index: int, spec: ProcessSpec, selector: selectors.BaseSelector):
        self.index, self.spec = index, spec
        spec.folder.mkdir(parents=True, exist_ok=True)
        self.files = {"stdout": open(spec.folder / "stdout.txt", "wb"),
                      "stderr": open(spec.folder / "stderr.txt", "wb")}
        self.kept = {"stdout": 0, "stderr": 0}
        self.start = time.monotonic()
        try:
            self.proc = subprocess.Popen(["/bin/sh", "-c", spec.command], stdin=subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         env=spec.env, start_new_session=True)
        except OSError:
            self.close_files()
            raise
        self.open_pipes = 2
        self.selector = selector
        for name, pipe in (("stdout", self.proc.stdout), ("stderr", self.proc.stderr)):
            os.set_blocking(pipe.fileno(), False)
            selector.register(pipe, selectors.EVENT_READ, (self, name))
        self.term_sent: float | None = None
        self.exited_at: float | None = None
        self.timed_out = False

    def read(self, pipe, name: str) -> None:
        try:
            chunk = os.read(pipe.fileno(), 1 << 16)
        except BlockingIOError:
            return
        if not chunk:
            self.selector.unregister(pipe)
            pipe.close()
            self.open_pipes -= 1
            return
        room = OUTPUT_CAP - self.kept[name]
        if room > 0:
            self.files[name].write(chunk[:room])
        self.kept[name] += len(chunk)

    def kill_group(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def tick(self, now: float) -> bool:
        """Timeouts and exit; True when this process is finished (pipes closed, reaped)."""
        timeout = self.spec.timeout
        if timeout is not None and not self.timed_out and now - self.start > timeout:
            self.timed_out, self.term_sent = True, now
            self.kill_group(signal.SIGTERM)
        if self.term_sent is not None and now - self.term_sent > KILL_GRACE:
            self.kill_group(signal.SIGKILL)
        if self.exited_at is None and self.proc.poll() is not None:
            self.exited_at = now
            self.kill_group(signal.SIGKILL)     # what it left behind in its group
        if self.exited_at is not None and self.open_pipes and now - self.exited_at > ORPHAN_PIPE_WAIT:
            self.drop_pipes()
        return self.exited_at is not None and not self.open_pipes

    def drop_pipes(self) -> None:
        for pipe in (self.proc.stdout, self.proc.stderr):
            if not pipe.closed:
                try:
                    self.selector.unregister(pipe)
                except (KeyError, ValueError):
                    pass
                pipe.close()
        self.open_pipes = 0

    def close_files(self) -> list[str]:
        cut = []
        for name, fh in self.files.items():
            if self.kept[name] > OUTPUT_CAP:
                fh.write(_CUT_NOTE.format(OUTPUT_CAP >> 20).encode())
                cut.append(name)
            fh.close()
        return cut

    def outcome(self) -> ProcessOutcome:
        code = self.proc.returncode
        sig = None
        if code is not None and code < 0:
            try:
                sig = signal.Signals(-code).name
            except ValueError:
                sig = f"signal {-code}"
            code = None
        return ProcessOutcome(code, round(time.monotonic() - self.start, 3), sig, self.timed_out,
                              self.close_files())

    def abort(self) -> None:
        """Ctrl-C: the whole group, at once."""
        self.kill_group(signal.SIGKILL)
        self.drop_pipes()
        try:
            self.proc.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            pass
        self.close_files()


def run_processes(count: int, make_spec: Callable[[int], ProcessSpec], jobs: int,
                  on_done: Callable[[int, ProcessOutcome], bool]) -> None:
    """Run ``count`` processes in order, at most ``jobs`` at a time; ``make_spec(index)`` is asked
    for each just before it starts. ``on_done(index, outcome)`` is called as each finishes; when
    it returns True no further one is started (those running finish). One that cannot start
    (OSError) finishes at once with exit code 127. KeyboardInterrupt kills every running group,
    then propagates."""
    selector = selectors.DefaultSelector()
    running: list[_Running] = []
    next_index, stop = 0, False
    try:
        while running or (next_index < count and not stop):
            while not stop and next_index < count and len(running) < max(1, jobs):
                index, next_index = next_index, next_index + 1
                spec = make_spec(index)
                try:
                    running.append(_Running(index, spec, selector))
                except OSError as exc:
                    (spec.folder / "stderr.txt").write_text(f"cannot start /bin/sh: {exc}\n")
                    stop = on_done(index, ProcessOutcome(127, 0.0)) or stop
            if not running:
                continue
            for key, _ in selector.select(timeout=0.05):
                owner, name = key.data
                owner.read(key.fileobj, name)
            now = time.monotonic()
            for proc in list(running):
                if proc.tick(now):
                    running.remove(proc)
                    stop = on_done(proc.index, proc.outcome()) or stop
    except BaseException:
        for proc in running:
            proc.abort()
        raise
    finally:
        selector.close()
