"""Overflow debug records of ``Opdebug.Node_OpDebug.*`` files (formats.md §2, A.7).

An Opdebug file is an ordinary dump; each output slot holds one debug record, in one of two
layouts chosen by its first u32:

* new (u32 0 == 0x5A5A5A5A): magic, version, then one accelerator record (AIC/AIV/AICPU/SDMA);
* old (exactly 2048 bytes): DHA Atomic Add, L2 Atomic Add and AI Core blocks at fixed offsets.

:func:`decode_opdebug_buffer` returns the same JSON shape the vendor's ``convert`` writes, so a
record can be shown or exported verbatim; :func:`read_opdebug` turns the blocks that report an
overflow into :class:`OverflowRecord` with the status decoded to words.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

from ..errors import FormatError
from .dump_file import read_device_array, read_dump_header, read_raw_bytes
from .dump_names import parse_dump_name

MAGIC = 0x5A5A5A5A
OLD_RECORD_SIZE = 2048
INVALID_ID = 65535
STATUS_WORDS_V1 = 4

_OLD_INFO_FIELDS = ("model_id", "stream_id", "task_id", "task_type", "pc_start", "para_base")
# (JSON key, offset of its 6-field info block, offset of its status)
_OLD_BLOCKS = (("DHA Atomic Add", 0, 512), ("L2 Atomic Add", 128, 768), ("AI Core", 256, 1040))
_AI_CORE_KERNEL_CODE = 1024
_AI_CORE_BLOCK_IDX = 1032

ACC_TYPES = {0: "AIC", 1: "AIV", 2: "AICPU", 3: "SDMA"}
_ACC_CODES = {name: code for code, name in ACC_TYPES.items()}
_AIC_AIV_FIELDS = ("model_id", "stream_id", "task_id", "task_type", "context_id", "thread_id",
                   "pc_start", "para_base", "core_id", "block_id", "status")
ACC_FIELDS = {
    "AIC": _AIC_AIV_FIELDS,
    "AIV": _AIC_AIV_FIELDS,
    "SDMA": ("model_id", "stream_id", "task_id", "task_type", "context_id", "thread_id",
             "src_addr", "dst_addr", "channel_id", "status"),
    "AICPU": ("model_id", "stream_id", "task_id", "task_type", "context_id", "cpu_id", "thread_id", "status"),
}
_HEX_FIELDS = frozenset({"pc_start", "para_base", "kernel_code", "src_addr", "dst_addr"})
_ACC_HEADER = struct.Struct("<IIIIII")   # magic, version, valid, acc_type, rsv, data_len

# AI Core status bits (formats.md §2.4, vendor overflow doc).
AI_CORE_STATUS_BITS = {
    0x8: "integer negation overflow",
    0x10: "integer overflow",
    0x20: "float overflow",
    0x80: "negative float to unsigned conversion",
    0x100: "fp32/int32->fp16 conversion overflow",
    0x400: "cube accumulation overflow",
}
# DHA Atomic Add: code in bits 8-15. The reference tool looked the table up with the whole status
# and wrote keys as '0xA' where hex() gives '0xa', so codes A-D never matched; fixed here.
DHA_STATUS_CODES = {
    0x9: "atomic overflow", 0xA: "atomic underflow", 0xB: "atomic src nan",
    0xC: "atomic dst nan", 0xD: "atomic src and dst nan",
}
# L2 Atomic Add: code in bits 16-18; 0 means "no error".
L2_STATUS_CODES = {
    1: "atomic overflow", 2: "atomic underflow", 3: "atomic src nan",
    4: "atomic dst nan", 5: "atomic src and dst nan",
}


@dataclass(frozen=True)
class OverflowRecord:
    path: str
    file_timestamp: int
    layout: str                       # "old" | "new"
    unit: str                         # "AI Core", "DHA Atomic Add", "L2 Atomic Add", "AIC", "AIV", "AICPU", "SDMA"
    model_id: int
    stream_id: int
    task_id: int
    task_type: int
    context_id: int | None
    thread_id: int | None             # None when 65535 / invalid
    status: int | tuple[int, ...]
    status_words: tuple[str, ...]
    raw: dict                         # the decoded JSON of the whole record


# ----------------------------------------------------------------------------------------------
# decoding

def _u64(buf: bytes, offset: int) -> int:
    return struct.unpack_from("<Q", buf, offset)[0]


def _display(key: str, value: int):
    return hex(value) if key in _HEX_FIELDS else value


def _decode_old(buf: bytes, path) -> dict:
    if len(buf) != OLD_RECORD_SIZE:
        raise FormatError(path, f"Opdebug record has {len(buf)} bytes; the old layout needs exactly "
                                f"{OLD_RECORD_SIZE} (and the new one starts with magic 0x{MAGIC:08x})")
    out = {}
    for key, info_at, status_at in _OLD_BLOCKS:
        block = {name: _display(name, _u64(buf, info_at + 8 * i)) for i, name in enumerate(_OLD_INFO_FIELDS)}
        if key == "AI Core":
            block["kernel_code"] = hex(_u64(buf, _AI_CORE_KERNEL_CODE))
            block["block_idx"] = _u64(buf, _AI_CORE_BLOCK_IDX)
        block["status"] = _u64(buf, status_at)
        out[key] = block
    return out


def _decode_new(buf: bytes, path) -> dict:
    if len(buf) < _ACC_HEADER.size:
        raise FormatError(path, f"Opdebug record has {len(buf)} bytes, shorter than its {_ACC_HEADER.size}-byte header")
    magic, version, valid, acc_code, rsv, data_len = _ACC_HEADER.unpack_from(buf)
    if data_len > len(buf) - _ACC_HEADER.size:
        raise FormatError(path, f"Opdebug record data_len {data_len} is beyond the record "
                                f"({len(buf) - _ACC_HEADER.size} bytes after its header)")
    acc_type = ACC_TYPES.get(acc_code)
    if acc_type is None:
        raise FormatError(path, f"Opdebug record has unknown accelerator type {acc_code}")
    names = ACC_FIELDS[acc_type]
    multi_status = acc_type in ("AIC", "AIV") and version == 1
    n_words = len(names) + (STATUS_WORDS_V1 - 1 if multi_status else 0)
    need = _ACC_HEADER.size + 8 * n_words
    if len(buf) < need:
        raise FormatError(path, f"Opdebug {acc_type} record has {len(buf)} bytes, needs {need}")
    words = struct.unpack_from(f"<{n_words}Q", buf, _ACC_HEADER.size)
    data = {}
    for i, name in enumerate(names):
        if name == "status" and multi_status:
            data[name] = list(words[i:i + STATUS_WORDS_V1])
        else:
            data[name] = _display(name, words[i])
    # valid != 1 and a shorter data_len are only logged by the vendor tool; kept in the JSON.
    return {"magic": hex(magic), "version": version,
            "acc_list": {"valid": valid, "acc_type": acc_type, "rsv": rsv, "data_len": data_len, "data": data}}


def decode_opdebug_buffer(buf: bytes, path: str | None = None) -> dict:
    """The vendor JSON of one debug record (old or new layout, chosen by the magic)."""
    buf = bytes(buf)
    if len(buf) >= 4 and struct.unpack_from("<I", buf)[0] == MAGIC:
        return _decode_new(buf, path)
    return _decode_old(buf, path)


# ----------------------------------------------------------------------------------------------
# status words

def _unknown_bits(mask: int) -> str:
    return f"unknown bits 0x{mask:x}"


def _ai_core_words(status: int) -> list[str]:
    words = [word for bit, word in AI_CORE_STATUS_BITS.items() if status & bit]
    rest = status & ~sum(AI_CORE_STATUS_BITS)
    if rest:
        words.append(_unknown_bits(rest))
    return words


def _coded_words(status: int, shift: int, mask: int, table: dict[int, str], unit: str) -> list[str]:
    code = (status >> shift) & mask
    words = []
    if code:
        words.append(table.get(code, f"unknown {unit} code 0x{code:x}"))
    rest = status & ~(mask << shift)
    if rest:
        words.append(_unknown_bits(rest))
    return words


def status_words(unit: str, status: int | tuple[int, ...] | list[int]) -> tuple[str, ...]:
    """Short lowercase words for a status (``0x120`` on AI Core -> float overflow, fp32/int32->fp16 ...).

    AI Core / AIC / AIV: the AI Core bit table. A 4-word status (new layout, version 1) is
    undocumented: word 0 is read with the same table (an assumption) and any other non-zero word
    is shown as ``word N 0x..``. DHA / L2 Atomic Add: the reference tool's code tables. AICPU /
    SDMA: no table is published, so the raw value is shown.
    """
    if isinstance(status, (tuple, list)):
        if not status:
            return ()
        words = list(status_words(unit, int(status[0])))
        words += [f"word {i} 0x{int(w):x}" for i, w in enumerate(status) if i and w]
        return tuple(words)
    status = int(status)
    if not status:
        return ()
    if unit in ("AI Core", "AIC", "AIV"):
        return tuple(_ai_core_words(status))
    if unit == "DHA Atomic Add":
        return tuple(_coded_words(status, 8, 0xFF, DHA_STATUS_CODES, "DHA"))
    if unit == "L2 Atomic Add":
        return tuple(_coded_words(status, 16, 0x7, L2_STATUS_CODES, "L2"))
    return (f"status 0x{status:x}",)


# ----------------------------------------------------------------------------------------------
# records of a file

def _valid_id(value: int | None) -> int | None:
    if value is None or value in (INVALID_ID, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF):
        return None
    return value


def _records_of(raw: dict, path: str, file_ts: int) -> list[OverflowRecord]:
    out = []
    if "acc_list" in raw:
        acc = raw["acc_list"]
        data = acc["data"]
        status = data["status"]
        status = tuple(status) if isinstance(status, list) else status
        overflowed = any(status) if isinstance(status, tuple) else bool(status)
        if overflowed:
            out.append(OverflowRecord(
                path, file_ts, "new", acc["acc_type"], data["model_id"], data["stream_id"], data["task_id"],
                data["task_type"], _valid_id(data.get("context_id")), _valid_id(data.get("thread_id")),
                status, status_words(acc["acc_type"], status), raw))
        return out
    for unit, _, _ in _OLD_BLOCKS:   # vendor order: DHA, L2, AI Core
        block = raw[unit]
        if block["status"]:
            out.append(OverflowRecord(
                path, file_ts, "old", unit, block["model_id"], block["stream_id"], block["task_id"],
                block["task_type"], None, None, block["status"], status_words(unit, block["status"]), raw))
    return out


def _record_bytes(header, entry) -> bytes:
    """The record as the vendor sees it: the output decoded by its dtype/shape, re-serialised."""
    try:
        return read_device_array(header, entry).tobytes()
    except FormatError:
        return read_raw_bytes(header, entry)   # e.g. a dtype we do not decode: take the raw segment


def read_opdebug(path: str | os.PathLike) -> list[OverflowRecord]:
    """Overflow records (blocks with a non-zero status) of an Opdebug file; [] when none."""
    path = os.fspath(path)
    header = read_dump_header(path)
    if not header.outputs:
        raise FormatError(path, "Opdebug file has no output holding a debug record")
    name = parse_dump_name(os.path.basename(path))
    file_ts = name.timestamp if name else header.dump_time
    records = []
    for entry in header.outputs:
        raw = decode_opdebug_buffer(_record_bytes(header, entry), path)
        records.extend(_records_of(raw, path, file_ts))
    return records


# ----------------------------------------------------------------------------------------------
# encoding (tests, sample generator)

def _as_int(value) -> int:
    if isinstance(value, str):
        return int(value, 0)   # accepts the "0x..." strings of the decoded JSON
    return int(value)


def encode_opdebug_old(*, ai_core: dict | None = None, dha: dict | None = None, l2: dict | None = None) -> bytes:
    """A 2048-byte old-layout record; missing blocks/keys are 0 (``block_id`` accepted for ``block_idx``)."""
    buf = bytearray(OLD_RECORD_SIZE)
    for (key, info_at, status_at), fields in zip(_OLD_BLOCKS, (dha, l2, ai_core)):
        fields = fields or {}
        for i, name in enumerate(_OLD_INFO_FIELDS):
            struct.pack_into("<Q", buf, info_at + 8 * i, _as_int(fields.get(name, 0)))
        struct.pack_into("<Q", buf, status_at, _as_int(fields.get("status", 0)))
        if key == "AI Core":
            struct.pack_into("<Q", buf, _AI_CORE_KERNEL_CODE, _as_int(fields.get("kernel_code", 0)))
            block_idx = fields.get("block_idx", fields.get("block_id", 0))
            struct.pack_into("<Q", buf, _AI_CORE_BLOCK_IDX, _as_int(block_idx))
    return bytes(buf)


def encode_opdebug_new(acc_type: str, fields: dict, *, version: int = 0) -> bytes:
    """A new-layout record. ``fields`` per §2.3; ``status`` is 4 ints for AIC/AIV when version == 1.

    ``valid`` (default 1), ``rsv`` (0) and ``data_len`` (the true length) may be overridden.
    """
    if acc_type not in _ACC_CODES:
        raise ValueError(f"unknown accelerator type {acc_type!r}")
    multi_status = acc_type in ("AIC", "AIV") and version == 1
    words: list[int] = []
    for name in ACC_FIELDS[acc_type]:
        value = fields.get(name, 0)
        if name == "status" and multi_status:
            status = list(value) if isinstance(value, (list, tuple)) else [value]
            if len(status) > STATUS_WORDS_V1:
                raise ValueError(f"status has {len(status)} words, at most {STATUS_WORDS_V1}")
            words += [_as_int(w) for w in status] + [0] * (STATUS_WORDS_V1 - len(status))
        else:
            words.append(_as_int(value))
    data = struct.pack(f"<{len(words)}Q", *words)
    head = _ACC_HEADER.pack(MAGIC, version, _as_int(fields.get("valid", 1)), _ACC_CODES[acc_type],
                            _as_int(fields.get("rsv", 0)), _as_int(fields.get("data_len", len(data))))
    return head + data
