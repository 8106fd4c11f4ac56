"""Opdebug overflow records: old 2048-byte layout, new magic layout (v0 and v1), status words.

Records are built with struct at the offsets of formats.md §2.2/§2.3 (independently of the
encoders, which are then checked against the same bytes).
"""

from __future__ import annotations

import struct

import numpy as np
import pytest

from precision_shell.errors import FormatError
from precision_shell.formats.dump_file import DumpTensor, write_dump
from precision_shell.formats.opdebug import (
    decode_opdebug_buffer, encode_opdebug_new, encode_opdebug_old, read_opdebug, status_words,
)

OLD_INFO = ("model_id", "stream_id", "task_id", "task_type", "pc_start", "para_base")
AIC_FIELDS = ("model_id", "stream_id", "task_id", "task_type", "context_id", "thread_id",
              "pc_start", "para_base", "core_id", "block_id", "status")


def old_record(dha=None, l2=None, ai=None) -> bytes:
    buf = bytearray(2048)
    for block, info_at, status_at in ((dha, 0, 512), (l2, 128, 768), (ai, 256, 1040)):
        if block:
            struct.pack_into("<6Q", buf, info_at, *(block[k] for k in OLD_INFO))
            struct.pack_into("<Q", buf, status_at, block["status"])
    if ai:
        struct.pack_into("<2Q", buf, 1024, ai["kernel_code"], ai["block_idx"])
    return bytes(buf)


def new_record(acc_code: int, words, version=0, valid=1, data_len=None) -> bytes:
    data = struct.pack(f"<{len(words)}Q", *words)
    return struct.pack("<6I", 0x5A5A5A5A, version, valid, acc_code, 0,
                       len(data) if data_len is None else data_len) + data


def opdebug_file(tmp_path, *records, name="Opdebug.Node_OpDebug.59.3.1700000000000301", dtype=4) -> str:
    path = str(tmp_path / name)
    outputs = []
    for rec in records:
        arr = np.frombuffer(rec, np.uint8) if dtype == 4 else np.frombuffer(rec, np.uint64)
        outputs.append(DumpTensor(arr, dtype, 2))
    write_dump(path, "Node_OpDebug", [], outputs)
    return path


AI = dict(model_id=1, stream_id=3, task_id=8, task_type=0, pc_start=0x12c0000, para_base=0x12c1000,
          kernel_code=0xabc0, block_idx=5, status=0x110)
DHA = dict(model_id=1, stream_id=3, task_id=9, task_type=0, pc_start=0x10, para_base=0x20, status=0x900)


def test_old_layout_json_shape():
    raw = decode_opdebug_buffer(old_record(dha=DHA, ai=AI))
    assert list(raw) == ["DHA Atomic Add", "L2 Atomic Add", "AI Core"]
    expected_ai = {k: (hex(v) if k in ("pc_start", "para_base", "kernel_code") else v) for k, v in AI.items()}
    assert raw["AI Core"] == expected_ai
    assert raw["DHA Atomic Add"] == {k: (hex(v) if k in ("pc_start", "para_base") else v) for k, v in DHA.items()}
    assert raw["L2 Atomic Add"] == {"model_id": 0, "stream_id": 0, "task_id": 0, "task_type": 0,
                                    "pc_start": "0x0", "para_base": "0x0", "status": 0}


def test_encode_old_matches_the_documented_offsets():
    assert encode_opdebug_old(ai_core=AI, dha=DHA) == old_record(dha=DHA, ai=AI)
    block_id_spelling = {**AI, "block_id": AI["block_idx"]}
    del block_id_spelling["block_idx"]
    assert encode_opdebug_old(ai_core=block_id_spelling) == old_record(ai=AI)
    assert len(encode_opdebug_old()) == 2048


