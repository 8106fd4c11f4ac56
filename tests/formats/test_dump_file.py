"""Dump containers: v2 (protobuf header + data), v1 (inline data), nano (TLV header).

Files are built two ways: with the DumpData protobuf class and struct directly (so the reader is
checked against the format, not against our own writer) and with ``write_dump``.
"""

from __future__ import annotations

import os
import struct

import ml_dtypes
import numpy as np
import pytest

from precision_shell.errors import FormatError
from precision_shell.formats.dump_file import (
    DumpTensor, read_device_array, read_dump_header, read_logical_array, read_raw_bytes, write_dump,
)
from precision_shell.formats.nano_dump import write_nano_dump
from precision_shell.formats.protoload import dump_data_pb

PB = dump_data_pb()
FP32, FP16, INT8, UINT8, INT32, INT64, BOOL, DOUBLE, C64, BF16, UNDEF = 1, 2, 3, 4, 7, 8, 11, 12, 16, 27, 0
ND, NCHW, NC1HWC0, FRACTAL_NZ = 2, 0, 3, 29
RNG = np.random.default_rng(3)


def sample(dtype, shape=(2, 3, 5)) -> np.ndarray:
    if dtype == np.bool_:
        return RNG.integers(0, 2, size=shape).astype(bool)
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        return RNG.integers(info.min, info.max, size=shape, endpoint=True).astype(dtype)
    x = (RNG.standard_normal(shape) * 1000).astype(np.float32)
    x.flat[:3] = [np.nan, np.inf, -np.inf]   # specials must survive bit-exactly
    return x.astype(dtype)


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint8)


def raw_v2(path, inputs=(), outputs=(), *, op_name="op", buffers=(), spaces=(), mutate=None) -> bytes:
    """A v2 file from (code, format, array[, original_shape]) tuples, built with the protobuf class."""
    msg = PB.DumpData(version="2.0", dump_time=123, op_name=op_name)
    payload = b""
    for kind, items in (("input", inputs), ("output", outputs)):
        for code, fmt, arr, *orig in items:
            t = (msg.input if kind == "input" else msg.output).add(data_type=code, format=fmt, size=arr.nbytes)
            t.shape.dim.extend(arr.shape)
            if orig:
                t.original_shape.dim.extend(orig[0])
            payload += arr.tobytes()
    for raw in buffers:
        msg.buffer.add(size=len(raw))
        payload += raw
    for raw in spaces:
        msg.space.add(size=len(raw))
        payload += raw
    if mutate:
        mutate(msg)
    header = msg.SerializeToString()
    blob = struct.pack("<Q", len(header)) + header + payload
    with open(path, "wb") as f:
        f.write(blob)
    return blob


@pytest.mark.parametrize("code, dtype", [(FP16, np.float16), (FP32, np.float32), (BF16, ml_dtypes.bfloat16),
                                         (INT8, np.int8), (INT32, np.int32), (BOOL, np.bool_),
                                         (UINT8, np.uint8), (INT64, np.int64), (DOUBLE, np.float64),
                                         (C64, np.complex64)])
def test_v2_protobuf_built_file_round_trips_exactly(tmp_path, code, dtype):
    x_in, x_out = sample(dtype), sample(dtype, (4,))
    path = tmp_path / "Add.add_1.3.2.1700000000000000"
    raw_v2(path, [(code, ND, x_in)], [(code, ND, x_out)], op_name="net/add.1")
    h = read_dump_header(path)
    assert (h.variant, h.op_name, h.version, h.dump_time, h.file_size) == \
        ("v2", "net/add.1", "2.0", 123, os.path.getsize(path))
    got_in, got_out = read_device_array(h, h.inputs[0]), read_device_array(h, h.outputs[0])
    assert got_in.dtype == np.dtype(dtype) and got_in.shape == x_in.shape and got_out.shape == (4,)
    np.testing.assert_array_equal(bits(got_in), bits(x_in))
    np.testing.assert_array_equal(bits(got_out), bits(x_out))


