"""TensorBoard event files (``events.out.tfevents.*``): TFRecord framing with masked CRC32C, and
the scalars of ``Event.summary``: ``simple_value`` (TF1, tensorboardX, torch's default) and
single-number tensor summaries (TF2, torch ``new_style``).

A record whose data CRC fails, or that is not an Event, is one warning naming the file and the
record's offset; the rest is read. A bad *length* CRC loses the framing: the rest of that file
is named as unread (TensorBoard stops there too). A folder is one run: its event files in name
order (their names start with the creation time), later files continuing the step axis, and
repeated steps resolved as TensorBoard does (:func:`series.preempt`).

Fast path: the optional C kernel ``_tfrecord`` checks both CRCs and decodes plain scalar events;
records it does not decode (tensor summaries) come back for protobuf. Without the kernel every
record goes through protobuf and a Python CRC32C (same results, slower).
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np

from precision_shell.formats.logs.series import LogRead, SeriesBuilder, preempt_warning, printable

try:
    from precision_shell.formats.logs import _tfrecord as _kernel
except ImportError:     # not built (no compiler): the Python path below
    _kernel = None

CHUNK = 16 << 20
EVENT_NAME = "tfevents"


def is_event_file(path: Path) -> bool:
    return EVENT_NAME in path.name


def _crc_table() -> list[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc_table()


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC32C (Castagnoli): the kernel's, or a table-driven Python one."""
    if _kernel is not None:
        return _kernel.masked_crc32c(data)
    c = 0xFFFFFFFF
    table = _TABLE
    for b in data:
        c = table[(c ^ b) & 0xFF] ^ (c >> 8)
    c ^= 0xFFFFFFFF
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame(data: bytes) -> bytes:
    """One TFRecord: length, its masked CRC, the data, its masked CRC (tests, bench)."""
    header = struct.pack("<Q", len(data))
    return header + struct.pack("<I", masked_crc32c(header)) + data + struct.pack("<I", masked_crc32c(data))


def _python_scan(buf: bytes, base: int, final: bool):
    """The kernel's contract (see _tfrecord.c) in Python: every record goes to protobuf."""
    pos, size, problems, slow, lost = 0, len(buf), [], [], 0
    view = memoryview(buf)
    while pos < size:
        if size - pos < 12:
            if final:
                problems.append((base + pos, "truncated record header"))
                pos = size
            break
        (length,) = struct.unpack_from("<Q", buf, pos)
        (length_crc,) = struct.unpack_from("<I", buf, pos + 8)
        if masked_crc32c(view[pos:pos + 8]) != length_crc:
            problems.append((base + pos, "length CRC mismatch: the rest of the file cannot be framed"))
            lost, pos = 1, size
            break
        if length > size - pos - 16:
            if not final:
                break
            problems.append((base + pos, "truncated record"))
            pos = size
            break
        data = bytes(view[pos + 12:pos + 12 + length])
        (data_crc,) = struct.unpack_from("<I", buf, pos + 12 + length)
        if masked_crc32c(data) != data_crc:
            problems.append((base + pos, "data CRC mismatch: record skipped"))
        else:
            slow.append((base + pos, data))
        pos += 16 + length
    return pos, b"", b"", b"", b"", [], problems, slow, lost


# tensorflow DataType numbers (types.proto; tb_event.proto's enum)
DT_FLOAT, DT_DOUBLE, DT_INT32, DT_INT64, DT_BFLOAT16, DT_HALF = 1, 2, 3, 9, 14, 19


def _tensor_scalar(tensor) -> float | None:
    """The value of a one-element numeric tensor (TF2 / torch new_style scalars), else None."""
    if any(d.size != 1 for d in tensor.tensor_shape.dim):
        return None
    dt = tensor.dtype
    for values in (tensor.float_val, tensor.double_val, tensor.int64_val, tensor.int_val):
        if len(values) == 1 and dt != DT_HALF and dt != DT_BFLOAT16:
            return float(values[0])
    if len(tensor.half_val) == 1:
        bits = np.array([tensor.half_val[0]], dtype=np.uint16)
        if dt == DT_HALF:
            return float(bits.view(np.float16)[0])
        if dt == DT_BFLOAT16:
            return float((bits.astype(np.uint32) << 16).view(np.float32)[0])
    content = {DT_FLOAT: "<f4", DT_DOUBLE: "<f8", DT_HALF: "<f2", DT_INT32: "<i4",
               DT_INT64: "<i8"}.get(dt)
    if content and tensor.tensor_content and len(tensor.tensor_content) == np.dtype(content).itemsize:
        return float(np.frombuffer(tensor.tensor_content, dtype=content)[0])
    if dt == DT_BFLOAT16 and len(tensor.tensor_content) == 2:
        bits = np.frombuffer(tensor.tensor_content, dtype="<u2").astype(np.uint32) << 16
        return float(bits.view(np.float32)[0])
    return None


