"""What ``print_tensor``/``pt`` shows: one tensor's header, statistics, values (numpy printing), elements in
value ranges, a histogram, and saving the (sliced) logical array as ``.npy``."""

from __future__ import annotations

import ast
import math
import re
import shutil
import sys
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np

from precision_shell.analysis.compare.worker import dump_logical_array
from precision_shell.analysis.inspect.histogram import histogram, histogram_lines
from precision_shell.analysis.inspect.node_panel import stats_json
from precision_shell.analysis.compare.tensor import tensor_stats
from precision_shell.atomic_write import write_atomic
from precision_shell.commands.inspect_cmd import graph_file_stem
from precision_shell.commands.results import Sections
from precision_shell.errors import CommandError, FormatError
from precision_shell.formats.dtypes import npy_ready
from precision_shell.model.session import Session
from precision_shell.model.tensor_ref import ResolvedTensor, apply_slice, split_slice
from precision_shell.model.tensor_resolve import resolve_tensor

# numpy's own summarisation threshold: beyond it, values print as "first ... last"
SUMMARY_THRESHOLD = 1000
JSON_VALUES_MAX = 1000
_TARGET_FORMATS = frozenset({"NCHW", "NHWC", "HWCN", "CHWN", "NCDHW", "NDHWC", "DHWCN"})
# In-range elements are wrapped in these while formatting; rendering turns them into a marker
# (plain text) or a colour (terminal), so one formatting pass serves both.
MARK_START, MARK_END = "\x01", "\x02"


# ---------------------------------------------------------------------------------------------
# ranges

def parse_ranges(text: str) -> list[tuple[float, float]]:
    """``"[[-inf,-1],[1,inf]]"``, ``"[0,1e-8]"`` or ``"0,1e-8"`` -> [(lo, hi), ...] (inclusive).

    Parsed as a Python literal (never evaluated as code) after spelling inf as 1e999."""
    cleaned = re.sub(r"(?i)\binf(inity)?\b", "1e999", text.strip())
    try:
        value = ast.literal_eval(cleaned)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        raise CommandError(f"bad range {text!r}: use [LO,HI] or [[LO,HI],[LO,HI]] with numbers or inf") from None

    def is_num(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v)

    if isinstance(value, (list, tuple)) and len(value) == 2 and all(is_num(v) for v in value):
        value = [value]
    if not isinstance(value, (list, tuple)) or not value:
        raise CommandError(f"bad range {text!r}: use [LO,HI] or [[LO,HI],[LO,HI]]")
    ranges = []
    for pair in value:
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2 and all(is_num(v) for v in pair)):
            raise CommandError(f"bad range {pair!r} in {text!r}: each range is [LO,HI]")
        lo, hi = float(pair[0]), float(pair[1])
        if lo > hi:
            raise CommandError(f"bad range [{pair[0]}, {pair[1]}] in {text!r}: LO is above HI")
        ranges.append((lo, hi))
    return ranges


def count_in_ranges(array: np.ndarray, ranges: list[tuple[float, float]], chunk: int = 1 << 20) -> int:
    flat = array.reshape(-1)
    total = 0
    for start in range(0, flat.size, chunk):
        part = flat[start:start + chunk].astype(np.float64, copy=False)
        mask = np.zeros(part.shape, dtype=bool)
        for lo, hi in ranges:
            mask |= (part >= lo) & (part <= hi)
        total += int(mask.sum())
    return total


# ---------------------------------------------------------------------------------------------
# reading only what is needed

def _target_format(session: Session, resolved: ResolvedTensor) -> str | None:
    """The layout the graph says the logical shape is written in (NHWC for TF convs...)."""
    graph, ref = session.graph, resolved.ref
    if graph is None or ref.kind != "npu":
        return None
    op = graph.ops.get(resolved.op)
    if op is None:
        return None
    if ref.io == "output":
        desc = op.outputs[ref.index] if ref.index < len(op.outputs) else None
    else:
        desc = op.inputs[ref.index].desc if ref.index < len(op.inputs) else None
    fmt = getattr(desc, "origin_format", None)
    return fmt.upper() if isinstance(fmt, str) and fmt.upper() in _TARGET_FORMATS else None