def test_segment_order_is_inputs_outputs_buffers_spaces(tmp_path):
    a, b, c = (np.full(3, v, np.float32) for v in (1, 2, 3))
    buf, log = b"L1-bytes", b"log line\0"
    path = tmp_path / "d"
    blob = raw_v2(path, [(FP32, ND, a), (FP32, ND, b)], [(FP32, ND, c)], buffers=[buf], spaces=[log])
    h = read_dump_header(path)
    start = 8 + h.header_len
    assert [e.offset for e in h.inputs + h.outputs] == [start, start + 12, start + 24]
    assert [(e.kind, e.offset, e.size, e.dtype_name) for e in h.buffers + h.spaces] == \
        [("buffer", start + 36, 8, "DT_UNDEFINED"), ("space", start + 44, 9, "DT_UNDEFINED")]
    assert read_raw_bytes(h, h.spaces[0]) == log == blob[-9:]
    assert bits(read_device_array(h, h.buffers[0])).tobytes() == buf
    np.testing.assert_array_equal(read_device_array(h, h.entry("input", 1)), b)


def test_header_metadata(tmp_path):
    def mutate(msg):
        out = msg.output[0]
        out.original_op.name = "conv1/Conv2D"
        out.original_op.output_index = 2
        out.sub_format = 1
        msg.attr.add(name="ffts", value='{"threadMode": 1}')
    x = np.zeros((1, 1, 2, 2, 16), np.float16)
    path = tmp_path / "d"
    raw_v2(path, [(FP16, NCHW, np.zeros((1, 3, 2, 2), np.float16))], [(FP16, NC1HWC0, x, (1, 3, 2, 2))],
           mutate=mutate)
    h = read_dump_header(path)
    out, inp = h.outputs[0], h.inputs[0]
    assert (out.original_name, out.original_output_index, out.sub_format) == ("conv1/Conv2D", 2, 1)
    assert (out.shape, out.original_shape, out.format_name, out.dtype_name) == \
        ((1, 1, 2, 2, 16), (1, 3, 2, 2), "NC1HWC0", "DT_FLOAT16")
    assert (inp.original_shape, inp.original_name, inp.original_output_index) == (None, None, None)
    assert h.attrs == [("ffts", '{"threadMode": 1}')]
    with pytest.raises(FormatError, match="no output:3"):
        h.entry("output", 3)


def test_shape_rules(tmp_path):
    path = tmp_path / "d"
    body = np.arange(10, dtype=np.float32)

    def mutate(msg):
        msg.output[0].shape.ClearField("dim")
        msg.output[0].shape.dim.extend([2, 3])      # 6 of the 10 elements: the tail is ignored
        msg.output[1].shape.ClearField("dim")       # no shape, size > 0: whole segment as 1-D
        msg.output[2].shape.ClearField("dim")
        msg.output[2].shape.dim.extend([4, 0])      # a zero dim: empty
    raw_v2(path, [(UNDEF, ND, np.arange(6, dtype=np.int8).reshape(2, 3))],
           [(FP32, ND, body), (FP32, ND, body), (FP32, ND, body)], mutate=mutate)
    h = read_dump_header(path)
    undefined = read_device_array(h, h.inputs[0])
    assert undefined.dtype == np.int8 and undefined.shape == (6,)   # raw bytes, shape forced to [size]
    np.testing.assert_array_equal(read_device_array(h, h.outputs[0]), body[:6].reshape(2, 3))
    np.testing.assert_array_equal(read_device_array(h, h.outputs[1]), body)
    empty = read_device_array(h, h.outputs[2])
    assert empty.shape == (4, 0) and empty.dtype == np.float32