def test_read_old_layout_records_in_vendor_order(tmp_path):
    path = opdebug_file(tmp_path, old_record(dha=DHA, ai=AI))
    recs = read_opdebug(path)
    assert [r.unit for r in recs] == ["DHA Atomic Add", "AI Core"]   # L2 has status 0
    dha, ai = recs
    assert (ai.layout, ai.task_id, ai.stream_id, ai.model_id, ai.status) == ("old", 8, 3, 1, 0x110)
    assert (ai.context_id, ai.thread_id, ai.file_timestamp, ai.path) == (None, None, 1700000000000301, path)
    assert ai.status_words == ("integer overflow", "fp32/int32->fp16 conversion overflow")
    assert dha.status_words == ("atomic overflow",) and dha.task_id == 9
    assert ai.raw == decode_opdebug_buffer(old_record(dha=DHA, ai=AI))


def test_no_overflow_gives_no_records(tmp_path):
    assert read_opdebug(opdebug_file(tmp_path, old_record(ai={**AI, "status": 0}))) == []
    aic = [1, 3, 7, 0, 0, 0, 0, 0, 0, 0, 0]
    assert read_opdebug(opdebug_file(tmp_path, new_record(0, aic), name="Opdebug.Node_OpDebug.1.1.2")) == []


def test_new_layout_aic_version0(tmp_path):
    words = [1, 3, 7, 0, 65535, 65535, 0x12c0000, 0x12c1000, 2, 4, 1024]
    raw = decode_opdebug_buffer(new_record(0, words))
    assert raw == {"magic": "0x5a5a5a5a", "version": 0,
                   "acc_list": {"valid": 1, "acc_type": "AIC", "rsv": 0, "data_len": 88, "data": {
                       "model_id": 1, "stream_id": 3, "task_id": 7, "task_type": 0, "context_id": 65535,
                       "thread_id": 65535, "pc_start": "0x12c0000", "para_base": "0x12c1000", "core_id": 2,
                       "block_id": 4, "status": 1024}}}
    (rec,) = read_opdebug(opdebug_file(tmp_path, new_record(0, words)))
    assert (rec.layout, rec.unit, rec.task_id, rec.stream_id, rec.status) == ("new", "AIC", 7, 3, 1024)
    assert (rec.context_id, rec.thread_id) == (None, None)   # 65535 = invalid
    assert rec.status_words == ("cube accumulation overflow",)


def test_new_layout_aiv_version1_four_word_status(tmp_path):
    words = [2, 5, 11, 4, 1, 0, 0x100, 0x200, 0, 1, 0x20, 0, 0x7, 0]
    rec_bytes = new_record(1, words, version=1)
    raw = decode_opdebug_buffer(rec_bytes)
    assert raw["acc_list"]["data_len"] == 112 and raw["acc_list"]["data"]["status"] == [0x20, 0, 7, 0]
    (rec,) = read_opdebug(opdebug_file(tmp_path, rec_bytes))
    assert (rec.unit, rec.status, rec.context_id, rec.thread_id) == ("AIV", (0x20, 0, 7, 0), 1, 0)
    assert rec.status_words == ("float overflow", "word 2 0x7")
    # only word 1 set still counts as an overflow
    (rec2,) = read_opdebug(opdebug_file(tmp_path, new_record(1, words[:10] + [0, 1, 0, 0], version=1),
                                        name="Opdebug.Node_OpDebug.2.5.1700000000000302"))
    assert rec2.status == (0, 1, 0, 0) and rec2.status_words == ("word 1 0x1",)


def test_new_layout_aicpu_and_sdma(tmp_path):
    aicpu = [1, 2, 3, 1, 65535, 6, 9, 0x5]          # ... context_id, cpu_id, thread_id, status
    raw = decode_opdebug_buffer(new_record(2, aicpu))
    assert raw["acc_list"]["data"] == {"model_id": 1, "stream_id": 2, "task_id": 3, "task_type": 1,
                                       "context_id": 65535, "cpu_id": 6, "thread_id": 9, "status": 5}
    sdma = [1, 2, 4, 0, 3, 65535, 0xa000, 0xb000, 7, 0x11]
    data = decode_opdebug_buffer(new_record(3, sdma))["acc_list"]["data"]
    assert (data["src_addr"], data["dst_addr"], data["channel_id"]) == ("0xa000", "0xb000", 7)
    path = opdebug_file(tmp_path, new_record(2, aicpu), new_record(3, sdma))   # two output slots
    recs = read_opdebug(path)
    assert [(r.unit, r.context_id, r.thread_id, r.status_words) for r in recs] == \
        [("AICPU", None, 9, ("status 0x5",)), ("SDMA", 3, None, ("status 0x11",))]


