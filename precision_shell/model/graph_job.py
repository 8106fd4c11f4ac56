"""Load the graph in a forked child while the session indexes the dumps: start-up uses both cores.

A first start on a big workspace spends ~2 s in the graph (read, scan, link) and ~1 s in the
dump and golden folders; the two are independent. The child sends back one JSON line (its load
errors, whether the graph may be cached) and the start-up cache entry's bytes (plain data, read
and checked as any cache entry), then writes the same bytes to the cache, so the graph is encoded
once. Anything unexpected in the child (a crash, a signal, no fork on this platform, a small graph
not worth a process) falls back to loading in the session's process, which also gives the same
errors.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from precision_shell.model import graph_load
from precision_shell.model.cache_codec import need, strings
from precision_shell.model.graph_cache import GRAPH
from precision_shell.model.load_cache import LoadCache

__all__ = ["GraphJob"]

FORK_ABOVE_BYTES = 8 << 20  # smaller graphs load in ~0.1 s: not worth a process


class GraphJob:
    """``GraphJob(files, cache, key)`` starts; :meth:`result` gives (graph or None, errors)."""

    def __init__(self, files: list[Path], cache: LoadCache, key: tuple):
        self.files, self.cache, self.key = files, cache, key
        self._pid: int | None = None
        self._fd: int | None = None
        if _worth_forking(files):
            self._fork()

    def _fork(self) -> None:
        try:
            read_fd, write_fd = os.pipe()
            pid = os.fork()
        except OSError:
            return
        if pid == 0:  # child: never returns
            os.close(read_fd)
            self._child(write_fd)
        os.close(write_fd)
        self._pid, self._fd = pid, read_fd

    def _child(self, write_fd: int) -> None:
        code = 1
        try:
            errors: list[str] = []
            graph, loaded = graph_load.load_op_graph(self.files, errors)
            cacheable = graph is not None and loaded == len(self.files)  # no partial graph cached
            entry = self.cache.entry(GRAPH, self.key, graph) if graph is not None else b""
            with os.fdopen(write_fd, "wb") as out:
                out.write(json.dumps([errors, cacheable]).encode("ascii") + b"\n")
                out.write(entry)
            if cacheable:
                self.cache.store_entry(GRAPH, self.key, entry)
            code = 0
        except BaseException:  # the session loads the graph itself and reports what goes wrong
            pass
        finally:
            os._exit(code)

    def result(self) -> tuple[object | None, list[str], bool]:
        """(graph or None, load errors, whether it still needs storing in the cache)."""
        if self._pid is not None:
            try:
                with os.fdopen(self._fd, "rb") as pipe:  # [errors, cacheable] on a line, then the entry
                    errors, cacheable = _header(pipe.readline())
                    entry = pipe.read()
                _, status = os.waitpid(self._pid, 0)
            except Exception:  # the child died before writing (EOFError), a signal, ...
                try:
                    os.waitpid(self._pid, 0)
                except OSError:
                    pass  # already reaped
                status = 1
            if status == 0:
                graph = self.cache.value_of(GRAPH, entry, self.key, "graph from the loading process") if entry else None
                if graph is not None or not cacheable:
                    return graph, errors, False
        errors = []
        graph, loaded = graph_load.load_op_graph(self.files, errors)
        return graph, errors, graph is not None and loaded == len(self.files)


def _header(line: bytes) -> tuple[list[str], bool]:
    header = json.loads(line)
    need(type(header) is list and len(header) == 2 and type(header[1]) is bool, "not [errors, cacheable]")
    return strings(header[0], "errors"), header[1]


def _worth_forking(files: list[Path]) -> bool:
    if not hasattr(os, "fork") or not sys.platform.startswith("linux"):
        return False  # fork without exec is only dependable on Linux
    try:
        return sum(p.stat().st_size for p in files) > FORK_ABOVE_BYTES
    except OSError:
        return False

