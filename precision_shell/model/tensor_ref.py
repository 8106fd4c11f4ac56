"""Tensor references, the one grammar every command accepts and every table prints:

- ``OP:N`` output N, ``OP:inN`` input N (long forms ``OP:output:N`` / ``OP:input:N`` accepted);
- ``golden:GOLDEN_OP:N`` (``golden:GOLDEN_OP:inN`` on framework dumps, whose golden side dumps
  inputs too) with the golden side's own op name: graph mode the name its ``.npy`` files carry
  (``ln1_add_1``; the framework name ``ln1/add_1`` is accepted too), framework mode the golden
  msprobe entry name;
- framework leaves that are not inputs or outputs in msprobe's own long form
  (``ENTRY:parameters:weight``); ``.npy`` paths;

each with an optional numpy slice suffix such as ``[0, :8]`` (product.md §3). :func:`tensor_name`
is the one function that prints a tensor name, so a name on screen pastes back into ``pt``.

Slices are parsed, never ``eval``-ed: a typo cannot run code. A slice error points at its column.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from precision_shell.errors import CommandError, UsageError
from precision_shell.formats.dump_names import escape_op_name
from precision_shell.model.suggest import close_names

if TYPE_CHECKING:      # the names are printed at start-up (ni, toolbar): numpy is not needed for them
    import numpy as np

KINDS = ("output", "input")
_LEAF = r"\d{1,18}(?:\.\d{1,18})*"       # framework leaves nest: input 1.0 = element 0 of arg 1
_SHORT = re.compile(rf"^(?P<op>.+):(?P<inp>in)?(?P<idx>{_LEAF})$")
_LONG = re.compile(rf"^(?P<op>.+):(?P<io>output|input):(?P<idx>{_LEAF})$")
_PARAM = re.compile(r"^(?P<op>.+):(?P<io>parameters):(?P<idx>[\w.]+)$")
_KIND_TYPO = re.compile(r"^(?P<op>.+?):(?P<kind>[A-Za-z_]+):(?P<idx>[^:]*)$")
_SHORT_TYPO = re.compile(r"^(?P<op>.+):(?P<kind>[A-Za-z_]+)(?P<idx>\d{1,18})$")
_INT = re.compile(r"^[+-]?\d{1,30}$")  # more digits than any index: a typo, not an index
GRAMMAR = "OP:N (output N), OP:inN (input N), golden:OP:N or a .npy path"


def tensor_name(op: str, io: str, index: int | str, *, golden: bool = False) -> str:
    """The printed name of a tensor: ``OP:N``, ``OP:inN``, ``golden:OP:N``; other framework
    leaves (parameters) keep msprobe's long form ``OP:parameters:weight``."""
    prefix = "golden:" if golden else ""
    if io == "output":
        return f"{prefix}{op}:{index}"
    if io == "input":
        return f"{prefix}{op}:in{index}"
    return f"{prefix}{op}:{io}:{index}"


def name_of(text: str) -> str:
    """A name kept in the long form (``OP:output:0``, as compare rows and the vendor CSV carry
    it) in the printed form; text in no tensor form is returned as it is."""
    m = _LONG.match(text) or _PARAM.match(text)
    return tensor_name(m["op"], m["io"], m["idx"]) if m else text


def golden_name_of(ref: str | None) -> str:
    """A graph-mode compare row's golden side as printed: ``FRAMEWORK_OP:I`` (the golden .npy
    tensor) -> ``golden:ESCAPED_OP:I``, the name its file carries; another NPU run's
    ``OP:output:I`` (``vc --against``) -> ``OP:I``; none -> ``-``."""
    if not ref:
        return "-"
    if _LONG.match(ref):
        return name_of(ref)
    op, sep, idx = ref.rpartition(":")
    return tensor_name(escape_op_name(op), "output", idx, golden=True) if sep and idx.isdigit() else ref


def golden_json_name(ref: str | None) -> str | None:
    """A compare row's golden side in JSON: the long form, as the NPU side's ``OP:output:I``, and
    with the ``golden:`` prefix the printed name has (``FRAMEWORK_OP:I`` -> ``golden:ESCAPED_OP:
    output:I``; another NPU run's ``OP:output:I`` as it is), so both resolve in ``pt``."""
    if not ref or _LONG.match(ref):
        return ref or None
    op, sep, idx = ref.rpartition(":")
    return f"golden:{escape_op_name(op)}:output:{idx}" if sep and idx.isdigit() else ref


def op_of(text: str) -> str:
    """The op part of an NPU tensor name, slice and all (``ni fc1/MatMul:0[0]`` shows fc1/MatMul);
    other text as is."""
    base = split_slice(text)[0]
    m = _LONG.match(base) or _PARAM.match(base) or _SHORT.match(base)
    return m["op"] if m and not base.startswith("golden:") else base


@dataclass(frozen=True)
class TensorRef:
    kind: str                 # "npu" | "golden" | "file"
    name: str                 # op name as typed, or the file path
    io: str | None = None     # "input" | "output" (| "parameters" on framework dumps)
    index: int = 0
    slice_text: str = ""
    leaf: str = ""            # a framework leaf path that is not a plain index ("1.0", "weight")

    @property
    def text(self) -> str:
        if self.kind == "file":
            return self.name + self.slice_text
        return tensor_name(self.name, self.io or "output", self.leaf or self.index,
                           golden=self.kind == "golden") + self.slice_text


def pointed(text: str, column: int, reason: str) -> CommandError:
    """One error whose lines show ``text`` with a caret under ``column``."""
    error = CommandError(f"{reason} (column {column + 1})\n  {text}\n  {' ' * column}^")
    error.laid_out = True   # its lines are its own: the front end escapes each, keeps the breaks
    return error


