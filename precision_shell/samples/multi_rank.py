"""``--ranks N --steps M``: a multi-device, multi-step workspace (formats.md §5) with its truth.

Every (rank, step) is one dump set ``npu/debug_0/dump/{time}/{rank}/{graph}/1/{step}`` of the
convnet, run with a loss scale that keeps the side branch finite, except:

* the odd rank: ``pool1/MaxPool`` writes a wrong output (sign-flipped) on that rank only, at
  every step, so its first divergence is that op where every other rank's is the LayerNorm;
* the late overflow: one rank raises its loss scale to 512 from a later step on, so from then
  on its loss-scale Mul overflows fp16 there: its NPU dumps carry the inf, and the overflow-mode
  dump ``overflow/dump/{time}/{rank}/{graph}/1/{step}`` holds that op's dump and an Opdebug
  record naming its task/stream ids (the same ids as every other rank and step).

Steps are ``STEP_US`` apart and ranks ``RANK_US`` apart in the dump time stamps. The manifest's
``scale_out`` entry holds the truth: the odd rank, each rank's first divergence, the overflow's
first (step, rank, op) and every set's folders.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from . import manifest as mf
from .naming import Timeline
from .network import LOSS_SCALE, run_network

STEP_US = 10_000_000          # one training step: 10 s between a rank's step folders
RANK_US = 100                 # ranks of one step start 0.1 ms apart
CLEAN_LOSS_SCALE = LOSS_SCALE / 4   # row sums up to ~180 x 128 stay below fp16's 65504
ODD_OP = "pool1/MaxPool"


@dataclass(frozen=True)
class _ShiftedTimeline(Timeline):
    """The dump and overflow-mode times of one (rank, step); folder names stay the same."""

    shift_us: int = 0

    @property
    def dump_start_us(self) -> int:
        return super().dump_start_us + self.shift_us

    @property
    def overflow_start_us(self) -> int:
        return super().overflow_start_us + self.shift_us


def roles(ranks: int, steps: int) -> tuple[int | None, int, int]:
    """(odd rank or None, overflowing rank, step its overflow starts at). An odd rank needs a
    majority to differ from: three ranks or more."""
    overflow_rank = min(2, ranks - 1)
    odd = None
    if ranks >= 3:
        odd = ranks - 1 if ranks - 1 != overflow_rank else ranks - 2
    return odd, overflow_rank, 1 if steps > 1 else 0


def write_multi_rank(out: Path, options, ranks: int, steps: int, writer_class) -> dict:
    """Write every (rank, step) set into ``out`` with ``writer_class`` (``writer.WorkspaceWriter``,
    passed in: the writer calls this module); returns the manifest (also written)."""
    if ranks < 1 or steps < 1:
        raise ValueError("--ranks and --steps must be 1 or more")
    if options.variant != "convnet":
        raise ValueError("--ranks/--steps extend the convnet variant only")
    large = options.scale_mb is not None or options.files is not None
    odd, overflow_rank, overflow_step = roles(ranks, steps)
    sets, first_divergence, overflow = [], {}, None
    totals = {"npu_dump_files": 0, "npu_dump_bytes": 0}
    base = None
    # the (overflow_rank, step 0) set is written last: its golden files and graph (loss scale
    # 128, as on every rank before the raise) are what the workspace keeps
    order = [(r, s) for s in range(steps) for r in range(ranks)]
    order.sort(key=lambda rs: rs == (overflow_rank, 0))
    for rank, step in order:
        raised = rank == overflow_rank and step >= overflow_step
        run = run_network(options.seed, net_output=not large,
                          loss_scale=LOSS_SCALE if raised else CLEAN_LOSS_SCALE)
        if rank == odd:
            op = run.op(ODD_OP)
            op.outputs[0] = replace(op.outputs[0], npu=-op.outputs[0].npu)
        writer = writer_class(out, options)
        writer.time = _ShiftedTimeline(options.seed, step * STEP_US + rank * RANK_US)
        writer._ts = writer.time.dump_start_us
        leaf = Path(str(rank), writer.time.graph_name, "1", str(step))
        writer.dump_dir = writer.root / "npu/debug_0/dump" / writer.time.dump_dir_time / leaf
        writer.overflow_dir = writer.root / "overflow/dump" / writer.time.overflow_dir_time / leaf
        manifest = writer.write(run)
        entry = {"rank": rank, "step": step, "npu_dump_dir": manifest["paths"]["npu_dump_dir"],
                 "overflow_dump_dir": manifest["paths"]["overflow_dump_dir"]}
        sets.append(entry)
        for key in totals:
            totals[key] += manifest["totals"][key]
        if step == 0:
            first_divergence[str(rank)] = ODD_OP if rank == odd else run.lossy_op
        if manifest["overflow"] is not None and (overflow is None or step < overflow["step"]):
            overflow = {**manifest["overflow"], "rank": rank, "step": step}
        if (rank, step) == (overflow_rank, 0):
            base = manifest
    sets.sort(key=lambda e: (e["step"], e["rank"]))
    base["overflow"] = overflow
    base["totals"].update(totals)
    base["scale_out"] = {
        "ranks": ranks, "steps": steps, "step_us": STEP_US, "rank_us": RANK_US,
        "odd_rank": None if odd is None else {"rank": odd, "op": ODD_OP},
        "first_divergence_step0": first_divergence,
        "overflow": {"rank": overflow_rank, "start_step": overflow_step, "op": overflow["op"],
                     "steps": [s for s in range(overflow_step, steps)],
                     "first": {"step": overflow_step, "rank": overflow_rank, "op": overflow["op"]}},
        "sets": sets,
    }
    base["paths"]["npu_dump_dir"] = base["paths"]["overflow_dump_dir"] = None   # see scale_out.sets
    if overflow_step == 1:   # the training logs of this job: their loss-scale drop is that step
        from .curves import write_curve_pair

        base["scale_out"]["curve"] = write_curve_pair(out / "logs", options.seed)
    mf.write_manifest(out / mf.MANIFEST_NAME, base)
    return base
