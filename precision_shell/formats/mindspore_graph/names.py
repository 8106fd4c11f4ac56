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
from dataclasses import dataclass

from ..msprobe_layout import normalize_dtype

__all__ = ["KernelFile", "mangled", "numpy_dtype_name", "parse_file_name", "PARAMETER"]

PARAMETER = "Parameter"
_NUMBER = re.compile(r"\d+\Z")
_OP_TYPE = re.compile(r"[A-Za-z_][\w]*\Z")


@dataclass(frozen=True, slots=True)
class KernelFile:
    """One dump file, as its name describes it."""
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
    parts = name.split(".")
    if name.endswith(".npy"):
        # type . op_name... . task . stream . ts . io . slot . format . dtype . npy
        if len(parts) < 10:
            return None
        task, stream, ts, io, slot, fmt, dtype = parts[-8:-1]
        if io not in ("input", "output") or not all(_NUMBER.match(p) for p in (task, stream, ts, slot)):
            return None
        op_name, io_, slot_ = ".".join(parts[1:-8]), io, int(slot)
    else:
        # a CANN binary dump: type . op_name... . task . stream . ts
        if len(parts) < 5 or not all(_NUMBER.match(p) for p in parts[-3:]):
            return None
        task, stream, ts = parts[-3:]
        op_name, io_, slot_, fmt, dtype = ".".join(parts[1:-3]), None, None, None, None
    if not _OP_TYPE.match(parts[0]) or not op_name:
        return None
    return KernelFile(name, parts[0], op_name, int(task), int(stream), int(ts), io_, slot_, fmt, dtype)


def mangled(full_name: str) -> str:
    """A graph full name as the dump's file names spell it."""
    return full_name.replace("/", "_")


def numpy_dtype_name(ms_dtype: str | None) -> str | None:
    """numpy / ml_dtypes name of a MindSpore dtype name (``Float16`` -> ``float16``,
    ``BFloat16`` -> ``bfloat16``, ``Bool`` -> ``bool``); None when unknown."""
    if not ms_dtype:
        return None
    return normalize_dtype(ms_dtype)