def split_slice(text: str) -> tuple[str, str]:
    """``'a/b:0[0, :4]'`` -> ``('a/b:0', '[0, :4]')``."""
    text = text.strip()
    if not text.endswith("]"):
        if "[" in text:
            opened = text.index("[")
            if "]" not in text[opened:]:
                raise pointed(text, len(text), "unclosed '[': ']' expected")
            raise pointed(text, text.rindex("]") + 1, "nothing may follow the slice's ']'")
        return text, ""
    depth = 0
    for pos in range(len(text) - 1, -1, -1):
        if text[pos] == "]":
            depth += 1
        elif text[pos] == "[":
            depth -= 1
            if depth == 0:
                return text[:pos], text[pos:]
    raise pointed(text, len(text) - 1, "']' without its '['")


def parse_slice(text: str, whole: str | None = None, offset: int = 0) -> tuple:
    """Turn ``'[0, 1:3, ..., ::2]'`` into a numpy index tuple; errors point into ``whole`` (the
    reference the slice ends, at ``offset``) when given."""
    if not text:
        return ()
    whole = text if whole is None else whole
    inner = text.strip()[1:-1]
    if not inner.strip():
        raise pointed(whole, offset + 1, "empty slice: give an index, e.g. [0, :8]")
    key: list = []
    at = offset + 1
    for raw in inner.split(","):
        column = at + len(raw) - len(raw.lstrip())
        at += len(raw) + 1
        item = raw.strip()
        if item == "...":
            key.append(Ellipsis)
        elif item in ("None", "np.newaxis", "newaxis"):
            key.append(None)
        elif ":" in item:
            parts = [p.strip() for p in item.split(":")]
            if len(parts) > 3 or any(p and not _INT.match(p) for p in parts):
                raise pointed(whole, column, f"bad slice {item!r}: use start:stop:step with integers")
            bounds = [int(p) if p else None for p in parts]
            if len(bounds) == 3 and bounds[2] == 0:
                raise UsageError(f"bad slice {item!r} in {text!r}: the step cannot be 0")
            key.append(slice(*bounds))
        elif _INT.match(item):
            key.append(int(item))
        else:
            raise pointed(whole, column, f"bad index {item!r}: use integers, start:stop:step or ..."
                          if item else "empty index between commas")
    return tuple(key)


def _index(text: str) -> tuple[int, str]:
    """(index, leaf): a plain index is an int; a nested or named leaf keeps its text."""
    return (int(text), "") if text.isdigit() else (int(text.split(".")[0]) if text[:1].isdigit() else 0, text)


def _kind_typo(base: str, text: str) -> CommandError | None:
    """``OP:outptu:0`` or ``OP:out0``: the kind the user probably meant."""
    m = _KIND_TYPO.match(base)
    if m and m["kind"] not in KINDS + ("parameters",):
        close = close_names(m["kind"], KINDS, 1, 0.5)
        if close:
            short = tensor_name(m["op"], close[0], m["idx"] or 0)
            return CommandError(f"{text!r}: unknown tensor kind {m['kind']!r}; did you mean {close[0]!r} "
                                f"({short})?")
        return CommandError(f"{text!r}: unknown tensor kind {m['kind']!r}: use {GRAMMAR}")
    m = _SHORT_TYPO.match(base)
    if m and m["kind"] != "in":
        meant = "input" if m["kind"].lower().startswith("i") else "output"
        return CommandError(f"{text!r} is not a tensor; did you mean "
                            f"{tensor_name(m['op'], meant, m['idx'])} ({meant} {m['idx']})?")
    return None


def _npu_ref(base: str, text: str) -> tuple[str, str, str] | None:
    """(op, io, index text) of ``OP:N``, ``OP:inN``, ``OP:output:N``, ``OP:input:N``."""
    m = _LONG.match(base) or _PARAM.match(base)
    if m:
        return m["op"], m["io"], m["idx"]
    typo = _kind_typo(base, text)
    if typo is not None:     # before OP:N, which would read OP:outptu:0 as op "OP:outptu"
        raise typo
    m = _SHORT.match(base)
    if m:
        return m["op"], "input" if m["inp"] else "output", m["idx"]
    return None


def parse_tensor_ref(text: str) -> TensorRef:
    base, slice_text = split_slice(text)
    parse_slice(slice_text, text.strip(), len(base))  # validate early, before any file is read
    kind, rest = ("golden", base[len("golden:"):]) if base.startswith("golden:") else ("npu", base)
    if kind == "npu" and base.endswith(".npy"):
        return TensorRef("file", base, None, 0, slice_text)
    found = _npu_ref(rest, text)
    if found is not None:
        op, io, idx = found
        index, leaf = _index(idx)
        return TensorRef(kind, op, io, index, slice_text, leaf)
    if kind == "golden" and ":" not in rest:     # golden:OP is its output 0
        return TensorRef("golden", rest, "output", 0, slice_text)
    raise CommandError(f"{text!r} is not a tensor: use {GRAMMAR}, optionally followed by a slice "
                       f"like [0, :8]")


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
    label: str                          # printed name (tensor_name), e.g. "fc1/MatMul:0"
    path: Path
    dtype: str                          # dtype name as stored ("DT_FLOAT16" or numpy name)
    logical_shape: tuple[int, ...]
    device_format: str | None = None
    device_shape: tuple[int, ...] | None = None
    loader: Callable[[], np.ndarray] | None = None
    op: str | None = None               # the NPU op it belongs to (graph mode), as the graph names it

    def read(self) -> np.ndarray:
        """The logical array (layout restored), sliced as the reference asked."""
        return apply_slice(self.loader(), self.ref.slice_text, self.label)
