"""Training-log readers for ``curve``: TensorBoard event files, Megatron / DeepSpeed /
MindFormers text logs, CSV and JSONL. :func:`read_log` detects the kind and returns a
:class:`~.series.LogRead`; a file that cannot be read at all raises one FormatError line."""

from __future__ import annotations

import os
import struct
from pathlib import Path

from precision_shell.errors import FormatError
from precision_shell.formats.logs.series import LogRead, Series, normal_name, printable

__all__ = ["LogRead", "Series", "read_log", "normal_name", "printable"]


def _looks_like_tfrecord(path: Path) -> bool:
    from precision_shell.formats.logs.events import masked_crc32c

    with open(path, "rb") as fh:
        head = fh.read(12)
    return len(head) == 12 and masked_crc32c(head[:8]) == struct.unpack("<I", head[8:])[0]


def read_log(path: str | os.PathLike, advance=None) -> LogRead:
    """Everything ``path`` (a file, or a folder of event files) holds; ``advance(nbytes)`` is
    called as the files are read (a progress bar)."""
    from precision_shell.formats.logs import events

    given = Path(path).expanduser()
    read = LogRead(str(path))
    try:
        if given.is_dir():
            files = events.event_files(given)
            if not files:
                raise FormatError(given, "no TensorBoard event files (events.out.tfevents.*) in this folder")
            events.read_events(files, read, advance)
        elif not given.exists():
            raise FormatError(given, "no such file or folder")
        elif not given.is_file():
            raise FormatError(given, "cannot read: not a regular file")
        elif given.stat().st_size == 0:
            raise FormatError(given, "empty file")
        elif events.is_event_file(given) or _looks_like_tfrecord(given):
            events.read_events([given], read, advance)
        elif given.suffix.lower() == ".csv":
            from precision_shell.formats.logs.tables import read_table

            read_table(given, "csv", read)
        elif given.suffix.lower() in (".jsonl", ".json", ".ndjson"):
            from precision_shell.formats.logs.tables import read_table

            read_table(given, "jsonl", read)
        else:
            from precision_shell.formats.logs.text_logs import read_text_log

            read_text_log(given, read, advance)
    except PermissionError as exc:
        raise FormatError(given, f"cannot read ({exc.strerror})") from None
    except IsADirectoryError:
        raise FormatError(given, "is a folder") from None
    except OSError as exc:
        raise FormatError(given, f"cannot read ({exc.strerror or exc})") from None
    if not read.metrics and not read.skipped and not read.drops:
        raise FormatError(given, "no scalar series read" + (f" ({read.warnings[0]})" if read.warnings else ""))
    return read