def _protobuf_points(slow, builder: SeriesBuilder, problems: list) -> None:
    from google.protobuf.message import DecodeError

    from precision_shell.formats.protoload import load_proto

    pb = load_proto("tb_event.proto")
    for offset, data in slow:
        try:
            event = pb.Event.FromString(data)
        except DecodeError:
            problems.append((offset, "not an Event proto: record skipped"))
            continue
        if not event.HasField("summary"):
            continue
        for value in event.summary.value:
            kind = value.WhichOneof("value")
            if kind == "simple_value":
                builder.add(value.tag, event.step, float(value.simple_value))
            elif kind == "tensor":
                scalar = _tensor_scalar(value.tensor)
                if scalar is not None:
                    builder.add(value.tag, event.step, scalar)


def read_event_file(path: Path, builder: SeriesBuilder, problems: list, advance=None) -> None:
    """Every scalar point of one event file into ``builder`` (file order); problems as
    ``(offset, reason)``."""
    scan = _kernel.scan if _kernel is not None else _python_scan
    with open(path, "rb") as fh:
        base, pending = 0, b""
        while True:
            chunk = fh.read(CHUNK)
            final = not chunk
            if advance is not None and chunk:
                advance(len(chunk))
            buf = pending + chunk
            if not buf:
                break
            consumed, steps, walls, values, tag_ids, tags, found, slow, lost = scan(buf, base, final)
            problems.extend(found)
            # points in record order: the kernel's fast points and protobuf's slow records are
            # merged by offset only when both exist (tensor summaries beside simple values)
            if len(steps):
                ids = np.frombuffer(tag_ids, dtype=np.int32)
                step_arr = np.frombuffer(steps, dtype=np.int64)
                value_arr = np.frombuffer(values, dtype=np.float64)
                for i, tag in enumerate(tags):
                    mine = ids == i
                    builder.extend(tag.decode("utf-8", "replace"), step_arr[mine], value_arr[mine])
            if slow:
                _protobuf_points(slow, builder, problems)
            if lost or final:
                break
            pending = buf[consumed:]
            base += consumed
            if consumed == 0 and len(pending) > 4 * CHUNK:   # one record larger than memory allows
                problems.append((base, "record longer than 64 MB: the rest of the file is not read"))
                break


def event_files(folder: Path) -> list[Path]:
    """The event files of one run folder in name order (creation time); files in subfolders
    when the folder holds none itself and they all sit in one subfolder."""
    own = sorted((p for p in folder.iterdir() if p.is_file() and is_event_file(p)), key=lambda p: p.name)
    if own:
        return own
    found = sorted((p for p in folder.rglob(f"*{EVENT_NAME}*") if p.is_file()), key=lambda p: p.name)
    runs = sorted({p.parent for p in found})
    if len(runs) > 1:
        from precision_shell.errors import FormatError

        names = ", ".join(printable(str(r.relative_to(folder))) for r in runs[:5])
        raise FormatError(folder, f"event files of {len(runs)} runs ({names}): give one run's folder")
    return found


def read_events(paths: list[Path], read: LogRead, advance=None) -> None:
    """One run: ``paths`` in order continue one step axis."""
    builder = SeriesBuilder()
    for path in paths:
        problems: list = []
        before = builder.counts()
        try:
            read_event_file(path, builder, problems, advance)
        except OSError as exc:
            read.warnings.append(f"{path}: cannot read ({exc.strerror or exc})")
            continue
        for offset, reason in problems[:3]:
            read.warnings.append(f"{path}: offset {offset}: {reason}")
        if len(problems) > 3:
            read.warnings.append(f"{path}: {len(problems) - 3} more bad records skipped")
        added = {name: n - before.get(name, 0) for name, n in builder.counts().items()}
        tags = [printable(n) for n, k in added.items() if k]
        size = os.path.getsize(path)
        read.lines.append(f"{path}: tensorboard events, {sum(added.values())} scalar points"
                          + (f" of {', '.join(tags[:6])}{' ...' if len(tags) > 6 else ''}" if tags else "")
                          + f" ({size} bytes)")
    metrics, dropped = builder.finish()
    if dropped:
        read.warnings.append(preempt_warning(str(paths[0].parent if len(paths) > 1 else paths[0]), dropped))
    read.metrics.update(metrics)
    if "tensorboard" not in read.kinds:
        read.kinds.append("tensorboard")
