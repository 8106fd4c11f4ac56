"""Property: every reader either succeeds or raises FormatError, whatever bytes it is given.

Inputs are random bytes and mutations of valid files (truncation, flipped bytes, a rewritten
length prefix), so the fuzzing reaches deep into the headers instead of failing at byte 0.
"""

from __future__ import annotations

import io
import itertools
import struct

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from precision_shell.errors import FormatError
from precision_shell.formats.dump_file import (
    DumpTensor, read_device_array, read_dump_header, read_logical_array, write_dump,
)
from precision_shell.formats.golden_npy import load_npy, read_npy_header
from precision_shell.formats.nano_dump import encode_nano_dump
from precision_shell.formats.opdebug import encode_opdebug_new, encode_opdebug_old, read_opdebug
from precision_shell.formats.protoload import dump_data_pb

FUZZ = settings(max_examples=200, deadline=None, derandomize=True, database=None,
               suppress_health_check=[HealthCheck.too_slow])
_counter = itertools.count()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


@pytest.fixture(scope="module")
def dump_seeds(workdir):
    return _valid_dumps(workdir)


@pytest.fixture(scope="module")
def opdebug_seeds(workdir):
    return _opdebug_files(workdir)


def _write(workdir, blob: bytes, prefix="Add.add_1.3.2.") -> str:
    path = workdir / f"{prefix}{1700000000000000 + next(_counter)}"
    path.write_bytes(blob)
    return str(path)


def _valid_dumps(workdir) -> list[bytes]:
    x = np.arange(2 * 1 * 2 * 2 * 16, dtype=np.float16).reshape(2, 1, 2, 2, 16)
    nz = np.arange(1 * 1 * 16 * 16, dtype=np.float32).reshape(1, 1, 16, 16).astype(ml_dtypes.bfloat16)
    tensors_in = [DumpTensor(x, 2, 3, (2, 5, 2, 2)), DumpTensor(np.arange(6, dtype=np.int32), 7, 2, (2, 3))]
    tensors_out = [DumpTensor(nz, 27, 29, (3, 5), "tf/op", 0), DumpTensor(np.ones(3, bool), 11, 2)]
    path = workdir / "seed_v2"
    write_dump(path, "op", tensors_in, tensors_out, buffers=[b"buf"], spaces=[b"log\0"])
    v1 = dump_data_pb().DumpData(op_name="v1")
    t = v1.output.add(data_type=1, format=2, data=np.arange(4, dtype=np.float32).tobytes())
    t.shape.dim.append(4)
    return [path.read_bytes(), v1.SerializeToString(), encode_nano_dump(tensors_in, tensors_out)]


def _opdebug_files(workdir) -> list[bytes]:
    blobs = []
    for rec in (encode_opdebug_old(ai_core={"task_id": 3, "status": 0x20}, dha={"status": 0x900}),
                encode_opdebug_new("AIC", {"task_id": 1, "status": 0x400}),
                encode_opdebug_new("AIV", {"status": [1, 0, 0, 2]}, version=1),
                encode_opdebug_new("SDMA", {"status": 1})):
        path = workdir / "seed_opdebug"
        write_dump(path, "Node_OpDebug", [], [DumpTensor(np.frombuffer(rec, np.uint8), 4, 2)])
        blobs.append(path.read_bytes())
    return blobs


def _npy_files() -> list[bytes]:
    blobs = []
    for arr in (np.arange(12, dtype=np.float32).reshape(3, 4), np.ones((2, 2), bool), np.zeros(0, np.int8)):
        buf = io.BytesIO()
        np.save(buf, arr)
        blobs.append(buf.getvalue())
    return blobs


@st.composite
def mutated(draw, seeds: list[bytes]):
    blob = bytearray(draw(st.sampled_from(seeds)))
    kind = draw(st.sampled_from(["truncate", "flip", "length", "mixed"]))
    if kind in ("truncate", "mixed") and blob:
        del blob[draw(st.integers(0, len(blob) - 1)):]
    if kind in ("flip", "mixed") and blob:
        for _ in range(draw(st.integers(1, 8))):
            i = draw(st.integers(0, len(blob) - 1))
            blob[i] = draw(st.integers(0, 255))
    if kind == "length" and len(blob) >= 8:
        blob[:8] = struct.pack("<Q", draw(st.one_of(st.integers(0, len(blob) + 16), st.integers(0, 2**64 - 1))))
    return bytes(blob)


def _exercise_dump(path: str) -> None:
    try:
        header = read_dump_header(path)
    except FormatError as e:
        assert str(e).startswith(path)
        return
    for entry in header.inputs + header.outputs + header.buffers + header.spaces:
        for read in (read_device_array, read_logical_array):
            try:
                read(header, entry)
            except FormatError as e:
                assert str(e).startswith(path)


def _exercise_opdebug(path: str) -> None:
    try:
        read_opdebug(path)
    except FormatError as e:
        assert str(e).startswith(path)


def _exercise_npy(path: str) -> None:
    for read in (read_npy_header, load_npy):
        try:
            read(path)
        except FormatError as e:
            assert str(e).startswith(path)


@FUZZ
@given(st.binary(max_size=512))
def test_random_bytes(workdir, blob):
    path = _write(workdir, blob)
    _exercise_dump(path)
    _exercise_opdebug(path)
    _exercise_npy(path)


@FUZZ
@given(data=st.data())
def test_mutated_dumps(workdir, dump_seeds, data):
    _exercise_dump(_write(workdir, data.draw(mutated(dump_seeds))))


@FUZZ
@given(data=st.data())
def test_mutated_opdebug(workdir, opdebug_seeds, data):
    _exercise_opdebug(_write(workdir, data.draw(mutated(opdebug_seeds)), prefix="Opdebug.Node_OpDebug.1.1."))


@FUZZ
@given(data=st.data())
def test_mutated_npy(workdir, data):
    _exercise_npy(_write(workdir, data.draw(mutated(_npy_files())), prefix="golden.0."))


def test_seeds_are_valid(workdir):
    # the mutation seeds must themselves decode, or the fuzzing above starts from noise
    for blob in _valid_dumps(workdir):
        header = read_dump_header(_write(workdir, blob))
        for entry in header.inputs + header.outputs:
            read_logical_array(header, entry)
    assert [len(read_opdebug(_write(workdir, b, "Opdebug.Node_OpDebug.1.1."))) for b in _opdebug_files(workdir)] \
        == [2, 1, 1, 1]
    for blob in _npy_files():
        load_npy(_write(workdir, blob, "golden.0."))
