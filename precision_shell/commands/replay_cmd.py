"""``replay OP``: load the op's NPU inputs and outputs and their goldens, run its reference
kernel exactly and under each arithmetic profile, and print the verdict with its evidence
(the analysis is :mod:`precision_shell.analysis.replay`); ``--export DIR`` writes a reproducer."""

from __future__ import annotations

from typing import Any

from precision_shell.commands.registry import arg, command
from precision_shell.model.session import Session

_HELP_JSON = ('JSON (--format json): {op, type, verdict (upstream|inherent|emulated|kernel), profile '
              '(the explaining profile of emulated, else null), candidates [{profile, error_vs_npu (max ulps '
              'of the output dtype), error_vs_golden (relative RMS error), cosine (vs golden)}], advice, '
              'output, dtype, reason, upstream_input, npu {error_vs_golden, cosine}, inputs [{tensor, golden, '
              'cosine, nonfinite}], exported}.')


@command("replay",
         summary="Recompute an op from its own dumped inputs, exactly (float64) and under emulated device "
                 "arithmetic (accumulator dtype, truncated mantissa, flush-to-zero), and say why its output "
                 "differs: upstream (an input already fails), inherent (the dtype is not enough), emulated "
                 "(which arithmetic explains it) or kernel (nothing does). " + _HELP_JSON,
         example="replay ln/LayerNorm\nreplay rsum/ReduceSum --profile fp16-acc --profile trunc-mantissa-20,ftz\n"
                 "replay ln/LayerNorm --export /tmp/ln_repro",
         args=[arg("op", complete="op", help="the op (exact name or a unique part of it)"),
               arg("--profile", action="append", metavar="P",
                   help="a profile to try instead of the defaults (repeat for several); words combine "
                        "with commas: exact, fp16/bf16/fp32/fp8-e4m3/fp8-e5m2 (storage), fp16-acc/bf16-acc/"
                        "fp32-acc, trunc-mantissa-N, ftz, toward-zero, nearest-even, or a name from the "
                        "config file's [profiles] section"),
               arg("--export", metavar="DIR", complete="path",
                   help="write the inputs, NPU output and golden (.npy), replay.json (attributes) and "
                        "replay.py, a numpy-only script that recomputes the op and prints the table")])
def replay(session: Session, args: Any):
    from precision_shell.commands.replay_run import run_replay

    return run_replay(session, args)
