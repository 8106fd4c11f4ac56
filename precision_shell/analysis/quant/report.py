"""What a recipe costs a tensor: the numbers of ``qstat`` (pure functions, one dataclass).

Over the finite elements of the tensor x and its re-quantized q:
underflow % = non-zeros of x that became 0 in q, over the non-zeros of x; saturation % = elements
whose scaled magnitude was above the element format's largest value (clamped), over all
finite elements; relative L2 = ||q - x|| / ||x||; MSE = mean((q - x)^2); the scale range (min and
max X over the blocks that hold a non-zero); per block, the dynamic range in binades
log2(amax / smallest non-zero magnitude); the worst blocks by dynamic range with their index.

With the NPU's dumped quantized tensor (``observed``) of the same golden x: the recipe's error
||q - x|| over the observed error ||observed - x|| (``explained``: 1 means the recipe alone gives
all the error the NPU shows) and the share of elements where the NPU equals q bit for bit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .recipes import Quantized, Recipe, quantize


@dataclass(frozen=True)
class BlockRange:
    index: tuple[int, ...]   # the block's position: the other axes' indices, then the block number
    binades: float           # log2(amax / min non-zero |x|) in the block
    amax: float
    scale: float
    underflow: int           # non-zeros of the block quantized to zero


@dataclass(frozen=True)
class Explained:
    observed_rel_l2: float   # ||observed - x|| / ||x||
    recipe_rel_l2: float     # ||q - x|| / ||x||
    explained: float         # recipe error / observed error (NaN when the NPU has no error)
    equal_fraction: float    # elements where observed == q (float32 bit patterns; NaN == NaN)


@dataclass(frozen=True)
class QuantReport:
    recipe: Recipe
    block: int | None
    axis: int
    count: int               # finite elements
    nonzero: int
    underflow: int
    saturated: int
    rel_l2: float
    mse: float
    scale_min: float
    scale_max: float
    blocks: int
    worst_blocks: list[BlockRange] = field(default_factory=list)
    explained: Explained | None = None
    scale_rule: int = 0

    @property
    def underflow_pct(self) -> float:
        return 100.0 * self.underflow / self.nonzero if self.nonzero else 0.0

    @property
    def saturated_pct(self) -> float:
        return 100.0 * self.saturated / self.count if self.count else 0.0

    def to_json(self) -> dict:
        return {
            "recipe": self.recipe.name, "element": self.recipe.element, "block": self.block, "axis": self.axis,
            "scale_rule": self.scale_rule if self.recipe.scaling == "mx" else None,
            "count": self.count, "nonzero": self.nonzero, "underflow": self.underflow,
            "underflow_pct": self.underflow_pct, "saturated": self.saturated, "saturated_pct": self.saturated_pct,
            "rel_l2": self.rel_l2, "mse": self.mse, "scale_min": self.scale_min, "scale_max": self.scale_max,
            "blocks": self.blocks,
            "worst_blocks": [{"index": list(b.index), "binades": b.binades, "amax": b.amax, "scale": b.scale,
                              "underflow": b.underflow} for b in self.worst_blocks],
            "explained": None if self.explained is None else self.explained.__dict__,
        }


def _rel(err: np.ndarray, ref: np.ndarray) -> float:
    norm = math.sqrt(float(np.sum(ref * ref)))
    e = math.sqrt(float(np.sum(err * err)))
    return e / norm if norm else (0.0 if e == 0 else math.inf)


def _block_ranges(q: Quantized, top: int) -> list[BlockRange]:
    b = np.where(np.isfinite(q.blocks), np.abs(q.blocks), 0.0)
    amax = b.max(axis=-1)
    smallest = np.where(b > 0, b, np.inf).min(axis=-1)
    live = amax > 0
    binades = np.full(amax.shape, -np.inf)
    binades[live] = np.log2(amax[live] / smallest[live])
    deq = q.values
    if q.block is None:
        deq_blocks = deq.reshape(1, 1, -1)
    else:
        moved = np.moveaxis(deq, q.axis, -1)
        n = moved.shape[-1]
        pad = np.zeros(moved.shape[:-1] + (q.blocks.shape[1] * q.blocks.shape[2],))
        pad[..., :n] = moved
        deq_blocks = pad.reshape(q.blocks.shape)
    under = np.count_nonzero((b > 0) & (deq_blocks == 0), axis=-1)
    order = np.argsort(-binades, axis=None, kind="stable")[:top]
    lead = np.moveaxis(np.empty(q.values.shape, bool), q.axis, -1).shape[:-1] if q.block is not None else ()
    out = []
    for flat in order:
        row, blk = np.unravel_index(int(flat), amax.shape)
        if not live[row, blk]:
            break
        index = (tuple(int(i) for i in np.unravel_index(int(row), lead)) if lead else ()) + (int(blk),)
        out.append(BlockRange(index, float(binades[row, blk]), float(amax[row, blk]),
                              float(q.scales.reshape(amax.shape)[row, blk]), int(under[row, blk])))
    return out


def quant_report(x: np.ndarray, recipe: Recipe | str, *, block: int | None = None, axis: int = -1,
                 observed: np.ndarray | None = None, top: int = 5, scale_rule: int = 0) -> QuantReport:
    """The cost of ``recipe`` on ``x`` (float values of any dtype); ``observed``: the NPU's
    quantized version of the same x (same shape), for the explained share."""
    x = np.asarray(x, dtype=np.float64)
    q = quantize(x, recipe, block=block, axis=axis, scale_rule=scale_rule)
    qx = q.values.reshape(x.shape)
    finite = np.isfinite(x)
    xf, qf = x[finite], qx[finite]
    nonzero = xf != 0
    err = qf - xf
    block_amax = np.where(np.isfinite(q.blocks), np.abs(q.blocks), 0.0).max(axis=-1, initial=0.0)
    live_scales = q.scales.reshape(block_amax.shape)[block_amax > 0]
    explained = None
    if observed is not None:
        obs = np.asarray(observed, dtype=np.float64)
        if obs.shape != x.shape:
            raise ValueError(f"the quantized tensor's shape {list(obs.shape)} is not the golden's {list(x.shape)}")
        both = finite & np.isfinite(obs)
        observed_rel = _rel(obs[both] - x[both], x[both])
        recipe_rel = _rel(qx[both] - x[both], x[both])
        a32, b32 = obs.astype(np.float32), qx.astype(np.float32)
        same = (a32.view(np.uint32) == b32.view(np.uint32)) | (np.isnan(a32) & np.isnan(b32)) | (a32 == b32)
        explained = Explained(observed_rel, recipe_rel,
                              recipe_rel / observed_rel if observed_rel else math.nan,
                              float(np.count_nonzero(same)) / same.size if same.size else math.nan)
    return QuantReport(
        recipe=q.recipe, block=q.block, axis=q.axis, count=int(xf.size), nonzero=int(np.count_nonzero(nonzero)),
        underflow=int(np.count_nonzero(nonzero & (qf == 0))), saturated=int(np.count_nonzero(q.saturated)),
        rel_l2=_rel(err, xf), mse=float(np.mean(err * err)) if err.size else math.nan,
        scale_min=float(live_scales.min()) if live_scales.size else math.nan,
        scale_max=float(live_scales.max()) if live_scales.size else math.nan,
        blocks=int(block_amax.size), worst_blocks=_block_ranges(q, top), explained=explained,
        scale_rule=scale_rule)