def read_tensor(session: Session, resolved: ResolvedTensor) -> np.ndarray:
    """The referenced tensor, sliced, as an in-memory array.

    Dumps in plain layouts and .npy files are memory-mapped and sliced before anything is
    copied, so ``pt big:output:0[0, :4]`` reads a few pages, not the whole tensor. Device layouts
    (NC1HWC0, FRACTAL_*) need the whole tensor to restore the logical order."""
    ref = resolved.ref
    if ref.kind == "npu":
        dump = session.op_dump(resolved.op)
        header = session.dumps.header(dump)
        entry = header.entry(ref.io, ref.index)
        base = dump_logical_array(header, entry, _target_format(session, resolved))
    else:
        base = resolved.loader()
    sliced = apply_slice(base, ref.slice_text, resolved.label)
    try:
        return np.array(sliced)   # the copy: only the selected elements leave the page cache
    except OSError as exc:
        raise FormatError(resolved.path, f"cannot read ({exc.strerror or exc})") from None


def _resolve(session: Session, text: str) -> ResolvedTensor:
    try:
        return resolve_tensor(session, text)
    except CommandError:
        # a bare op name (tfdbg habit): its output 0
        base, slice_text = split_slice(text)
        if ":" in base or base.endswith(".npy") or session.graph is None or not session.graph.find(base):
            raise
        return resolve_tensor(session, f"{base}:0{slice_text}")


# ---------------------------------------------------------------------------------------------
# values

def _element_text(array: np.ndarray, threshold: int) -> Callable[[Any], str]:
    """A per-element formatter close to numpy's own (decimal points aligned), computed from the
    elements numpy will actually show, so summarised huge arrays cost nothing extra."""
    seen: list[Any] = []
    opts = dict(threshold=threshold, edgeitems=3, formatter={"all": lambda x: seen.append(x) or "x"})
    np.array2string(array, **opts)
    if array.dtype.kind == "f":
        finite = [abs(float(v)) for v in seen if math.isfinite(float(v)) and v != 0]
        big, small = (max(finite), min(finite)) if finite else (0.0, 0.0)
        # numpy's rule for switching the whole array to scientific notation
        sci = bool(finite) and (big >= 1e8 or small < 1e-4 or big / small > 1e3)
        prec = 4 if array.dtype.itemsize <= 2 else 8
        if sci:
            # one mantissa precision for all elements (the most any element needs), as numpy does
            shortest = [np.format_float_scientific(v, precision=prec, unique=True, trim="-")
                        for v in seen if math.isfinite(float(v))]
            digits = max((len(t.split("e")[0].partition(".")[2]) for t in shortest), default=0)

            def fmt(x: Any) -> str:
                v = float(x)
                if not math.isfinite(v):
                    return str(v)
                return np.format_float_scientific(x, precision=digits, unique=False,
                                                  trim="k" if digits else "-")
        else:
            def fmt(x: Any) -> str:
                v = float(x)
                if not math.isfinite(v):
                    return str(v)
                if v.is_integer():
                    # exactly: the shortest string that round-trips an fp16 8192 is "8190."
                    # (numpy's), which reads as another number beside the header's 8192.0
                    return f"{int(v)}."
                # the numpy scalar, not float(x): "unique" must mean shortest for ITS dtype
                return np.format_float_positional(x, precision=prec, unique=True, trim=".")
    else:
        fmt = str
    texts = [fmt(v) for v in seen]
    left = max((len(t.partition(".")[0]) for t in texts), default=0)
    right = max((len(t.partition(".")[2]) for t in texts), default=0)

    def aligned(x: Any) -> str:
        # decimal points in one column: integer part right-aligned, fraction left-aligned
        t = fmt(x)
        head, dot, tail = t.partition(".")
        if dot:
            return head.rjust(left) + dot + tail.ljust(right)
        return t.rjust(left) + " " * (right + 1 if right else 0)
    return aligned


def values_text(array: np.ndarray, *, full: bool, ranges: list[tuple[float, float]] | None,
                width: int) -> str:
    """numpy's printing; with ranges, in-range elements wrapped in MARK_START/MARK_END."""
    threshold = sys.maxsize if full else SUMMARY_THRESHOLD
    if not ranges:
        return np.array2string(array, threshold=threshold, edgeitems=3, max_line_width=width)
    base = _element_text(array, threshold)

    def mark(x: Any) -> str:
        v = float(x)
        hit = any(lo <= v <= hi for lo, hi in ranges)
        # non-hits get a trailing space where hits get their marker, keeping columns aligned
        return f"{MARK_START}{base(x)}{MARK_END}" if hit else f"{base(x)} "
    return np.array2string(array, threshold=threshold, edgeitems=3, max_line_width=width,
                           formatter={"all": mark})


def plain_marks(line: str) -> str:
    return line.replace(MARK_START, "").replace(MARK_END, "*")


