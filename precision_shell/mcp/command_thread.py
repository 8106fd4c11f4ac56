"""Tools run one at a time on the main thread, as the shell runs commands: the protocol loop
lives in another thread and hands jobs over a queue.

Why the main thread: Ctrl-C reaches pshell's analyses as KeyboardInterrupt there, and they keep
partial results when it does (compare, the value scan, ``pt -a``). A cancelled tool call sends the
main thread a real SIGINT (``pthread_kill``), so cancellation stops a command exactly as Ctrl-C
does, wherever it is waiting. A cancel's SIGINT that lands after its job ended (a loaded machine
delivers it late) is swallowed by the handler wherever it lands: it never hits the next job, nor
the loop while it takes that job from the queue (where it used to drop the job: the client then
waited for an answer forever).
"""

from __future__ import annotations

import queue
import signal
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from precision_shell.errors import PshellError

QUEUED, RUNNING, DONE = "queued", "running", "done"


@dataclass
class Progress:
    label: str = ""
    done: int = 0
    total: int | None = None


@dataclass
class Job:
    work: Callable[["Job"], Any]
    on_done: Callable[[], None] = lambda: None
    state: str = QUEUED
    result: Any = None
    error: PshellError | None = None
    cancelled: bool = False
    interrupt_sent: bool = False
    progress: Progress = field(default_factory=Progress)
    progress_seen: int = 0          # bumped on every advance: the protocol side sends what changed
    bars: int = 0                   # progress bars the job has opened (vcs may run vc's first)


class JobProgressBar:
    """What ``session.progress`` yields while a job runs: counts go to ``job.progress``."""

    def __init__(self, job: Job, label: str, total: int | None):
        self.job = job
        job.progress = Progress(label, 0, total)
        job.bars += 1
        job.progress_seen += 1

    def advance(self, n: int = 1) -> None:
        self.job.progress.done += n
        self.job.progress_seen += 1


class CommandThread:
    """The main thread's job loop. ``submit`` and ``cancel`` are called from the protocol thread."""

    def __init__(self) -> None:
        self._jobs: queue.Queue[Job | None] = queue.Queue()
        self._lock = threading.Lock()
        self._main = threading.main_thread().ident
        self._running: Job | None = None
        # jobs whose cancel sent a SIGINT that has not landed yet, oldest first: the handler
        # takes each SIGINT for the oldest (one SIGINT a cancel); any other is the user's Ctrl-C
        self._cancels_in_flight: list[Job] = []

    def submit(self, work: Callable[[Job], Any], on_done: Callable[[], None] = lambda: None) -> Job:
        job = Job(work, on_done)
        self._jobs.put(job)
        return job

    def stop(self) -> None:
        self._jobs.put(None)

    def cancel(self, job: Job) -> None:
        """Stop ``job``: skipped when still queued, Ctrl-C when running."""
        with self._lock:
            job.cancelled = True
            if job.state == RUNNING and not job.interrupt_sent:
                job.interrupt_sent = True
                self._cancels_in_flight.append(job)   # before the signal: the handler looks here
                signal.pthread_kill(self._main, signal.SIGINT)

    def serve(self, alive: Callable[[], bool]) -> None:
        """Run jobs until :meth:`stop` or until ``alive()`` turns false. A SIGINT while no job
        runs that no cancel sent (the user's Ctrl-C on the server) raises KeyboardInterrupt."""
        previous = signal.signal(signal.SIGINT, self._on_sigint)
        try:
            self._loop(alive)
        finally:
            signal.signal(signal.SIGINT, previous)

    def _loop(self, alive: Callable[[], bool]) -> None:
        while True:
            try:
                job = self._jobs.get(timeout=0.2)
            except queue.Empty:
                if not alive():
                    return
                continue
            if job is None:
                return
            self._run(job)

    def _on_sigint(self, signum: int, frame: Any) -> None:
        """Python's own Ctrl-C behaviour, except for a cancel's SIGINT that landed after its job
        ended: that one is dropped (it was meant for a job that is gone). The handler runs on the
        main thread between bytecodes, so it takes no lock (the main thread may hold it)."""
        if self._cancels_in_flight:
            job = self._cancels_in_flight.pop(0)
            if job is not self._running or job.state != RUNNING:
                return
        raise KeyboardInterrupt

    def _run(self, job: Job) -> None:
        try:
            with self._lock:
                if job.cancelled:
                    job.error = PshellError("cancelled before it started")
                else:
                    job.state, self._running = RUNNING, job
            if job.state == RUNNING:
                try:
                    job.result = job.work(job)
                except PshellError as exc:
                    job.error = exc
                except Exception as exc:   # a bug: the answer says so in one line, the server goes on
                    job.error = PshellError(f"internal error: {type(exc).__name__}: {exc}")
        except KeyboardInterrupt:   # Ctrl-C (a cancel or the user) that the command did not catch
            job.error = PshellError("interrupted")
        finally:
            self._settle(job)
        try:
            job.on_done()
        except Exception:  # the protocol loop has gone: nobody is waiting
            pass

    def _settle(self, job: Job) -> None:
        """Mark ``job`` done; its cancel's SIGINT landing meanwhile is taken here (from then on
        the handler drops it)."""
        while True:
            try:
                with self._lock:
                    job.state = DONE
                    self._running = None
                return
            except KeyboardInterrupt:
                continue
