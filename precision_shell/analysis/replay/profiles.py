"""Arithmetic profiles: how a replay rounds (issue 13, product.md §12).

A profile is a set of rounding rules applied while a reference kernel recomputes an op in
float64. Values stay float64 arrays throughout; "rounding to a format" quantises them to the
values that format can hold (:mod:`.rounding`), so every emulated arithmetic is one code path
and needs numpy only (this module and :mod:`.rounding` are also pasted into the standalone
reproducer script ``replay --export`` writes: they import nothing but numpy).

Fixed semantics, so verdicts are reproducible:

* ``exact``: float64; only the final output is rounded to the output dtype.
* storage (``fp16``, ``bf16``, ``fp32``, ``fp8-e4m3``, ``fp8-e5m2``): inputs and the output are
  rounded to that format (the op computed as if its tensors were stored in it).
* accumulator (``fp16-acc``, ``bf16-acc``, ``fp32-acc``) and ``trunc-mantissa-N``: every
  intermediate result is rounded (to the accumulator format, nearest-even; to float32 range
  with N mantissa bits, toward zero); reductions and dot products run one accumulator
  sequentially over the reduced index (k = 0..K-1), rounding after every add.
* ``ftz``: subnormal inputs, intermediates and outputs are flushed to signed zero.
* ``nearest-even`` / ``toward-zero``: the rounding mode of every rounding above.

* block-scaled inputs (``mxfp8-e4m3``, ``mxfp8-e5m2``, ``mxfp4``, ``nvfp4``): the two operands of
  every dot product are quantized and dequantized by the recipe along the reduced axis (OCP MX
  v1.0: blocks of 32, E8M0 scale 2^(floor(log2 amax) - emax_elem); NVFP4: blocks of 16, E4M3
  scales under a fp32 global scale; elements nearest-even, clamped) before the products;
  ``hif8``: every input rounded to HiFloat8 (ties away, saturating at 2^15).
* ``promote-N``: dot products accumulate N products at a time (in the accumulator of the profile,
  exact without one) and each partial sum is promoted to a float32 accumulator (DeepSeek-V3's
  FP8 GEMM on tensor cores with limited accumulation width).

Profiles combine with commas (``trunc-mantissa-20,ftz``, ``mxfp4,fp32-acc,promote-128``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from .rounding import BLOCK_RECIPES, FORMATS, block_quantize, flush, hifloat8_round, holds, quantize

# profile words naming a format
FORMAT_WORDS = {"fp64": "float64", "fp32": "float32", "fp16": "float16", "bf16": "bfloat16",
                "fp8-e4m3": "float8_e4m3fn", "fp8-e5m2": "float8_e5m2"}
# the profiles a replay tries when none is named, in the order ties are broken
DEFAULT_PROFILES = ("fp32-acc", "fp16-acc", "bf16-acc", "trunc-mantissa-20", "ftz",
                    "trunc-mantissa-20,ftz", "fp16", "bf16", "toward-zero")
_TRUNC = re.compile(r"trunc-mantissa-(\d+)$")
_PROMOTE = re.compile(r"promote-(\d+)$")


def format_of(dtype_name: str) -> str:
    """A numpy/ml_dtypes dtype name as a FORMATS key (integers and bool: float64, exact)."""
    name = str(dtype_name).lower()
    if name in FORMATS:
        return name
    aliases = {"half": "float16", "float": "float32", "double": "float64", "dt_float16": "float16",
               "dt_float": "float32", "dt_bf16": "bfloat16", "dt_double": "float64"}
    return aliases.get(name, "float64")


@dataclass(frozen=True)
class Profile:
    name: str
    storage: str | None = None      # FORMATS key
    acc: str | None = None          # FORMATS key
    trunc: int | None = None        # mantissa bits, float32 range, toward zero
    ftz: bool = False
    toward_zero: bool = False
    block: str | None = None        # BLOCK_RECIPES key or "hif8": how the inputs are quantized
    promote: int | None = None      # products per partial sum promoted to float32

    @property
    def sequential(self) -> bool:
        return self.acc is not None or self.trunc is not None


EXACT = Profile("exact")


def parse_profile(text: str, named: dict[str, str] | None = None, _seen: tuple = ()) -> Profile:
    """``"trunc-mantissa-20,ftz"`` (or a user-named profile) -> Profile; ValueError on a bad word."""
    named = named or {}
    fields: dict = {}
    for word in (w.strip().lower() for w in text.split(",")):
        if not word:
            raise ValueError(f"empty profile word in {text!r}")
        if word in named and word not in _seen:
            sub = parse_profile(named[word], named, _seen + (word,))
            fields.update({k: v for k, v in sub.__dict__.items() if k != "name" and v not in (None, False)})
        elif word == "exact":
            continue
        elif word in FORMAT_WORDS:
            fields["storage"] = FORMAT_WORDS[word]
        elif word.endswith("-acc") and word[:-4] in FORMAT_WORDS:
            fields["acc"] = FORMAT_WORDS[word[:-4]]
        elif _TRUNC.match(word):
            bits = int(_TRUNC.match(word).group(1))
            if not 1 <= bits <= 23:
                raise ValueError(f"trunc-mantissa-N needs 1 <= N <= 23, not {bits}")
            fields["trunc"] = bits
        elif word in BLOCK_RECIPES or word == "hif8":
            fields["block"] = word
        elif _PROMOTE.match(word):
            n = int(_PROMOTE.match(word).group(1))
            if n < 1:
                raise ValueError("promote-N needs N >= 1")
            fields["promote"] = n
        elif word == "ftz":
            fields["ftz"] = True
        elif word in ("toward-zero", "rz"):
            fields["toward_zero"] = True
        elif word in ("nearest-even", "rn"):
            fields["toward_zero"] = False
        else:
            raise ValueError(f"unknown profile {word!r}: use exact, fp16/bf16/fp32/fp8-e4m3/fp8-e5m2, "
                             "fp16-acc/bf16-acc/fp32-acc, trunc-mantissa-N, ftz, toward-zero, "
                             "nearest-even, mxfp8-e4m3/mxfp8-e5m2/mxfp4/nvfp4/hif8, promote-N "
                             "or a name from the config file's [profiles]")
    return Profile(text.strip(), **fields)


class Arith:
    """The rounding a kernel applies under one profile, for an op whose output format is
    ``out_fmt``. Kernels call ``inp`` on inputs, ``r`` after every elementary operation and
    ``sum``/``dot`` for reductions; the engine calls ``out`` on each output."""

    def __init__(self, profile: Profile, out_fmt: str = "float64"):
        self.p, self.out_fmt = profile, out_fmt
        if profile.trunc is not None:
            self.work, self.bits = "float32", profile.trunc
        elif profile.acc is not None:
            self.work, self.bits = profile.acc, None
        else:
            self.work, self.bits = None, None
        self.ftz_fmt = self.work or profile.storage or out_fmt

    @property
    def sequential(self) -> bool:
        return self.p.sequential

    def _flush(self, x):
        return flush(x, self.ftz_fmt) if self.p.ftz else x

    def inp(self, x: np.ndarray, fmt: str | None = None) -> np.ndarray:
        """``fmt``: the format the input's values are known to be in (its dump dtype), if any."""
        x = np.asarray(x, dtype=np.float64)
        if self.p.storage is not None and not (fmt is not None and holds(self.p.storage, fmt)):
            x = quantize(x, self.p.storage, toward_zero=self.p.toward_zero)
        if self.p.block == "hif8":
            x = hifloat8_round(x)
        return self._flush(x)

    def r(self, x) -> np.ndarray:
        """An intermediate result, rounded as the profile says (float64 under exact)."""
        if self.work is None:
            return self._flush(np.asarray(x, dtype=np.float64))
        # trunc-mantissa-N truncates by definition; accumulators follow the rounding mode
        toward_zero = self.p.toward_zero or self.bits is not None
        return quantize(x, self.work, bits=self.bits, toward_zero=toward_zero, ftz=self.p.ftz)

    def out(self, x: np.ndarray, fmt: str) -> np.ndarray:
        """A kernel's result (its last operation already went through ``r``) as the op stores it."""
        y = self._flush(np.asarray(x, dtype=np.float64))
        if self.work == fmt and self.bits is None and self.p.storage is None:
            return y   # already rounded to the output format by r
        if self.p.storage is not None:
            y = quantize(y, self.p.storage, toward_zero=self.p.toward_zero, ftz=self.p.ftz)
            if holds(fmt, self.p.storage):
                return y
        return quantize(y, fmt, toward_zero=self.p.toward_zero, ftz=self.p.ftz)

    def sum(self, x: np.ndarray, axis, keepdims: bool = False) -> np.ndarray:
        """Sum over ``axis`` (int or tuple): float64 at once, or one accumulator per output
        element stepping through the reduced elements in row-major order."""
        axes = tuple(a % x.ndim for a in (axis if isinstance(axis, (tuple, list)) else (axis,)))
        if not self.sequential:
            return self.r(np.sum(x, axis=axes, keepdims=keepdims))
        kept = [d for d in range(x.ndim) if d not in axes]
        # reduced axes first and contiguous: each step reads one whole slice
        moved = np.ascontiguousarray(np.transpose(x, axes + tuple(kept)))
        steps = moved.reshape((-1,) + tuple(x.shape[d] for d in kept))
        acc = self.r(steps[0])
        for k in range(1, steps.shape[0]):
            acc = self.r(acc + steps[k])
        if keepdims:
            acc = acc.reshape(tuple(1 if d in axes else x.shape[d] for d in range(x.ndim)))
        return acc

    def dot(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """``a @ b`` (batched, numpy broadcasting), products and sums rounded under the profile."""
        if self.p.block in BLOCK_RECIPES:   # block-scaled operands, blocks along the reduced axis
            a, b = block_quantize(a, self.p.block, -1), block_quantize(b, self.p.block, -2)
        if self.p.promote is not None:
            return self._promoted_dot(a, b, self.p.promote)
        if not self.sequential:
            return self.r(np.matmul(a, b))
        k_len = a.shape[-1]
        at = np.ascontiguousarray(np.moveaxis(a, -1, 0))      # (K, ..., M)
        bt = np.ascontiguousarray(np.moveaxis(b, -2, 0))      # (K, ..., N)
        acc = self.r(at[0][..., :, None] * bt[0][..., None, :])
        for k in range(1, k_len):
            acc = self.r(acc + self.r(at[k][..., :, None] * bt[k][..., None, :]))
        return acc


    def _partial_dot(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if not self.sequential:
            return np.matmul(a, b)
        acc = self.r(a[..., :, 0:1] * b[..., 0:1, :])
        for k in range(1, a.shape[-1]):
            acc = self.r(acc + self.r(a[..., :, k:k + 1] * b[..., k:k + 1, :]))
        return acc

    def _promoted_dot(self, a: np.ndarray, b: np.ndarray, n: int) -> np.ndarray:
        """Partial sums of ``n`` products (the profile's accumulator), each added to a float32 one."""
        total = None
        for start in range(0, max(1, a.shape[-1]), n):
            part = quantize(self._partial_dot(a[..., start:start + n], b[..., start:start + n, :]), "float32")
            total = part if total is None else quantize(total + part, "float32")
        return total


def apply(kernel, profile: Profile, inputs: list, attrs: dict, out_shapes: list, out_fmts: list,
          values: list | None = None, in_fmts: list | None = None) -> list:
    """Run ``kernel`` under ``profile``: the floating inputs (``values[j]`` true; all when not
    given) through ``inp`` (``in_fmts[j]``: the format input j's values are in, when known),
    integer ones (shapes, axes) as they are; outputs shaped as the NPU's and rounded to their
    formats. ValueError when the replay cannot have the NPU's shapes."""
    ar = Arith(profile, out_fmts[0] if out_fmts else "float64")
    values = values if values is not None else [True] * len(inputs)
    in_fmts = in_fmts if in_fmts is not None else [None] * len(inputs)
    xs = [ar.inp(x, f) if value else np.asarray(x, dtype=np.float64) for x, value, f in zip(inputs, values, in_fmts)]
    ys = kernel(ar, xs, attrs, out_shapes)
    if len(ys) < len(out_shapes):
        raise ValueError(f"the kernel gives {len(ys)} outputs, the dump has {len(out_shapes)}")
    out = []
    for y, shape, fmt in zip(ys, out_shapes, out_fmts):
        y = np.asarray(y, dtype=np.float64)
        if y.shape != tuple(shape):
            if y.size != int(np.prod(shape)):
                raise ValueError(f"replayed output has shape {tuple(y.shape)}, the NPU dump "
                                 f"{tuple(shape)}: inputs and graph disagree")
            y = y.reshape(shape)
        out.append(ar.out(y, fmt))
    return out
