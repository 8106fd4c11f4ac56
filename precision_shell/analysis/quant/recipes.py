"""Quantization recipes, as their definitions say (docs/low-precision.md cites them).

Every recipe returns the dequantized values (what the recipe lets a kernel see), the scale of
each block (dequantization multiplier X: value ~= element * X) and which elements saturated.

* ``fp8-e4m3`` / ``fp8-e5m2``: per-tensor current scaling (Transformer Engine's
  ``Float8CurrentScaling``): X = amax / max_elem over the whole tensor (X = 1 when amax is 0),
  elements round to nearest-even.
* ``mxfp8-e4m3`` / ``mxfp8-e5m2`` / ``mxfp4``: OCP Microscaling Formats (MX) v1.0 §6.3: blocks of
  32 along the reduced axis, one E8M0 scale per block, X = 2^(floor(log2(amax)) - emax_elem)
  (emax_elem: the exponent of the element format's largest normal: 8 for E4M3, 15 for E5M2, 2 for
  E2M1), clamped to E8M0's 2^-127..2^127; elements round to nearest-even and clamp to +-max_elem
  (the spec's conversion; an amax whose mantissa exceeds max_elem's saturates). That is scale
  rule 0; rule 1 (CANN ``aclnnDynamicMxQuant``'s ``scale_alg=1``, FP8 elements only) rounds the
  exponent of amax / max_elem up instead, X = 2^ceil(log2(amax / max_elem)), so no element saturates.
* ``nvfp4``: NVIDIA's NVFP4 (Transformer Engine ``NVFP4Quantizer``; the "NVFP4" blog and cuBLAS
  docs): a fp32 global encode scale S = 448 * 6 / amax(tensor) (1 when amax is 0); per block of 16
  a decode scale s = amax(block) / 6, stored as E4M3 of s * S (nearest-even, saturating), so
  X = e4m3(s * S) / S; elements E2M1 of x / X (X = 0: the block is zero).
* ``hif8``: HiFloat8 with no scaling (the paper's direct cast), rounding half away from zero,
  saturating at 2^15.

Blocks run along ``axis`` (default: the last); a length that is not a multiple of the block is
padded with zeros (they change no amax). NaN/inf elements stay as they are and are left out of
the amax.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from precision_shell.formats.lowbit import by_name
from precision_shell.formats.lowbit.rounding import round_to


@dataclass(frozen=True)
class Recipe:
    name: str
    element: str            # lowbit format name of the elements
    block: int | None       # elements per scale block (None: one scale for the tensor)
    scaling: str            # "per-tensor", "mx", "nvfp4", "none"
    source: str


RECIPES: dict[str, Recipe] = {r.name: r for r in (
    Recipe("fp8-e4m3", "float8_e4m3fn", None, "per-tensor", "Transformer Engine Float8CurrentScaling"),
    Recipe("fp8-e5m2", "float8_e5m2", None, "per-tensor", "Transformer Engine Float8CurrentScaling"),
    Recipe("mxfp8-e4m3", "float8_e4m3fn", 32, "mx", "OCP MX v1.0 §6.3"),
    Recipe("mxfp8-e5m2", "float8_e5m2", 32, "mx", "OCP MX v1.0 §6.3"),
    Recipe("mxfp4", "float4_e2m1", 32, "mx", "OCP MX v1.0 §6.3"),
    Recipe("nvfp4", "float4_e2m1", 16, "nvfp4", "NVIDIA NVFP4 (Transformer Engine NVFP4Quantizer)"),
    Recipe("hif8", "hifloat8", None, "none", "arXiv 2409.16626"),
)}

E4M3_MAX = 448.0
E2M1_MAX = 6.0


@dataclass(frozen=True)
class Quantized:
    recipe: Recipe
    block: int | None
    axis: int
    values: np.ndarray        # dequantized, float64, the input's shape
    scales: np.ndarray        # X per block, float64: (blocks of the moved shape) or (1,)
    saturated: np.ndarray     # bool, the input's shape
    blocks: np.ndarray        # the input moved and padded to (rows, nblocks, block), float64


def _finite_abs(x: np.ndarray) -> np.ndarray:
    return np.where(np.isfinite(x), np.abs(x), 0.0)


def _floor_log2(a: np.ndarray) -> np.ndarray:
    """floor(log2(a)) of positive finite values, exactly (frexp: a = m * 2^e, 0.5 <= m < 1)."""
    _, e = np.frexp(a)
    return e.astype(np.int64) - 1


def _blocked(x: np.ndarray, axis: int, block: int) -> np.ndarray:
    moved = np.moveaxis(x, axis, -1)
    n = moved.shape[-1]
    nblocks = -(-n // block) if n else 0
    padded = np.zeros(moved.shape[:-1] + (nblocks * block,))
    padded[..., :n] = moved
    return padded.reshape(-1, nblocks, block)


def _unblocked(b: np.ndarray, x: np.ndarray, axis: int) -> np.ndarray:
    moved_shape = np.moveaxis(x, axis, -1).shape
    flat = b.reshape(moved_shape[:-1] + (-1,))[..., :moved_shape[-1]]
    return np.moveaxis(flat, -1, axis)


def _ceil_log2(a: np.ndarray) -> np.ndarray:
    """ceil(log2(a)) of positive finite values, exactly: a power of two is its own exponent."""
    m, e = np.frexp(a)
    return np.where(m == 0.5, e - 1, e).astype(np.int64)


SCALE_RULES = (0, 1)


def check_scale_rule(recipe: Recipe, rule: int) -> None:
    """ValueError unless ``rule`` applies to ``recipe``: rule 1 is defined for MX FP8 only."""
    if rule not in SCALE_RULES:
        raise ValueError(f"scale rule {rule} is not one of {', '.join(map(str, SCALE_RULES))}")
    if rule == 1 and not (recipe.scaling == "mx" and recipe.element.startswith("float8")):
        raise ValueError(f"scale rule 1 is defined for MX FP8 recipes (mxfp8-e4m3, mxfp8-e5m2), not {recipe.name}")


def quantize(x: np.ndarray, recipe: Recipe | str, *, block: int | None = None, axis: int = -1,
             scale_rule: int = 0) -> Quantized:
    """``x`` through ``recipe`` (``block`` overrides the recipe's block size; ``scale_rule``: the MX
    scale rule, 0 as OCP MX, 1 as aclnnDynamicMxQuant's rounded-up exponent; ValueError when the
    rule does not apply to the recipe)."""
    recipe = RECIPES[recipe] if isinstance(recipe, str) else recipe
    check_scale_rule(recipe, scale_rule)
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 0:
        x = x.reshape(1)
    axis = axis % x.ndim
    elem = by_name(recipe.element)
    size = block or recipe.block or max(1, x.shape[axis])
    if recipe.block is None and block is None:
        blocks = x.reshape(1, 1, -1)        # one block: the whole tensor
    else:
        blocks = _blocked(x, axis, size)
    amax = _finite_abs(blocks).max(axis=-1, initial=0.0)          # (rows, nblocks)
    if recipe.scaling == "per-tensor":
        scales = np.where(amax > 0, amax / elem.max_finite, 1.0)
    elif recipe.scaling == "mx":
        emax_elem = int(_floor_log2(np.array([elem.max_finite]))[0])
        safe = np.where(amax > 0, amax, 1.0)
        if scale_rule == 1:
            exp = np.clip(_ceil_log2(safe / elem.max_finite), -127, 127)
        else:
            exp = np.clip(_floor_log2(safe) - emax_elem, -127, 127)
        exp = np.where(amax > 0, exp, -127)
        scales = np.ldexp(1.0, exp)
    elif recipe.scaling == "nvfp4":
        global_amax = float(amax.max(initial=0.0))
        encode = E4M3_MAX * E2M1_MAX / global_amax if global_amax > 0 else 1.0
        block_scale = round_to(amax / E2M1_MAX * encode, by_name("float8_e4m3fn")).values
        scales = block_scale / encode
    else:   # "none"
        scales = np.ones(amax.shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        scaled = np.where(scales[..., None] > 0, blocks / scales[..., None], 0.0)
    scaled = np.where(np.isfinite(blocks), scaled, blocks)           # NaN/inf pass through
    rounded = round_to(scaled, elem)
    deq = rounded.values * scales[..., None]
    deq = np.where(np.isfinite(blocks), deq, blocks)
    sat = rounded.saturated & np.isfinite(blocks)
    if recipe.block is None and block is None:
        values, saturated = deq.reshape(x.shape), sat.reshape(x.shape)
    else:
        values, saturated = _unblocked(deq, x, axis), _unblocked(sat, x, axis)
    return Quantized(recipe, None if recipe.block is None and block is None else size, axis,
                     values, scales, saturated, blocks)


def apply_scales(elements: np.ndarray, scales: np.ndarray, block: int, axis: int) -> tuple[np.ndarray, int]:
    """A dumped block-scaled tensor dequantized: each element times its block's scale (``scales``
    has the elements' shape with ``axis`` cut into blocks of ``block``). ValueError when the shapes
    do not match; NaN scales (E8M0 0xFF) make their blocks NaN: returns (values, NaN scales)."""
    elements = np.asarray(elements, dtype=np.float64)
    scales = np.asarray(scales, dtype=np.float64)
    axis = axis % max(1, elements.ndim)
    want = list(elements.shape)
    want[axis] = -(-want[axis] // block)
    if list(scales.shape) != want:
        raise ValueError(f"scale shape {list(scales.shape)} does not match the blocks of {block} along axis "
                         f"{axis} of {list(elements.shape)} (expected {want})")
    wide = np.repeat(scales, block, axis=axis)
    wide = np.take(wide, np.arange(elements.shape[axis]), axis=axis)
    return elements * wide, int(np.count_nonzero(np.isnan(scales)))