def test_encode_new_matches_independent_bytes_and_decoded_json_round_trips():
    words = [1, 3, 7, 0, 65535, 65535, 0x12c0000, 0x12c1000, 2, 4, 1024]
    fields = dict(zip(AIC_FIELDS, words))
    assert encode_opdebug_new("AIC", fields) == new_record(0, words)
    v1 = encode_opdebug_new("AIV", {**fields, "status": [1, 2, 3, 4]}, version=1)
    assert v1 == new_record(1, words[:10] + [1, 2, 3, 4], version=1)
    decoded = decode_opdebug_buffer(v1)["acc_list"]["data"]        # hex strings and a status list
    assert encode_opdebug_new("AIV", decoded, version=1) == v1
    aicpu = encode_opdebug_new("AICPU", {"task_id": 3, "thread_id": 9, "status": 5})
    assert aicpu == new_record(2, [0, 0, 3, 0, 0, 0, 9, 5])


def test_record_stored_with_another_dtype(tmp_path):
    # the vendor re-serialises the output array, so the record's dtype does not matter
    (rec,) = read_opdebug(opdebug_file(tmp_path, old_record(ai=AI), dtype=10))   # DT_UINT64, shape [256]
    assert rec.unit == "AI Core" and rec.status == 0x110


@pytest.mark.parametrize("unit, status, words", [
    ("AI Core", 272, ("integer overflow", "fp32/int32->fp16 conversion overflow")),
    ("AI Core", 0x8 | 0x80, ("integer negation overflow", "negative float to unsigned conversion")),
    ("AIC", 0x20 | 0x1, ("float overflow", "unknown bits 0x1")),
    ("AI Core", 0, ()),
    ("DHA Atomic Add", 0xA00, ("atomic underflow",)),          # the reference tool could not decode 0xA-0xD
    ("DHA Atomic Add", 0xD00 | 0x3, ("atomic src and dst nan", "unknown bits 0x3")),
    ("DHA Atomic Add", 0x100, ("unknown DHA code 0x1",)),
    ("L2 Atomic Add", 1 << 16, ("atomic overflow",)),
    ("L2 Atomic Add", 4 << 16, ("atomic dst nan",)),
    ("L2 Atomic Add", 6 << 16, ("unknown L2 code 0x6",)),
    ("L2 Atomic Add", 1 << 20, ("unknown bits 0x100000",)),
    ("SDMA", 0x11, ("status 0x11",)),
    ("AIV", (0x400, 0, 0, 0), ("cube accumulation overflow",)),
])
def test_status_words(unit, status, words):
    assert status_words(unit, status) == words


def test_bad_records(tmp_path):
    cases = {
        "short_old": (b"\x01" * 100, "needs exactly 2048"),
        "unknown_acc": (new_record(9, [0] * 11), "unknown accelerator type 9"),
        "truncated_new": (new_record(0, [0] * 5), "needs 112"),
        "tiny_new": (struct.pack("<I", 0x5A5A5A5A), "shorter than its 24-byte header"),
    }
    for i, (name, (rec, message)) in enumerate(cases.items()):
        path = opdebug_file(tmp_path, rec, name=f"Opdebug.Node_OpDebug.{i}.0.170000000000000{i}")
        with pytest.raises(FormatError) as e:
            read_opdebug(path)
        assert str(e.value).startswith(f"{path}: ") and message in str(e.value), name


def test_bad_container(tmp_path):
    no_outputs = str(tmp_path / "Opdebug.Node_OpDebug.1.1.1")
    write_dump(no_outputs, "Node_OpDebug", [], [])
    garbage = tmp_path / "Opdebug.Node_OpDebug.1.1.2"
    garbage.write_bytes(b"\x00\x01\x02")
    for path, message in ((no_outputs, "no output"), (str(garbage), "truncated"),
                          (str(tmp_path / "missing"), "no such file")):
        with pytest.raises(FormatError) as e:
            read_opdebug(path)
        assert str(e.value).startswith(f"{path}: ") and message in str(e.value)