def forward_nc1hwc0(x: np.ndarray, c0: int) -> np.ndarray:
    n, c, h, w = x.shape
    out = np.zeros((n, -(-c // c0), h, w, c0), x.dtype)
    for ci in range(c):
        out[:, ci // c0, :, :, ci % c0] = x[:, ci]
    return out


def forward_nz(x: np.ndarray, c0: int, n0: int = 16) -> np.ndarray:
    n, c = x.shape
    out = np.zeros((-(-c // c0), -(-n // n0), n0, c0), x.dtype)
    for ni in range(n):
        for ci in range(c):
            out[ci // c0, ni // n0, ni % n0, ci % c0] = x[ni, ci]
    return out


def test_logical_arrays_from_device_layouts(tmp_path):
    act = sample(np.float16, (2, 19, 3, 3))
    mat = sample(ml_dtypes.bfloat16, (20, 33))
    path = tmp_path / "d"
    nhwc = np.ascontiguousarray(act.transpose(0, 2, 3, 1))   # e.g. a TF graph: the original shape is NHWC
    raw_v2(path, [(FP16, NC1HWC0, forward_nc1hwc0(act, 16), act.shape),
                  (FP16, NC1HWC0, forward_nc1hwc0(act, 16), nhwc.shape)],
           [(BF16, FRACTAL_NZ, forward_nz(mat, 16), mat.shape), (FP32, ND, np.arange(6, dtype=np.float32), (2, 3)),
            (FP32, ND, np.arange(6, dtype=np.float32), (4, 2))])
    h = read_dump_header(path)
    np.testing.assert_array_equal(bits(read_logical_array(h, h.inputs[0])), bits(act))
    got_nhwc = read_logical_array(h, h.inputs[1], target_format="NHWC")
    np.testing.assert_array_equal(bits(got_nhwc), bits(nhwc))
    expect_format_error(h.path, lambda p: read_logical_array(h, h.inputs[1]), "cannot hold")  # read as NCHW
    got = read_logical_array(h, h.outputs[0])
    assert got.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(bits(got), bits(mat))
    assert read_logical_array(h, h.outputs[1]).shape == (2, 3)
    assert read_logical_array(h, h.outputs[2]).shape == (6,)    # stale original shape: kept as stored


def test_writer_output_is_a_conforming_v2_file(tmp_path):
    x = sample(np.float16, (1, 2, 3, 3, 16))
    w = sample(ml_dtypes.bfloat16, (4,))
    path = tmp_path / "Conv2D.conv1.1.2.1700000000000000"
    n = write_dump(path, "conv1", [DumpTensor(x, FP16, NC1HWC0, (1, 20, 3, 3))],
                   [DumpTensor(w, BF16, ND, None, "tf/conv1", 1)], dump_time=99, buffers=[b"abc"])
    blob = path.read_bytes()
    assert n == len(blob)
    (hl,) = struct.unpack_from("<Q", blob)
    msg = PB.DumpData.FromString(blob[8:8 + hl])       # decoded independently of our reader
    assert (msg.op_name, msg.dump_time, msg.version) == ("conv1", 99, "2.0")
    assert list(msg.input[0].shape.dim) == [1, 2, 3, 3, 16] and list(msg.input[0].original_shape.dim) == [1, 20, 3, 3]
    assert (msg.output[0].original_op.name, msg.output[0].original_op.output_index) == ("tf/conv1", 1)
    assert blob[8 + hl:] == x.tobytes() + w.tobytes() + b"abc"
    h = read_dump_header(path)
    np.testing.assert_array_equal(bits(read_device_array(h, h.inputs[0])), bits(x))
    np.testing.assert_array_equal(bits(read_device_array(h, h.outputs[0])), bits(w))
    assert read_raw_bytes(h, h.buffers[0]) == b"abc"


def test_v1_inline_data(tmp_path):
    x, y = sample(np.float32, (3, 4)), sample(np.int32, (5,))
    msg = PB.DumpData(version="1.0", op_name="mul", dump_time=7)
    t = msg.input.add(data_type=FP32, format=ND, data=x.tobytes(), size=x.nbytes)
    t.shape.dim.extend(x.shape)
    o = msg.output.add(data_type=INT32, format=ND, data=y.tobytes())  # size left unset
    o.shape.dim.extend(y.shape)
    o.original_op.name = "tf/mul"
    path = tmp_path / "Mul.mul.1.2.1700000000000000"
    path.write_bytes(msg.SerializeToString())
    h = read_dump_header(path)
    assert (h.variant, h.op_name, h.version, h.outputs[0].original_name) == ("v1", "mul", "1.0", "tf/mul")
    assert h.outputs[0].size == y.nbytes
    np.testing.assert_array_equal(read_device_array(h, h.inputs[0]), x)
    np.testing.assert_array_equal(read_device_array(h, h.outputs[0]), y)


def nano_record_input(dtype, fmt, size, shape, original=None) -> bytes:
    tlv = struct.pack("<II", 0, 8 * len(shape)) + struct.pack(f"<{len(shape)}Q", *shape)
    if original is not None:
        tlv += struct.pack("<II", 1, 8 * len(original)) + struct.pack(f"<{len(original)}Q", *original)
    return struct.pack("<iiiQQQI", dtype, fmt, 0, 0xdead, 0, size, len(tlv)) + tlv


def nano_record_output(dtype, fmt, size, shape, index, name) -> bytes:
    tlv = struct.pack("<II", 0, 8 * len(shape)) + struct.pack(f"<{len(shape)}Q", *shape)
    tlv += struct.pack("<II", 2, len(name)) + name
    return struct.pack("<iiiiiiQQQI", dtype, fmt, 0, index, dtype, fmt, 0, 0, size, len(tlv)) + tlv


def test_nano_file_built_by_hand(tmp_path):
    a = sample(np.float16, (2, 3))          # nano code 1 = fp16
    b = sample(np.int32, (4,))              # nano code 3 = int32
    c = sample(ml_dtypes.bfloat16, (2, 2))  # nano code 27 = bf16
    inputs = struct.pack("<I", 2) + nano_record_input(1, ND, a.nbytes, a.shape, (6,)) + \
        nano_record_input(3, ND, b.nbytes, b.shape)
    outputs = struct.pack("<I", 1) + nano_record_output(27, ND, c.nbytes, c.shape, 1, b"tf/out")
    header = struct.pack("<II", 0x5A5A5A5A, 3) + struct.pack("<II", 4, len(inputs)) + inputs + \
        struct.pack("<II", 5, len(outputs)) + outputs
    path = tmp_path / "Add.add_nano.4.5.1700000000000077"
    path.write_bytes(struct.pack("<Q", len(header)) + header + a.tobytes() + b.tobytes() + c.tobytes())
    h = read_dump_header(path)
    assert (h.variant, h.version, h.op_name, h.dump_time) == ("nano", "3", "add_nano", 1700000000000077)
    assert [e.dtype_name for e in h.inputs + h.outputs] == ["DT_FLOAT16", "DT_INT32", "DT_BF16"]
    assert (h.inputs[0].original_shape, h.inputs[1].original_shape) == ((6,), None)
    assert (h.outputs[0].original_name, h.outputs[0].original_output_index) == ("tf/out", 1)
    for entry, expected in zip(h.inputs + h.outputs, (a, b, c)):
        np.testing.assert_array_equal(bits(read_device_array(h, entry)), bits(expected))
    np.testing.assert_array_equal(read_logical_array(h, h.inputs[0]), a.reshape(6))


def test_nano_writer_round_trip(tmp_path):
    x = sample(np.float32, (1, 5, 2, 2))
    dev = forward_nc1hwc0(x, 16)
    path = tmp_path / "Relu.relu.1.1.1700000000000000"
    write_nano_dump(path, [DumpTensor(dev, FP32, NC1HWC0, x.shape)],
                    [DumpTensor(np.arange(3, dtype=np.int8), INT8, ND, None, "tf/relu", 0)])
    h = read_dump_header(path)
    assert h.variant == "nano" and h.outputs[0].original_name == "tf/relu"
    np.testing.assert_array_equal(bits(read_logical_array(h, h.inputs[0])), bits(x))
    np.testing.assert_array_equal(read_device_array(h, h.outputs[0]), np.arange(3, dtype=np.int8))


# ---------------------------------------------------------------------------------------------- bad input

def good_file(tmp_path) -> tuple[str, bytes]:
    path = str(tmp_path / "Add.add.1.2.1700000000000000")
    blob = raw_v2(path, [(FP32, ND, np.arange(8, dtype=np.float32))], [(FP16, ND, np.ones(4, np.float16))])
    return path, blob


def expect_format_error(path, call=read_dump_header, match=None):
    with pytest.raises(FormatError) as e:
        call(path)
    assert str(e.value).startswith(f"{path}: ")
    if match:
        assert match in str(e.value)


def test_truncated_data_overruns(tmp_path):
    path, blob = good_file(tmp_path)
    open(path, "wb").write(blob[:-1])
    expect_format_error(path, match="overrun")


def test_truncated_inside_header_and_length(tmp_path):
    path, blob = good_file(tmp_path)
    open(path, "wb").write(blob[:20])
    expect_format_error(path, match="larger than the file")
    open(path, "wb").write(blob[:5])
    expect_format_error(path, match="truncated")


def test_header_length_larger_than_file(tmp_path):
    path, blob = good_file(tmp_path)
    open(path, "wb").write(struct.pack("<Q", len(blob)) + blob[8:])
    expect_format_error(path, match="header length")


def test_sizes_overrun(tmp_path):
    path = str(tmp_path / "d")
    raw_v2(path, [(FP32, ND, np.zeros(4, np.float32))], mutate=lambda m: setattr(m.input[0], "size", 17))
    expect_format_error(path, match="overrun")


def test_corrupt_protobuf(tmp_path):
    path, blob = good_file(tmp_path)
    (hl,) = struct.unpack_from("<Q", blob)
    open(path, "wb").write(blob[:8] + b"\xff" * hl + blob[8 + hl:])
    expect_format_error(path, match="corrupt protobuf")


def test_unknown_dtype_and_format_codes(tmp_path):
    path = str(tmp_path / "d")
    arr = np.zeros((1, 1, 2, 2, 16), np.float16)
    raw_v2(path, [(99, ND, np.zeros(4, np.float32))], [(FP16, 201, arr, (1, 3, 2, 2))])
    h = read_dump_header(path)   # unknown codes do not make the header unreadable
    assert (h.inputs[0].dtype_name, h.outputs[0].format_name) == ("DT_99", "FORMAT_201")
    expect_format_error(path, lambda p: read_device_array(h, h.inputs[0]), "unsupported data type DT_99 (code 99)")
    expect_format_error(path, lambda p: read_logical_array(h, h.outputs[0]), "no converter from FORMAT_201")


def test_unsupported_dtype_name(tmp_path):
    path = str(tmp_path / "d")
    raw_v2(path, [(13, ND, np.zeros(4, np.uint8))])
    h = read_dump_header(path)
    expect_format_error(path, lambda p: read_device_array(h, h.inputs[0]), "DT_STRING")


def test_shape_size_mismatch(tmp_path):
    path = str(tmp_path / "d")
    raw_v2(path, [(FP32, ND, np.zeros(4, np.float32))], mutate=lambda m: m.input[0].shape.dim.append(2))
    h = read_dump_header(path)
    expect_format_error(path, lambda p: read_device_array(h, h.inputs[0]), "needs 32 bytes but its size is 16")


def test_file_shrunk_after_indexing(tmp_path):
    path, blob = good_file(tmp_path)
    h = read_dump_header(path)
    open(path, "wb").write(blob[:-4])
    expect_format_error(path, lambda p: read_device_array(h, h.outputs[0]), "truncated")


def test_corrupt_nano_header(tmp_path):
    path = str(tmp_path / "Add.add.1.2.3")
    header = struct.pack("<II", 0x5A5A5A5A, 0) + struct.pack("<II", 4, 8) + struct.pack("<I", 3)
    open(path, "wb").write(struct.pack("<Q", len(header)) + header)
    expect_format_error(path, match="corrupt nano dump header")


def test_empty_missing_and_directory(tmp_path):
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    expect_format_error(str(empty), match="empty file")
    expect_format_error(str(tmp_path / "missing"), match="no such file")
    expect_format_error(str(tmp_path), match="directory")


# ---------------------------------------------------------------------------------------------- many headers at once

def _header_or_error(path):
    try:
        return read_dump_header(path)
    except FormatError as exc:
        return exc


def test_headers_read_together_equal_headers_read_alone(tmp_path, monkeypatch):
    """``read_dump_headers`` (the first bytes of many files in one C call, each header parsed
    from them) gives what ``read_dump_header`` gives file by file: the same headers, the same
    error lines; files whose header does not fit in those bytes, and files the C helper cannot
    read, are read alone."""
    from precision_shell.formats import dump_header

    paths = []

    def add(name):
        paths.append(str(tmp_path / name))
        return paths[-1]
    raw_v2(add("Add.small.1.2.1700000000000000"), [(FP32, ND, np.arange(8, dtype=np.float32))],
           [(FP16, NC1HWC0, np.ones((1, 1, 2, 2, 16), np.float16), (1, 3, 2, 2))])
    big_name = "x" * (2 * dump_header.HEAD_BYTES)     # a header longer than the bytes read ahead
    raw_v2(add("Add.big.1.2.1700000000000001"), [(FP32, ND, np.arange(8, dtype=np.float32))], op_name=big_name)
    path, blob = good_file(tmp_path)
    for cut, name in ((-1, "overrun"), (20, "len"), (5, "short")):
        open(add(f"Add.{name}.1.2.17"), "wb").write(blob[:cut])
    (hl,) = struct.unpack_from("<Q", blob)
    open(add("Add.corrupt.1.2.17"), "wb").write(blob[:8] + b"\xff" * hl + blob[8 + hl:])
    for size in (16, 4096):         # v1: the whole file is the header, inside and past the bytes read
        x = np.arange(size, dtype=np.float32)
        msg = PB.DumpData(version="1.0", op_name="mul", dump_time=7)
        t = msg.input.add(data_type=FP32, format=ND, data=x.tobytes(), size=x.nbytes)
        t.shape.dim.extend(x.shape)
        open(add(f"Mul.v1_{size}.1.2.17"), "wb").write(msg.SerializeToString())
    write_nano_dump(add("Relu.nano.1.1.1700000000000000"), [DumpTensor(np.ones(4, np.float32), FP32, ND, None)], [])
    open(add("empty"), "wb").close()
    add("missing")
    os.mkdir(add("folder"))
    os.mkfifo(add("fifo"))          # refused, never waited on

    alone = [_header_or_error(p) for p in paths]
    fallbacks = []
    real = dump_header.read_dump_header
    monkeypatch.setattr(dump_header, "read_dump_header", lambda p: fallbacks.append(p) or real(p))
    together = dump_header.read_dump_headers(paths)
    assert len(together) == len(paths)
    for path, a, b in zip(paths, alone, together):
        assert type(a) is type(b), path
        assert (str(a) if isinstance(a, FormatError) else a) == (str(b) if isinstance(b, FormatError) else b), path
    assert isinstance(together[0], dump_header.DumpHeader) and together[0].outputs[0].original_shape == (1, 3, 2, 2)
    assert "no such file" in str(together[paths.index(str(tmp_path / "missing"))])
    if dump_header._file_heads is not None:   # only what does not fit, or cannot be opened, is read alone
        unreadable = {str(tmp_path / n) for n in ("missing", "folder", "fifo")}
        assert set(fallbacks) == unreadable | {paths[1], str(tmp_path / "Mul.v1_4096.1.2.17")}
    monkeypatch.setattr(dump_header, "_file_heads", None)
    fallbacks.clear()
    plain = dump_header.read_dump_headers(paths)
    assert [str(h) for h in plain] == [str(h) for h in together] and fallbacks == paths
