"""numpy's OpenBLAS loaded with one thread in a pshell process.

When numpy loads, OpenBLAS starts a thread per core and sets up its buffers: ~0.06 s of CPU and
wall on a 2-core machine, a sixth of a one-shot ``pshell WS -c vc``'s start. pshell runs its own
threads where work is parallel (the compare's ``-j``), and its few BLAS calls (replay's and
impact's dot products) are small, where more threads only change the order of a sum's rounding
with the machine's core count. So numpy's first import in pshell sees OPENBLAS_NUM_THREADS=1,
unless the user set the variable; the variable is gone again right after, so the commands pshell
starts (``!CMD``, a pipe, bisect's check command) get the user's environment.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys

_VARIABLE = "OPENBLAS_NUM_THREADS"


class _OneThreadNumpy(importlib.abc.MetaPathFinder):
    """Finds numpy as the other finders do; its loading runs with the variable set."""

    def find_spec(self, fullname, path, target=None):
        if fullname != "numpy":
            return None
        sys.meta_path.remove(self)            # once: numpy's own submodules load as usual
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None or _VARIABLE in os.environ:
            return spec
        load = spec.loader.exec_module

        def exec_module(module) -> None:
            os.environ[_VARIABLE] = "1"
            try:
                load(module)
            finally:
                os.environ.pop(_VARIABLE, None)

        spec.loader.exec_module = exec_module
        return spec


def load_numpy_with_one_blas_thread() -> None:
    """From now on, numpy's first import loads OpenBLAS with one thread (nothing when numpy is
    loaded already, or the user chose the thread count)."""
    if "numpy" in sys.modules or _VARIABLE in os.environ:
        return
    if not any(isinstance(f, _OneThreadNumpy) for f in sys.meta_path):
        sys.meta_path.insert(0, _OneThreadNumpy())
