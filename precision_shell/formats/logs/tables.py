"""CSV and JSONL metric logs with a ``step`` column (or ``iteration`` / ``global_step``): every
other numeric column is a series; a column named ``skipped`` or ``overflow`` (true/1) marks
skipped steps. A row without a usable step is skipped (counted in one warning)."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

from precision_shell.errors import FormatError
from precision_shell.formats.logs.series import LogRead, SeriesBuilder, normal_name, preempt_warning

STEP_COLUMNS = ("step", "iteration", "global_step")
SKIP_COLUMNS = ("skipped", "overflow", "overflow_cond", "skipped_step")
TRUE = {"true", "1", "yes", "1.0"}


def _value(cell) -> float | None:
    if isinstance(cell, bool):
        return float(cell)
    if isinstance(cell, (int, float)):
        return float(cell)
    if isinstance(cell, str):
        try:
            return float(cell.strip())
        except ValueError:
            return None
    return None


def _step(cell) -> int | None:
    value = _value(cell)
    if value is None or not math.isfinite(value) or value != int(value):
        return None
    return int(value)


def _rows(path: Path, kind: str, read: LogRead):
    with open(path, "rb") as fh:
        text = io.TextIOWrapper(fh, encoding="utf-8", errors="replace", newline="")
        if kind == "csv":
            yield from csv.DictReader(text)
            return
        bad = 0
        for number, line in enumerate(text, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                row = None
            if not isinstance(row, dict):
                bad += 1
                continue
            yield row
        if bad:
            read.warnings.append(f"{path}: {bad} line{'s' * (bad != 1)} not a JSON object: skipped")


def read_table(path: Path, kind: str, read: LogRead) -> None:
    builder, skipped, no_step, step_key = SeriesBuilder(), [], 0, None
    try:
        for row in _rows(path, kind, read):
            if step_key is None:
                step_key = next((k for k in row if k is not None and normal_name(str(k)) in STEP_COLUMNS), None)
                if step_key is None:
                    raise FormatError(path, f"no step column (one of {', '.join(STEP_COLUMNS)})")
            step = _step(row.get(step_key))
            if step is None:
                no_step += 1
                continue
            for key, cell in row.items():
                if key is None or key == step_key:
                    continue
                name = normal_name(str(key))
                if name in SKIP_COLUMNS:
                    if str(cell).strip().lower() in TRUE:
                        skipped.append(step)
                    continue
                value = _value(cell)
                if value is not None:
                    builder.add(str(key), step, value)
    except csv.Error as exc:
        raise FormatError(path, f"not a CSV file ({exc})") from None
    if step_key is None:
        raise FormatError(path, "no rows")
    if no_step:
        read.warnings.append(f"{path}: {no_step} row{'s' * (no_step != 1)} without an integer step: skipped")
    metrics, dropped = builder.finish()
    if dropped:
        read.warnings.append(preempt_warning(str(path), dropped))
    read.metrics.update(metrics)
    read.skipped.extend(sorted(set(skipped)))
    read.describe(str(path), kind, metrics, f"; {len(set(skipped))} skipped steps" if skipped else "")