@dataclass
class TensorPrint(Sections):
    """``pt`` output. ``marked_values`` keeps the in-range marks so a terminal front end can
    colour them (``styled``); the plain blocks show them as a trailing ``*``."""

    marked_values: list[str] = field(default_factory=list)
    interrupted: bool = False       # `pt -a` stopped by Ctrl-C: the values are partial

    def styled(self, style: Any) -> Sections:
        if not self.marked_values:
            return self
        coloured = [line.replace(MARK_START, "\x00").replace(MARK_END, "\x03") for line in self.marked_values]
        coloured = [re.sub("\x00(.*?)\x03", lambda m: style(m.group(1), "bold_red") + " ", line)
                    for line in coloured]
        blocks = [(h, coloured if h == "values" else b) for h, b in self.blocks]
        return replace(self, blocks=blocks, marked_values=[])


def _json_values(array: np.ndarray) -> Any:
    if array.dtype.isbuiltin == 2:   # ml_dtypes: bfloat16, float8
        array = array.astype(np.float32)
    return array.tolist()


def _display_array(array: np.ndarray) -> tuple[np.ndarray, str | None]:
    """bfloat16 and float8 (ml_dtypes) print oddly in numpy; float32 holds their values exactly."""
    if array.dtype.isbuiltin == 2:
        return array.astype(np.float32), f"{array.dtype.name} values shown as float32 (exact)"
    return array, None


def _save(session: Session, given: str, label: str, array: np.ndarray) -> tuple[str, str | None]:
    name = given or f"{graph_file_stem(label)}.npy"
    if not name.endswith(".npy"):
        name += ".npy"
    path = session.output_path(name if given else None, name)
    note = None
    # .npy has no bfloat16 or float8 type (they would be stored as raw void bytes)
    array, note = npy_ready(array)
    write_atomic(path, lambda fh: np.lib.format.write_array(fh, np.ascontiguousarray(array),
                                                            allow_pickle=False), binary=True)
    return str(path), note


