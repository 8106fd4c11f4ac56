"""Training text logs, one pass, every line kind recognised wherever it appears (Megatron-DeepSpeed
logs hold both Megatron's iteration lines and DeepSpeed's overflow lines):

* Megatron-LM ``training_log``: `` iteration N/ M | ... lm loss: X | loss scale: X | grad norm:
  X | number of skipped iterations: K | number of nan iterations: K |``. Each ``key: value``
  field is a series; the skipped counter (per log interval) > 0 marks a skipped step; a NaN loss
  is not printed by Megatron (only counted): the loss series gets NaN at that step.
* DeepSpeed: ``[deepspeed] OVERFLOW! Rank R Skipping step. Attempted loss scale: X, reducing to
  Y`` (also ``fp16 dynamic loss scale overflow!`` and the bf16 form without scales) belongs to
  the step of the next progress line: the pipeline engine's ``steps: N loss: X iter time ...``
  or the engine's ``step=N, skipped=K, ...`` (K increasing marks a skipped step too).
* MindSpore/MindFormers ``MFLossMonitor``: ``{ Epoch:[e/E], step:[s/S], loss: X`` (or
  ``loss:[X/avg]``) ``, ... overflow cond: True|False, loss_scale: X, global_norm: X``; with
  several epochs, a step within its epoch is made global ((e-1)*S + s).

Several ranks in one file (``[default0]:``, ``0:`` prefixes of torchrun/srun): rank R's lines are
kept for the lowest R seen, with one warning. Bytes that are not UTF-8 are replaced (one warning).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from precision_shell.formats.logs.series import LogRead, ScaleDrop, SeriesBuilder, preempt_warning

CHUNK = 8 << 20
_RANK = re.compile(r"^\s*(?:\[(?:default|rank)(\d+)\]:|(\d+):\s)")
_MEGATRON = re.compile(r"iteration\s+(\d+)\s*/\s*(\d+)\s*\|(.*)")
_OVERFLOW = re.compile(r"(?:OVERFLOW!|overflow!) Rank (\d+) Skipping step\.?"
                       r"(?: Attempted loss scale: ([-+\w.]+), reducing to ([-+\w.]+))?")
_PIPE_STEP = re.compile(r"steps: (\d+) loss: ([-+\w.]+)")
_ENGINE_STEP = re.compile(r"step=(\d+), skipped=(\d+)")
_MF_STEP = re.compile(r"(?:Epoch:\[\s*(\d+)/\s*(\d+)\],\s*)?step:\[\s*(\d+)/\s*(\d+)\],\s*loss:\s*\[?\s*([-+\w.]+)")
_MF_FIELD = re.compile(r"(overflow cond|loss_scale|global_norm|lm_loss|per_step_time|lr):\s*\[?\s*([-+\w.]+)")
_SKIP_KEYS = ("number of skipped iterations", "number of nan iterations")


def _number(text: str) -> float | None:
    try:
        return float(text.rstrip("ms"))
    except ValueError:
        return None


class _RankLog:
    """What one rank's lines said."""

    def __init__(self) -> None:
        self.series = SeriesBuilder()
        self.skipped: list[int] = []
        self.drops: list[ScaleDrop] = []
        self.kinds: list[str] = []
        self.pending: list[tuple[float | None, float | None]] = []   # overflows awaiting a step
        self.last_step: int | None = None
        self.last_skipped = 0
        self.loss_keys: list[str] = []

    def kind(self, name: str) -> None:
        if name not in self.kinds:
            self.kinds.append(name)

    def step_seen(self, step: int) -> None:
        for attempted, reduced in self.pending:
            self.skipped.append(step)
            if attempted is not None and reduced is not None:
                self.drops.append(ScaleDrop(step, attempted, reduced))
        self.pending = []
        self.last_step = step

    def megatron(self, m: re.Match) -> None:
        self.kind("megatron")
        step = int(m.group(1))
        fields = {}
        for part in m.group(3).split("|"):
            key, sep, text = part.partition(": ")
            if sep:
                try:
                    fields[key.strip()] = float(text)
                except ValueError:
                    value = _number(text.strip())
                    if value is not None:
                        fields[key.strip()] = value
        self.step_seen(step)
        losses = [k for k in fields if "loss" in k and "scale" not in k]
        for key in losses:
            if key not in self.loss_keys:
                self.loss_keys.append(key)
        if fields.get("number of nan iterations", 0) > 0 and not losses:
            for key in self.loss_keys or ["lm loss"]:
                self.series.add(key, step, math.nan)
        if fields.get("number of skipped iterations", 0) > 0:
            self.skipped.append(step)
        for key, value in fields.items():
            if key not in _SKIP_KEYS:
                self.series.add(key, step, value)

    def mindformers(self, m: re.Match, line: str) -> None:
        self.kind("mindformers")
        epoch, step, per_epoch = m.group(1), int(m.group(3)), int(m.group(4))
        if epoch is not None and step <= per_epoch:
            step += (int(epoch) - 1) * per_epoch
        self.step_seen(step)
        loss = _number(m.group(5))
        if loss is not None:
            self.series.add("loss", step, loss)
        for key, text in _MF_FIELD.findall(line):
            if key == "overflow cond":
                if text == "True":
                    self.skipped.append(step)
                continue
            value = _number(text)
            if value is not None:
                self.series.add(key, step, value)


