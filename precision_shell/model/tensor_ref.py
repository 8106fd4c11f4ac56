"""Tensor references: ``OP:output:I``, ``OP:input:I``, ``golden:OP:I`` and ``.npy`` paths,
each with an optional numpy slice suffix such as ``[0, :8]`` (product.md §3).

Slices are parsed, never ``eval``-ed: a typo cannot run code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from precision_shell.errors import CommandError, UsageError

_NPU_REF = re.compile(r"^(?P<op>.+):(?P<io>output|input):(?P<idx>\d{1,18})$")
_INT = re.compile(r"^[+-]?\d{1,30}$")  # more digits than any index: a typo, not an index


@dataclass(frozen=True)
class TensorRef:
    kind: str                 # "npu" | "golden" | "file"
    name: str                 # op name as typed, or the file path
    io: str | None = None     # "input" | "output" for npu refs
    index: int = 0
    slice_text: str = ""

    @property
    def text(self) -> str:
        if self.kind == "npu":
            base = f"{self.name}:{self.io}:{self.index}"
        elif self.kind == "golden":
            base = f"golden:{self.name}:{self.index}"
        else:
            base = self.name
        return base + self.slice_text


def split_slice(text: str) -> tuple[str, str]:
    """``'a/b:output:0[0, :4]'`` -> ``('a/b:output:0', '[0, :4]')``."""
    text = text.strip()
    if not text.endswith("]"):
        return text, ""
    depth = 0
    for pos in range(len(text) - 1, -1, -1):
        if text[pos] == "]":
            depth += 1
        elif text[pos] == "[":
            depth -= 1
            if depth == 0:
                return text[:pos], text[pos:]
    raise CommandError(f"unbalanced brackets in {text!r}")


def parse_slice(text: str) -> tuple:
    """Turn ``'[0, 1:3, ..., ::2]'`` into a numpy index tuple."""
    if not text:
        return ()
    inner = text.strip()[1:-1].strip()
    if not inner:
        raise CommandError(f"empty slice {text!r}")
    key: list = []
    for item in (p.strip() for p in inner.split(",")):
        if item == "...":
            key.append(Ellipsis)
        elif item in ("None", "np.newaxis", "newaxis"):
            key.append(None)
        elif ":" in item:
            parts = [p.strip() for p in item.split(":")]
            if len(parts) > 3 or any(p and not _INT.match(p) for p in parts):
                raise CommandError(f"bad slice {item!r} in {text!r}: use start:stop:step with integers")
            bounds = [int(p) if p else None for p in parts]
            if len(bounds) == 3 and bounds[2] == 0:
                raise UsageError(f"bad slice {item!r} in {text!r}: the step cannot be 0")
            key.append(slice(*bounds))
        elif _INT.match(item):
            key.append(int(item))
        else:
            raise CommandError(f"bad index {item!r} in {text!r}: use integers, start:stop:step or ...")
    return tuple(key)


def parse_tensor_ref(text: str) -> TensorRef:
    base, slice_text = split_slice(text)
    parse_slice(slice_text)  # validate early, before any file is read
    if base.startswith("golden:"):
        rest = base[len("golden:"):]
        name, sep, idx = rest.rpartition(":")
        if sep and _INT.match(idx):
            return TensorRef("golden", name, None, int(idx), slice_text)
        return TensorRef("golden", rest, None, 0, slice_text)
    if base.endswith(".npy"):
        return TensorRef("file", base, None, 0, slice_text)
    m = _NPU_REF.match(base)
    if m:
        return TensorRef("npu", m["op"], m["io"], int(m["idx"]), slice_text)
    raise CommandError(f"{text!r} is not a tensor: use OP:output:I, OP:input:I, golden:OP:I "
                       f"or a .npy path, optionally followed by a slice like [0, :8]")


def apply_slice(array: np.ndarray, slice_text: str, label: str) -> np.ndarray:
    key = parse_slice(slice_text)
    if not key:
        return array
    try:
        return array[key]
    except (IndexError, ValueError) as exc:  # out of range, or an index too large for numpy
        raise CommandError(f"{label}{slice_text}: {exc} (shape {tuple(array.shape)})") from None


@dataclass
class ResolvedTensor:
    """Where a reference points, what its headers say, and how to read it."""

    ref: TensorRef
    label: str                          # canonical name, e.g. "fc1/MatMul:output:0"
    path: Path
    dtype: str                          # dtype name as stored ("DT_FLOAT16" or numpy name)
    logical_shape: tuple[int, ...]
    device_format: str | None = None
    device_shape: tuple[int, ...] | None = None
    loader: Callable[[], np.ndarray] | None = None

    def read(self) -> np.ndarray:
        """The logical array (layout restored), sliced as the reference asked."""
        return apply_slice(self.loader(), self.ref.slice_text, self.label)
