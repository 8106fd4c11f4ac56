"""Where the compare and scan engines run their tasks: any ``concurrent.futures.Executor``.

* local (default): the compare engine's own thread pool (``compare._pool``), or in-process;
* ``--scheduler ADDRESS`` / ``config set scheduler ADDRESS``: a Dask distributed cluster, through
  ``dask.distributed.Client(ADDRESS).get_executor()`` (a real ``Executor`` whose futures are the
  cluster's). Workers read the dumps from a filesystem they share with the client; a task is a
  batch of dump files (plain tuples in, compact rows out: never tensors), so scheduler overhead
  and the client's memory stay small whatever the dump size. A task whose worker dies is retried
  (``RETRIES``) on another worker, then reported as lost by the engine; Ctrl-C cancels the
  futures not yet finished and keeps the rest.

This is the only module that imports dask/distributed, and only when a scheduler is asked for
(the optional extra ``pip install '.[dask]'``).
"""

from __future__ import annotations

import atexit
from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait
from typing import Any, Callable, Iterable

from precision_shell.errors import CommandError, install_hint

RETRIES = 2                 # re-runs of a task whose worker died before the loss is reported
CONNECT_TIMEOUT_S = 3.0     # an unreachable scheduler costs this long, then one line
_CLIENTS: dict[str, Any] = {}   # address -> Client, kept for the session (connecting costs ~0.2 s)


def dask_client(address: str):
    """The session's Client of the cluster at ``address`` (connected on first use)."""
    client = _CLIENTS.get(address)
    if client is not None and client.status == "running":
        return client
    try:
        from dask.distributed import Client
    except ImportError:
        raise CommandError(f"--scheduler needs Dask: {install_hint('dask')}") from None
    try:
        client = Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise CommandError(f"scheduler {address}: cannot connect ({reason})") from None
    _CLIENTS[address] = client
    atexit.register(client.close)   # not left to reconnect to a scheduler that is gone
    return client


class ClusterExecutor:
    """A Dask cluster as an executor of the engines, with its worker thread count."""

    def __init__(self, address: str):
        self.address = address
        self.client = dask_client(address)
        self.executor: Executor = self.client.get_executor(pure=False, retries=RETRIES)
        # the engines size their tasks by this: several per worker thread
        self._max_workers = max(1, sum(self.client.nthreads().values()))

    def submit(self, fn: Callable, *args: Any) -> Future:
        return self.executor.submit(fn, *args)

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        """The cluster outlives a command: nothing to shut down."""


def executor_for(scheduler: str | None) -> ClusterExecutor | None:
    """The executor the settings ask for: a cluster when a scheduler address is set, else None
    (the engines' local default)."""
    return ClusterExecutor(scheduler) if scheduler else None


def worker_lost(exc: BaseException) -> bool:
    """A task failed because its worker died (after Dask's retries), not because of its data."""
    return type(exc).__name__ in ("KilledWorker", "BrokenProcessPool", "CancelledError", "CommClosedError")


def run_tasks(executor: Executor | ClusterExecutor, fn: Callable, tasks: Iterable[tuple[Any, tuple]],
              on_result: Callable[[Any, Any], None], on_error: Callable[[Any, BaseException], None],
              window: int) -> bool:
    """Run ``fn(*args)`` for each ``(key, args)`` of ``tasks``, at most ``window`` at a time;
    ``on_result(key, value)`` / ``on_error(key, exc)`` as each ends. Returns True when Ctrl-C
    stopped it: unfinished futures are cancelled, finished ones still handed over."""
    pending: dict[Future, Any] = {}

    def harvest(done: Iterable[Future]) -> None:
        for fut in done:
            key = pending.pop(fut)
            try:
                value = fut.result()
            except Exception as exc:   # a lost worker or a bug in one task: the others go on
                on_error(key, exc)
                continue
            on_result(key, value)

    try:
        for key, args in tasks:
            while len(pending) >= window:
                harvest(wait(pending, return_when=FIRST_COMPLETED)[0])
            pending[executor.submit(fn, *args)] = key
        while pending:
            harvest(wait(pending, return_when=FIRST_COMPLETED)[0])
    except KeyboardInterrupt:
        for fut in pending:
            fut.cancel()
        harvest([f for f in list(pending) if f.done() and not f.cancelled()])
        return True
    return False