def _num(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _shape(shape: Any) -> str:
    return "-" if shape is None else "(" + ", ".join(str(d) for d in shape) + ")"


def print_tensor(session: Session, args: Any) -> TensorPrint:
    """The ``pt`` command (registered in tensor_cmd, which imports this module on first use)."""
    if args.lines < 0:
        raise CommandError("-l must be 0 (no limit) or a positive number")
    ranges = parse_ranges(args.ranges) if args.ranges is not None else None
    resolved = _resolve(session, args.tensor)
    array = read_tensor(session, resolved)
    label = resolved.label + resolved.ref.slice_text
    lowbit = _lowbit_format(resolved.dtype)
    shown_dtype = array.dtype if lowbit is None or array.dtype.name == lowbit.name else \
        f"{lowbit.name}, decoded to {array.dtype}"
    header = [("tensor", label), ("file", str(resolved.path)), ("dtype", f"{resolved.dtype} ({shown_dtype})")]
    if resolved.device_format is not None:
        header.append(("device", f"{resolved.device_format} {_shape(resolved.device_shape)}"))
    header.append(("logical shape", _shape(resolved.logical_shape)))
    if resolved.ref.slice_text:
        header.append(("slice shape", _shape(array.shape)))
    data: dict[str, Any] = {
        "tensor": label, "file": str(resolved.path), "dtype": resolved.dtype, "numpy_dtype": str(array.dtype),
        "device_format": resolved.device_format,
        "device_shape": list(resolved.device_shape) if resolved.device_shape is not None else None,
        "logical_shape": list(resolved.logical_shape),
    }
    return array_panel(session, args, array, label, header, data, ranges=ranges,
                       save_name=resolved.label, lowbit=lowbit)


def _lowbit_format(dtype: str):
    """The low-precision format (formats/lowbit) of a dump dtype name, or None."""
    from precision_shell.formats.dtypes import dtype_name
    from precision_shell.formats.lowbit import FORMATS

    return next((f for f in FORMATS if dtype_name(f.dtype_code) == dtype), None)


def array_panel(session: Session, args: Any, array: np.ndarray, label: str,
                header: list[tuple[str, str]], data: dict[str, Any], *,
                ranges: list[tuple[float, float]] | None = None, save_name: str, lowbit=None) -> TensorPrint:
    """What ``pt`` shows of an array after its own ``header`` rows (also ``eval``'s result):
    statistics, values (``-a``, ``-s``, ``-l``), ranges, ``--hist`` and ``-w`` (file name from
    ``save_name`` when none is given)."""
    stats = tensor_stats(array, saturation=lowbit.max_finite if lowbit is not None else None)
    stat_rows = [("count", f"{stats.count:,}"), ("min", _num(stats.min)), ("max", _num(stats.max)),
                 ("mean", _num(stats.mean)), ("std", _num(stats.std)),
                 ("nan / +inf / -inf", f"{stats.nan:,} / {stats.pos_inf:,} / {stats.neg_inf:,}"),
                 ("zero", f"{stats.zero:,}")]
    if array.dtype == np.float16:
        stat_rows.append(("±65504 (fp16 max)", f"{stats.fp16_saturated:,}"))
    elif lowbit is not None:   # the format's saturation codes: its largest finite magnitude
        stat_rows.append((f"±{lowbit.max_finite:g} ({lowbit.name} max)", f"{stats.fp16_saturated:,}"))
    data = {**data, "shape": list(array.shape), "stats": stats_json(stats)}
    blocks: list[tuple[str, Any]] = [("", header), ("stats", stat_rows)]
    notes: list[str] = []
    if ranges is not None:
        hits = count_in_ranges(array, ranges)
        spans = ", ".join(f"[{lo:g}, {hi:g}]" for lo, hi in ranges)
        stat_rows.append(("in ranges", f"{hits:,} of {stats.count:,} in {spans}"))
        data["ranges"] = [list(r) for r in ranges]
        data["in_range"] = hits
    marked: list[str] = []
    values_json = None
    interrupted = False
    if not args.stats:
        shown, note = _display_array(array)
        if note:
            notes.append(note)
        width = max(60, min(200, shutil.get_terminal_size((120, 24)).columns))
        if args.at is not None:
            marked = _window(shown, args.at, header, data)
        elif args.all and shown.ndim >= 1 and shown.size:
            rows = _all_rows(session, shown, ranges, width, args.lines)
            marked = rows.lines if rows is not None else \
                values_text(shown, full=True, ranges=ranges, width=width).split("\n")
            if rows is not None and rows.interrupted:
                interrupted = True
                notes.append(f"interrupted: {rows.rows_done:,} of {rows.rows_total:,} rows printed (Ctrl-C)")
        else:
            marked = values_text(shown, full=args.all, ranges=ranges, width=width).split("\n")
        if args.lines and len(marked) > args.lines:
            # -a stops formatting once -l is reached, so how many lines remain is not known
            more = "" if args.all and args.at is None else f" {len(marked) - args.lines}"
            notes.append(f"...{more} more lines (-l 0 shows all)")
            marked = marked[:args.lines]
        if args.all or array.size <= JSON_VALUES_MAX:
            values_json = _json_values(array)
        elif array.size > SUMMARY_THRESHOLD:
            notes.append(f"{array.size:,} values summarised with ...; -a prints all, a slice narrows")
        blocks.append(("values", [plain_marks(line) for line in marked]))
    data["values"] = values_json
    if args.hist:
        hist = histogram(array)
        blocks.append(("histogram", histogram_lines(hist)))
        data["histogram"] = hist.to_json()
    if args.write is not None:
        path, note = _save(session, args.write, save_name, array)
        notes.append(f"saved {_shape(array.shape)} {array.dtype} to {path}" + (f" ({note})" if note else ""))
        data["saved"] = path
    if notes:
        blocks.append(("notes", notes))
    return TensorPrint(title=label, blocks=blocks, data=data, marked_values=marked, interrupted=interrupted)


def _all_rows(session: Session, array: np.ndarray, ranges: list[tuple[float, float]] | None,
              width: int, lines: int):
    """``-a``: the rows with their indices (tensor_rows); None when numpy's text has an
    unexpected layout (the values are then printed without indices)."""
    from precision_shell.commands.tensor_rows import indexed_rows

    def fmt(chunk: np.ndarray, room: int) -> str:
        return values_text(chunk, full=True, ranges=ranges, width=room)
    try:
        return indexed_rows(array, fmt, width, session.progress, lines)
    except ValueError:
        return None


def _window(array: np.ndarray, at: str, header: list[tuple[str, str]], data: dict[str, Any]) -> list[str]:
    """``--at I,J``: the element's index and value in the header, the window around it as the
    values (the element marked like an in-range value)."""
    from precision_shell.commands.tensor_rows import parse_index, window_around

    index = parse_index(at, array.shape)
    window = window_around(array, index, lambda block: _element_text(block, sys.maxsize),
                           (MARK_START, MARK_END))
    value = array[index]
    where = "[" + ", ".join(map(str, index)) + "]"
    header.append(("element", f"{where} = {value}"))
    data["at"] = {"index": list(index), "value": _json_values(np.asarray(value)),
                  "rows": list(window.rows), "columns": list(window.columns),
                  "window": _json_values(window.values)}
    return window.lines
