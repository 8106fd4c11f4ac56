"""Tensor-mode ``vc`` on msprobe dumps at disk speed: the C sums, in-place reads, two threads.

- :func:`kernel_sums`: msprobe's tensor-mode sums of one pair in one pass by the compiled
  ``_framework_metrics`` (C, GIL released) when both sides are float32 / float16 / bfloat16,
  else None (the numpy path in :mod:`.framework_compare` stays the reference and the fallback:
  other dtypes, NaN/Inf anywhere, the kernel not built or ``PSHELL_NO_EXT=1``).
- :class:`BufferedLoader`: each thread reads a leaf's bytes into its own reusable buffers
  (:mod:`..formats.msprobe.tensor_io`), so memory holds a few tensors whatever the dump's size.
- :func:`ordered_map`: rows computed by a pool of threads, yielded in order, at most a few
  ahead of the consumer.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, Iterator, TypeVar

import ml_dtypes
import numpy as np

from precision_shell.formats.msprobe.dump import Leaf, load_leaf
from precision_shell.formats.msprobe.tensor_io import ReadBuffer, locate, read_into
from precision_shell.analysis.compare.fused_metrics import DISABLE_VARIABLE

try:
    from precision_shell.analysis.compare import _framework_metrics as _ext
except ImportError:  # not built: no compiler at install time (setup.py warned)
    _ext = None

WORKERS = 2
_KINDS = {} if _ext is None else {np.dtype("<f4"): _ext.KIND_F32, np.dtype("<f2"): _ext.KIND_F16,
                                  np.dtype(ml_dtypes.bfloat16): _ext.KIND_BF16}


def kernel_sums(x: np.ndarray, y: np.ndarray) -> tuple | None:
    """(dot, xx, yy, sq_diff, max_abs, max_rel, within_1, within_5) of two flat, equally long
    arrays, or None when the kernel cannot take them or a value is NaN/Inf."""
    if _ext is None or os.environ.get(DISABLE_VARIABLE) == "1":
        return None
    kinds = _KINDS.get(x.dtype), _KINDS.get(y.dtype)
    if None in kinds or x.size != y.size or not (x.flags.c_contiguous and y.flags.c_contiguous):
        return None
    sums = _ext.sums(x.view(np.uint8), y.view(np.uint8), *kinds)
    # NaN/Inf in an input make a sum of squares non-finite: msprobe's own handling then
    return sums if np.isfinite(sums[1]) and np.isfinite(sums[2]) else None


class BufferedLoader:
    """``load(leaf, side)``: the leaf's values, read into the calling thread's buffer for that
    side (0 target, 1 golden); valid until the same thread loads that side again."""

    def __init__(self):
        self._local = threading.local()

    def __call__(self, leaf: Leaf, side: int) -> np.ndarray:
        where = locate(leaf)
        if where is None:
            return load_leaf(leaf)
        buffers = getattr(self._local, "buffers", None)
        if buffers is None:
            buffers = self._local.buffers = (ReadBuffer(), ReadBuffer())
        return read_into(where, buffers[side]).reshape(where.shape)


T = TypeVar("T")
R = TypeVar("R")


def ordered_map(fn: Callable[[T], R], items: Iterable[T], workers: int | None = None) -> Iterator[R]:
    """``fn`` of each item on ``workers`` (default :data:`WORKERS`) threads, in order; at most
    2 x ``workers`` ahead."""
    workers = workers or WORKERS
    with ThreadPoolExecutor(workers, thread_name_prefix="framework-vc") as pool:
        window: deque = deque()
        for item in items:
            window.append(pool.submit(fn, item))
            if len(window) > 2 * workers:
                yield window.popleft().result()
        while window:
            yield window.popleft().result()