def _lines(path: Path, read: LogRead, advance=None):
    """Decoded lines of ``path``, a chunk at a time; one warning for bytes that are not UTF-8."""
    bad, first_bad, number = 0, None, 0
    with open(path, "rb") as fh:
        rest = b""
        while True:
            chunk = fh.read(CHUNK)
            if advance is not None and chunk:
                advance(len(chunk))
            data = rest + chunk
            if not chunk:
                cut = len(data)
            else:
                cut = data.rfind(b"\n") + 1
            text_bytes, rest = data[:cut], data[cut:]
            try:
                text = text_bytes.decode("utf-8")
            except UnicodeDecodeError:
                text = text_bytes.decode("utf-8", "replace")
                for i, line in enumerate(text.split("\n")):
                    if "\ufffd" in line:
                        bad += 1
                        first_bad = first_bad or number + i + 1
            lines = text.split("\n")
            if lines and lines[-1] == "":
                lines.pop()
            yield from lines
            number += len(lines)
            if not chunk:
                break
    if bad:
        read.warnings.append(f"{path}: {bad} line{'s' * (bad != 1)} with bytes that are not UTF-8 "
                             f"(first: line {first_bad}): read with those bytes replaced")


def read_text_log(path: Path, read: LogRead, advance=None) -> None:
    ranks: dict[int | None, _RankLog] = {}
    for line in _lines(path, read, advance):
        rank = None
        if line[:1].isdigit() or line.lstrip()[:1] == "[":
            rm = _RANK.match(line)
            if rm:
                rank = int(rm.group(1) or rm.group(2))
        log = ranks.get(rank)
        if log is None:
            log = ranks[rank] = _RankLog()
        if "iteration" in line and "|" in line:
            m = _MEGATRON.search(line)
            if m:
                log.megatron(m)
                continue
        if "OVERFLOW!" in line or "overflow! Rank" in line:
            m = _OVERFLOW.search(line)
            if m:
                log.kind("deepspeed")
                log.pending.append((_number(m.group(2)) if m.group(2) else None,
                                    _number(m.group(3)) if m.group(3) else None))
                continue
        if "steps: " in line:
            m = _PIPE_STEP.search(line)
            if m:
                log.kind("deepspeed")
                step = int(m.group(1))
                log.step_seen(step)
                value = _number(m.group(2))
                if value is not None:
                    log.series.add("loss", step, value)
                continue
        if "skipped=" in line:
            m = _ENGINE_STEP.search(line)
            if m:
                log.kind("deepspeed")
                step, skipped = int(m.group(1)), int(m.group(2))
                if step != log.last_step:
                    log.step_seen(step)
                if skipped > log.last_skipped and step not in log.skipped:
                    log.skipped.append(step)
                log.last_skipped = skipped
                continue
        if "step:[" in line:
            m = _MF_STEP.search(line)
            if m:
                log.mindformers(m, line)
    used = {r: log for r, log in ranks.items() if log.kinds}
    if not used:
        from precision_shell.errors import FormatError

        raise FormatError(path, "no training-log line recognised (Megatron `iteration N/ M |`, "
                                "DeepSpeed `OVERFLOW!`/`steps: N loss:`, MindFormers `step:[s/S]`)")
    numbered = sorted(r for r in used if r is not None)
    if numbered and (len(numbered) > 1 or None in used):
        keep = numbered[0]
        read.warnings.append(f"{path}: lines of {len(used)} ranks interleaved "
                             f"({', '.join(str(r) for r in numbered[:8])}): rank {keep}'s are read")
        log = used[keep]
    else:
        log = next(iter(used.values()))
    if log.pending:   # overflow lines after the last progress line: the step after it
        log.step_seen((log.last_step or 0) + 1)
    metrics, dropped = log.series.finish()
    if dropped:
        read.warnings.append(preempt_warning(str(path), dropped))
    read.metrics.update(metrics)
    read.skipped.extend(sorted(set(log.skipped)))
    read.drops.extend(log.drops)
    extra = ""
    if log.skipped:
        extra = f"; {len(set(log.skipped))} skipped steps"
    if log.drops:
        extra += f", {len(log.drops)} overflow lines with loss scales"
    read.describe(str(path), "+".join(log.kinds) + " log", metrics, extra)
