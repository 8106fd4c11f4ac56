"""What the file names of a MindSpore graph-mode dump say (framework-dumps.md "MindSpore
graph-mode dumps", product.md §16).

A kernel tensor is ``{op_type}.{op_name}.{task}.{stream}.{timestamp}.{input|output}.{slot}.
{format}.{dtype}.npy``; on Ascend without ``file_format: npy`` a kernel is one CANN binary dump
``{op_type}.{op_name}.{task}.{stream}.{timestamp}`` holding all its tensors. ``op_name`` is the
kernel's full scope name with ``/`` replaced by ``_``, which cannot be undone (``Expand__Muls``
comes from ``Expand/_Muls``): it is matched against the graph's full names (:func:`mangled`),
never split. The fixed fields are read from both ends, so an ``op_name`` holding dots still
parses. Weights and graph inputs are ``Parameter.{name, . -> _}.0.0.{ts}.output.0.{format}.
{dtype}.npy``.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import NamedTuple

from ..msprobe.layout import normalize_dtype

__all__ = ["KernelFile", "mangled", "numpy_dtype_name", "parse_file_name", "PARAMETER"]

PARAMETER = "Parameter"
_OP_TYPE = re.compile(r"[A-Za-z_]\w*\Z", re.ASCII)


class KernelFile(NamedTuple):
    """One dump file, as its name describes it (a tuple: a 50k-kernel iteration has 150k)."""
    name: str            # the file name
    op_type: str         # MatMul, Cast, ..., or Parameter
    op_name: str         # full name with / -> _ (a parameter: its name with . -> _)
    task: int
    stream: int
    timestamp: int
    io: str | None       # input | output; None for a CANN binary dump (all tensors in one file)
    slot: int | None
    format: str | None   # DefaultFormat, NCHW, FRACTAL_NZ ...
    dtype: str | None    # as written: Float32, Float16, BFloat16, Int64, Bool ...

    @property
    def is_npy(self) -> bool:
        return self.io is not None


def parse_file_name(name: str) -> KernelFile | None:
    """The fields of a kernel or parameter file name; None when it is neither."""
    if name.endswith(".npy"):
        # type . op_name... . task . stream . ts . io . slot . format . dtype . npy
        parts = name.rsplit(".", 8)
        if len(parts) < 9:
            return None
        head, task, stream, ts, io, slot, fmt, dtype, _ = parts
        if (io != "input" and io != "output") or not (task.isdecimal() and stream.isdecimal() and ts.isdecimal()
                                                         and slot.isdecimal()):
            return None
        op_type, _, op_name = head.partition(".")
        if not op_name or not _is_type(op_type):
            return None
        return KernelFile(name, op_type, op_name, int(task), int(stream), int(ts), io, int(slot), fmt, dtype)
    # a CANN binary dump: type . op_name... . task . stream . ts
    parts = name.rsplit(".", 3)
    if len(parts) < 4 or not all(p.isdecimal() for p in parts[1:]):
        return None
    op_type, _, op_name = parts[0].partition(".")
    if not op_name or not _is_type(op_type):
        return None
    return KernelFile(name, op_type, op_name, int(parts[1]), int(parts[2]), int(parts[3]), None, None, None, None)


@lru_cache(maxsize=4096)
def _is_type(op_type: str) -> bool:
    return _OP_TYPE.match(op_type) is not None


def mangled(full_name: str) -> str:
    """A graph full name as the dump's file names spell it."""
    return full_name.replace("/", "_")


def numpy_dtype_name(ms_dtype: str | None) -> str | None:
    """numpy / ml_dtypes name of a MindSpore dtype name (``Float16`` -> ``float16``,
    ``BFloat16`` -> ``bfloat16``, ``Bool`` -> ``bool``); None when unknown."""
    if not ms_dtype:
        return None
    return normalize_dtype(ms_dtype)
