"""pshell loads numpy's OpenBLAS with one thread (blas_threads.py): fewer threads to start in every
one-shot command, the user's OPENBLAS_NUM_THREADS respected, and the variable not left behind for
the commands pshell starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

_THREADS_AFTER_NUMPY = r"""
import json, os, sys
if sys.argv[1] == "hook":
    from precision_shell.blas_threads import load_numpy_with_one_blas_thread
    load_numpy_with_one_blas_thread()
import numpy
print(json.dumps([len(os.listdir("/proc/self/task")), os.environ.get("OPENBLAS_NUM_THREADS"),
                  float(numpy.dot(numpy.ones(50000), numpy.ones(50000)))]))
"""


def _threads(mode: str, **env: str) -> list:
    environ = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"} | env
    done = subprocess.run([sys.executable, "-c", _THREADS_AFTER_NUMPY, mode], capture_output=True,
                          text=True, env=environ, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.skipif(not os.path.isdir("/proc/self/task") or (os.cpu_count() or 1) < 2,
                    reason="counts a Linux process's threads on a machine of 2+ cores")
def test_numpy_loads_with_one_blas_thread_and_the_variable_is_not_left_set():
    without = _threads("plain")
    assert without[0] > 1              # OpenBLAS's own threads (what the hook avoids)
    threads, variable, dot = _threads("hook")
    assert threads == 1 and variable is None and dot == 50000.0
    threads, variable, _ = _threads("hook", OPENBLAS_NUM_THREADS="2")    # the user's choice
    assert threads == 2 and variable == "2"
