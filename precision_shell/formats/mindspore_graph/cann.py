"""CANN binary kernel dumps in a MindSpore graph-mode iteration folder (Ascend, asynchronous dump
without ``file_format: npy``): one file ``{op_type}.{op_name}.{task}.{stream}.{timestamp}`` per
kernel with all its inputs and outputs, read by pshell's dump reader (formats.md §1)."""

from __future__ import annotations

import numpy as np

from ...errors import FormatError
from ..dtypes import numpy_dtype

__all__ = ["cann_tensors", "load_cann_tensor"]


def cann_tensors(path: str) -> list[tuple[str, int, str | None, str, tuple[int, ...]]]:
    """(io, index, numpy dtype name, dump dtype name, logical shape) of each input and output of
    a CANN dump file, from its header (FormatError when it is not one)."""
    from ..dump_file import read_dump_header

    header = read_dump_header(path)
    found = []
    for io, entries in (("input", header.inputs), ("output", header.outputs)):
        for i, entry in enumerate(entries):
            try:
                name = numpy_dtype(entry.dtype, path).name
            except FormatError:
                name = None        # an unknown dtype: its load says so, once
            found.append((io, i, name, entry.dtype_name, tuple(entry.original_shape or entry.shape)))
    return found


def load_cann_tensor(path: str, io: str, index: int) -> np.ndarray:
    """One tensor of a CANN dump file, in its logical layout."""
    from ..dump_file import read_dump, read_logical_array

    header, data = read_dump(path)
    return read_logical_array(header, header.entry(io, index), data=data)
