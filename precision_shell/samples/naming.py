"""File names and the fixed, seed-derived timeline of a sample workspace (formats.md §1.1, §5).

Nothing here reads the clock: every time stamp, directory time and graph name is a function of
the seed, so two runs write the same bytes.
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass
from datetime import datetime, timedelta

_ESCAPE = str.maketrans({".": "_", "/": "_", "\\": "_", " ": "_"})
# Graph build time for seed 0; other seeds shift it so their workspaces are distinguishable.
_BASE_TIME = datetime(2024, 1, 25, 15, 33, 22)
TASK_TYPE_AICORE, TASK_TYPE_DEBUG = 0, 2


def escape(name: str) -> str:
    """Op name as it appears in dump and golden file names: ``.``, ``/``, ``\\``, space -> ``_``."""
    return name.translate(_ESCAPE)


def dump_file_name(op_type: str, op_name: str, task_id: int, stream_id: int, timestamp: int,
                   name_fields: int, task_type: int = TASK_TYPE_AICORE) -> str:
    """``type.name.task[.stream].ts[.task_type.context_id.thread_id.device_id]`` (4, 5 or 9 fields)."""
    head = f"{escape(op_type)}.{escape(op_name)}.{task_id}"
    if name_fields == 4:
        return f"{head}.{timestamp}"
    if name_fields == 5:
        return f"{head}.{stream_id}.{timestamp}"
    if name_fields == 9:
        return f"{head}.{stream_id}.{timestamp}.{task_type}.0.0.0"
    raise ValueError(f"dump file names have 4, 5 or 9 fields, not {name_fields}")


def golden_file_name(op_name: str, index: int, timestamp: int) -> str:
    return f"{escape(op_name)}.{index}.{timestamp}.npy"


def _stamp(t: datetime) -> str:
    return t.strftime("%Y%m%d%H%M%S")


def _epoch_us(t: datetime) -> int:
    return calendar.timegm(t.timetuple()) * 1_000_000   # UTC: independent of the machine's zone


@dataclass(frozen=True)
class Timeline:
    """Times of the golden run, the graph build, the dump run and the overflow-mode run."""
    seed: int

    @property
    def build(self) -> datetime:
        return _BASE_TIME + timedelta(seconds=97 * self.seed)

    @property
    def graph_name(self) -> str:
        return f"ge_default_{_stamp(self.build)}_1"

    @property
    def dump_dir_time(self) -> str:
        return _stamp(self.build + timedelta(seconds=22))

    @property
    def overflow_dir_time(self) -> str:
        return _stamp(self.build + timedelta(minutes=10))

    @property
    def dump_start_us(self) -> int:
        return _epoch_us(self.build + timedelta(seconds=23)) + 123_457

    @property
    def overflow_start_us(self) -> int:
        return _epoch_us(self.build + timedelta(minutes=10, seconds=1)) + 654_321

    @property
    def golden_start_us(self) -> int:
        return _epoch_us(self.build - timedelta(hours=1)) + 305_998


def op_duration_us(order: int, nbytes: int) -> int:
    """A plausible, deterministic gap between two ops' dump time stamps."""
    return 20 + (order * 7919) % 37 + nbytes // 65536
