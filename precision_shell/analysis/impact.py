"""``impact``: how much of the final error each root explains (product.md §18, issue 28).

For a set of substituted ops, their outputs become the golden values (through the pairing,
reshaped to the NPU's logical shape, rounded to the NPU dtype their consumers read); every op
downstream is recomputed in execution order with replay's reference kernels at the NPU's
dtypes (the ``exact`` profile: float64 arithmetic, each output rounded to its dump dtype),
each input taken from the recomputed values when its producer was recomputed and from the
consumer's own dump otherwise. The measured tensors (the network outputs downstream, or the
outputs of ``--to OP``) are compared with golden before (the NPU dumps) and after.

- error: relative L2, ``||x - g|| / ||g||`` over the measured tensors together; an element that
  is non-finite on one side only (or non-finite differently: inf vs NaN, +inf vs -inf) makes it
  inf; elements non-finite alike on both sides are left out.
- share_removed = 1 - after / before; before inf and after finite: 1 (note says so); both inf: 0;
  before finite and after inf, or before 0: None (note says why).
- An op without a kernel is ``unrecomputable``: its outputs stay the dumped ones (the path is
  cut there) and it is named.
- self_check: the same recomputation with nothing substituted, against the NPU dumps of the
  measured tensors (relative L2); above :data:`SELF_CHECK_LIMIT`, or above half of an error
  before, the numbers are unreliable (:func:`reliable`).

Streams op by op: a recomputed tensor is freed once its last recomputed consumer has run.
Pure over a :class:`~precision_shell.model.runs.Run`, its :class:`Pairing` and a golden loader.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .replay.calls import CONTAINER_PREFIXES, NoKernel, op_call
from .replay.profiles import EXACT, apply, format_of
from .replay.rounding import quantize

SELF_CHECK_LIMIT = 1e-2
DEFAULT_MAX_OPS = 10_000


class ImpactError(ValueError):
    """One root or request that cannot be measured (one line: op and reason)."""


@dataclass
class ImpactRow:
    op: str                          # the root, or "together"
    roots: list[str]
    measured: list[str]              # printed names of the measured tensors
    error_before: float | None
    error_after: float | None
    share_removed: float | None
    unrecomputable: list[str] = field(default_factory=list)
    recomputed: int = 0
    note: str = ""


@dataclass
class SelfCheck:
    error: float | None              # relative L2 of the recomputation vs the NPU dumps
    measured: list[str]
    reliable: bool


def in_scope(op: Any) -> bool:
    """Ops that compute values: kernels and forward API calls (module entries repeat the values
    of the calls inside them; backward entries are another pass)."""
    return op.kind in ("kernel", "forward") and not op.type.startswith(CONTAINER_PREFIXES)


class _Error:
    """Running sums of a relative L2 over several tensors."""

    def __init__(self):
        self.diff, self.ref, self.bad = 0.0, 0.0, False

    def add(self, x: np.ndarray, ref: np.ndarray) -> None:
        x = np.asarray(x, dtype=np.float64).reshape(-1)
        ref = np.asarray(ref, dtype=np.float64).reshape(-1)
        fx, fr = np.isfinite(x), np.isfinite(ref)
        both = fx & fr
        if (fx != fr).any() or not np.array_equal(x[~fx], ref[~fr], equal_nan=True):
            self.bad = True
        d = x[both] - ref[both]
        self.diff += float(d @ d)
        self.ref += float(ref[both] @ ref[both])

    def value(self) -> float:
        if self.bad:
            return float("inf")
        if self.ref == 0.0:
            return 0.0 if self.diff == 0.0 else float("inf")
        return float(np.sqrt(self.diff / self.ref))


def share_of(before: float, after: float) -> tuple[float | None, str]:
    if np.isinf(before):
        return (0.0, "still non-finite after substitution") if np.isinf(after) else \
            (1.0, "non-finite before, finite after: share 1")
    if np.isinf(after):
        return None, "finite before, non-finite after"
    if before == 0.0:
        return None, "no error to remove"
    return 1.0 - after / before, ""


class Impact:
    """The recomputations of one run. ``load_golden(tensor)`` gives a golden tensor's values
    (the pairing's tensor), ``progress(n)`` is called after each recomputed op."""

    def __init__(self, run: Any, pairing: Any, load_golden: Callable[[Any], np.ndarray], *,
                 max_ops: int = DEFAULT_MAX_OPS, progress: Callable[[int], None] | None = None):
        self.run, self.pairing, self.load_golden = run, pairing, load_golden
        self.max_ops, self.progress = max_ops, progress
        self.unrecomputable: dict[str, str] = {}       # op -> why (first time seen)
        self.cast_notes: dict[str, str] = {}           # substituted tensor -> its golden overflowed the NPU dtype
        self._calls: dict[str, Any] = {}
        self.peak_live = 0          # most recomputed tensors held at once (streaming: a few)

    # --- the graph ------------------------------------------------------------------------------
    def _consumers(self, op: str) -> list:
        return [e for e in self.run.consumers(op) if in_scope(self.run.op(e.dst_op))]

    def downstream(self, roots: list[str]) -> list[str]:
        """In-scope ops reachable from ``roots`` (not the roots), in execution order; sinks
        without outputs (GE's NetOutput) compute nothing and are left out."""
        seen: set[str] = set()
        stack = list(roots)
        while stack:
            for e in self._consumers(stack.pop()):
                if e.dst_op not in seen and e.dst_op not in roots and self.run.op(e.dst_op).outputs:
                    seen.add(e.dst_op)
                    stack.append(e.dst_op)
        return [o.name for o in self.run.ops if o.name in seen]

    def _has_sink(self) -> bool:
        return any(not o.outputs and o.inputs and in_scope(o) for o in self.run.ops)

    def finals(self, ops: list[str]) -> list[str]:
        """Network outputs among ``ops``' outputs: tensors a sink op (one without outputs, GE's
        NetOutput) reads, or, in runs without one, outputs no in-scope op reads."""
        sink = self._has_sink()
        out = []
        for name in ops:
            edges = self._consumers(name)
            for t in self.run.op(name).outputs:
                if t.io != "output":
                    continue
                readers = [e for e in edges if e.src == t.name]
                if sink:
                    all_edges = [e for e in self.run.consumers(name) if e.src == t.name]
                    sinks = [self.run.op(e.dst_op) for e in all_edges]
                    if any(not o.outputs and in_scope(o) for o in sinks):
                        out.append(t.name)
                elif not readers:
                    out.append(t.name)
        return out

    def _call(self, op: str):
        if op not in self._calls:
            try:
                self._calls[op] = op_call(self.run, self.run.op(op))
            except NoKernel as exc:
                self._calls[op] = None
                self.unrecomputable.setdefault(op, str(exc))
        return self._calls[op]

    # --- values ---------------------------------------------------------------------------------
    def golden_output(self, tensor: Any, cast: bool = True) -> np.ndarray:
        """The golden of an NPU output, shaped as the NPU's and (``cast``) rounded to its dtype."""
        found = self.pairing.golden_for(tensor) if self.pairing is not None else None
        if found is None:
            raise ImpactError(f"{tensor.printed()} has no golden tensor")
        if not found.has_data:
            raise ImpactError(f"{tensor.printed()}: its golden {found.printed(golden=True)} has no values dumped "
                              "(statistics only)")
        g = np.asarray(self.load_golden(found), dtype=np.float64)
        shape = tensor.shape
        if shape is not None and tuple(shape) != g.shape:
            if int(np.prod(shape)) != g.size:
                raise ImpactError(f"{tensor.printed()} has shape {tuple(shape)}, its golden "
                                  f"{found.printed(golden=True)} {g.shape}: shapes do not match")
            g = g.reshape(shape)
        if not cast:
            return g
        fmt = format_of(tensor.dtype or "float64")
        rounded = quantize(g, fmt)
        lost = int((np.isfinite(g) & ~np.isfinite(rounded)).sum())
        if lost:
            self.cast_notes[tensor.name] = (f"the golden of {tensor.printed()} does not fit in {fmt} ({lost:,} of "
                                            f"{g.size:,} values overflow when cast): no {fmt} value fixes it; keep "
                                            f"{tensor.op} in a wider dtype")
        return rounded

    def recompute(self, roots: list[str], substitute: bool, measured: list[str]) -> tuple[dict, list[str], int]:
        """(values of the measured tensors, unrecomputable ops on the path, ops recomputed)."""
        ops = self.downstream(roots)
        if len(ops) > self.max_ops:
            raise ImpactError(f"{len(ops):,} ops downstream of {', '.join(roots)}: more than --max-ops "
                              f"{self.max_ops:,}")
        values: dict[str, np.ndarray] = {}
        for r in roots:      # substituted: golden; self-check: the NPU's own dumps
            read = {e.src for e in self._consumers(r)}
            for t in self.run.op(r).outputs:
                if t.io == "output" and (t.name in read or t.name in measured):
                    values[t.name] = self.golden_output(t) if substitute else np.asarray(self.run.load(t.name))
        freed_after = self._frees(ops, set(measured))
        cut: list[str] = []
        done = 0
        for i, name in enumerate(ops):
            call = self._call(name)
            if call is None:
                cut.append(name)
                continue
            edges = [self.run.producer(x) if isinstance(x, str) else None for x in call.inputs]
            if not any(e is not None and e.src in values for e in edges):
                continue     # reached only through a cut op: its outputs stay the dumped ones
            xs, flags = [], []
            for x, edge in zip(call.inputs, edges):
                if isinstance(x, str):
                    array = values.get(edge.src) if edge is not None else None
                    array = np.asarray(self.run.load(x)) if array is None else array
                    flags.append(array.dtype.kind == "f" or array.dtype.name == "bfloat16")
                else:
                    array = x
                    flags.append(False)
                xs.append(array)
            shapes = [s if s is not None else np.shape(self.run.load(o))
                      for s, o in zip(call.output_shapes, call.outputs)]
            fmts = [format_of(d) for d in call.output_dtypes]
            try:
                ys = apply(call.kernel, EXACT, xs, call.attrs, shapes, fmts, flags)
            except (ValueError, IndexError, TypeError) as exc:
                raise ImpactError(f"{name}: the {call.type} kernel cannot run on these inputs: {exc}") from None
            for o, y in zip(call.outputs, ys):
                values[o] = y
            self.peak_live = max(self.peak_live, len(values))
            done += 1
            for t in freed_after.get(i, ()):
                values.pop(t, None)
            if self.progress is not None:
                self.progress(done)
        return {m: values[m] for m in measured if m in values}, cut, done

    def _frees(self, ops: list[str], kept: set[str]) -> dict[int, list[str]]:
        """Position in ``ops`` -> the tensors whose last reader it is (the measured ones kept)."""
        last: dict[str, int] = {}
        for i, name in enumerate(ops):
            for e in self.run.producers(name):
                last[e.src] = i
        frees: dict[int, list[str]] = {}
        for tensor, i in last.items():
            if tensor not in kept:
                frees.setdefault(i, []).append(tensor)
        return frees

    # --- measuring ------------------------------------------------------------------------------
    def _error(self, measured: list[str], values: dict, against_golden: bool = True) -> float:
        err = _Error()
        for m in measured:
            t = self.run.tensor(m)
            x = values[m] if m in values else np.asarray(self.run.load(m))
            ref = self.golden_output(t, cast=False) if against_golden else np.asarray(self.run.load(m), np.float64)
            err.add(np.asarray(x, dtype=np.float64).reshape(-1), np.asarray(ref).reshape(-1))
        return err.value()

    def measured_for(self, roots: list[str], to: str | None) -> list[str]:
        ops = self.downstream(roots)
        if to is not None:
            target = self.run.op(to).name
            if target not in ops and target not in roots:
                raise ImpactError(f"{', '.join(roots)} is not upstream of {target}: nothing to measure")
            return [t.name for t in self.run.op(target).outputs if t.io == "output"]
        found = self.finals(list(roots) + ops)
        if not found:
            raise ImpactError(f"{', '.join(roots)}: no network output downstream")
        return found

    def row(self, label: str, roots: list[str], to: str | None) -> ImpactRow:
        measured = self.measured_for(roots, to)
        for m in measured:      # a golden for every measured tensor, before any work
            self.golden_output(self.run.tensor(m), cast=False)
        before = self._error(measured, {})
        values, cut, done = self.recompute(roots, True, measured)
        after = self._error(measured, values)
        share, note = share_of(before, after)
        overflowed = [n for t, n in self.cast_notes.items() if self.run.tensor(t).op in roots]
        note = "; ".join(filter(None, [note] + overflowed))
        if cut:
            note = "; ".join(filter(None, [note, f"path cut at {len(cut)} op(s) without a kernel: "
                                                 "their outputs are the dumped ones"]))
        return ImpactRow(label, list(roots), [self.run.tensor(m).printed() for m in measured],
                         before, after, share, cut, done, note)

    def self_check(self, roots: list[str], to: str | None) -> SelfCheck:
        measured = self.measured_for(roots, to)
        values, _, _ = self.recompute(roots, False, measured)
        error = self._error(measured, values, against_golden=False) if values else None
        return SelfCheck(error, [self.run.tensor(m).printed() for m in measured],
                         error is None or error <= SELF_CHECK_LIMIT)


def reliable(check: SelfCheck, rows: list[ImpactRow]) -> bool:
    """The self-check is small: under :data:`SELF_CHECK_LIMIT` and under half of every finite
    error before (else the recomputation's own error is as large as what it measures)."""
    if check.error is None:
        return True
    befores = [r.error_before for r in rows if r.error_before is not None and np.isfinite(r.error_before)]
    return check.error <= SELF_CHECK_LIMIT and all(check.error <= 0.5 * b for b in befores)


def impact_rows(impact: Impact, roots: list[str], to: str | None, together: bool,
                problems: list[str]) -> Iterator[ImpactRow]:
    """A row per root, then one for all of them together (when several, or ``together``); a
    root that cannot be measured adds one line to ``problems`` and the rest go on."""
    measurable = []
    for r in roots:
        try:
            yield impact.row(r, [r], to)
            measurable.append(r)
        except ImpactError as exc:
            problems.append(str(exc))
    if len(measurable) > 1 or (together and measurable):
        try:
            yield impact.row("together", measurable, to)
        except ImpactError as exc:
            problems.append(str(exc))
