"""A tensor leaf's bytes read in place into a reusable buffer (``vc`` on big tensor dumps).

msprobe's tensor files hold each tensor's bytes contiguously: a ``.pt`` stores ``data/<key>``
uncompressed inside its zip, a ``.npy`` after its header. :func:`locate` finds where (the zip
directory and the pickle, or the header: a few hundred bytes) and :func:`read_into` reads them
with ``os.preadv`` straight into a caller's buffer, so comparing thousands of tensors allocates
no array per file and the read releases the GIL. A leaf whose bytes are not one plain
little-endian run (a strided or offset ``.pt`` view, a big-endian or Fortran-order file) gives
None: the caller then loads it the ordinary way (:func:`.dump.load_leaf`).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np

from ...errors import FormatError
from ..input_files import open_regular
from ..golden_npy import read_npy_header
from .leaves import Leaf
from ..torch_pt import PtTensor, open_pt, storage_data


@dataclass(frozen=True)
class TensorBytes:
    """``count`` elements of ``dtype`` at byte ``offset`` of ``path``, shaped ``shape``."""
    path: str
    offset: int
    dtype: np.dtype
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


def locate(leaf: Leaf) -> TensorBytes | None:
    """Where the leaf's values are in its file; None when they are not one plain run. The
    FormatErrors of :func:`.dump.load_leaf` for a missing or unreadable file and for a
    shape other than dump.json's."""
    if leaf.file is None:
        raise FormatError(None, f"{leaf.path}: no tensor file (statistics-only dump or not saved)")
    if not leaf.file.endswith((".npy", ".pt")):
        return None     # a CANN binary kernel dump: load_leaf reads it
    if leaf.file.endswith(".npy"):
        header = read_npy_header(leaf.file)
        found = None
        if header.dtype.byteorder != ">" and not (header.fortran_order and len(header.shape) > 1):
            found = TensorBytes(leaf.file, header.data_offset, header.dtype, header.shape)
        shape = header.shape
    else:
        tensor = open_pt(leaf.file)
        if not isinstance(tensor, PtTensor):
            raise FormatError(leaf.file, f"holds a {type(tensor).__name__}, not a single tensor")
        found, shape = _plain_pt(tensor), tensor.shape
    if leaf.shape is not None and tuple(shape) != leaf.shape:
        raise FormatError(leaf.file, f"shape {list(shape)} differs from dump.json's {list(leaf.shape)}")
    return found


def _plain_pt(tensor: PtTensor) -> TensorBytes | None:
    storage = tensor.storage
    strides, step = [], 1
    for n in reversed(tensor.shape):
        strides.append(step)
        step *= max(n, 1)
    if storage.big_endian or tuple(reversed(strides)) != tensor.stride or tensor.dtype != storage.dtype:
        return None
    start, size = storage_data(storage)
    begin = tensor.offset * tensor.dtype.itemsize
    found = TensorBytes(storage.path, start + begin, tensor.dtype, tensor.shape)
    if begin + found.nbytes > size:
        raise FormatError(storage.path, f"{storage.member} holds {size} bytes, fewer than the tensor needs")
    return found


class ReadBuffer:
    """Memory :func:`read_into` reuses from one tensor to the next, grown as tensors grow."""

    def __init__(self):
        self._array = np.empty(0, np.uint8)

    def take(self, nbytes: int) -> np.ndarray:
        if self._array.size < nbytes:     # a new array: views of the old one stay valid
            self._array = np.empty(max(nbytes, 2 * self._array.size), np.uint8)
        return self._array[:nbytes]


def read_into(where: TensorBytes, buffer: ReadBuffer) -> np.ndarray:
    """The values of ``where`` (flat), read into ``buffer``: valid until its next read."""
    nbytes = where.nbytes
    target = buffer.take(nbytes)
    view = memoryview(target)
    try:
        fd = open_regular(where.path)
    except OSError as e:
        raise FormatError(where.path, f"cannot read: {e.strerror or e}") from None
    try:
        done = 0
        while done < nbytes:
            got = os.preadv(fd, [view[done:]], where.offset + done)
            if got == 0:
                raise FormatError(where.path, f"truncated: {nbytes - done} of {nbytes} bytes missing")
            done += got
    except OSError as e:
        raise FormatError(where.path, f"cannot read: {e.strerror or e}") from None
    finally:
        os.close(fd)
    return target.view(where.dtype)
