"""The C decoder of v2 dump headers (formats/_dump_v2.c) against the protobuf path: the same
headers, the same error lines, on every dump of the sample workspaces and on many generated and
mutated headers; what it is not sure of goes to protobuf."""

from __future__ import annotations

import os
import struct
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from precision_shell.errors import FormatError
from precision_shell.formats import dump_header
from precision_shell.formats.dump_file import DumpHeader, TensorEntry, _dump_data_class
from precision_shell.model.dump_index import scan_dump_dir
from precision_shell.samples.writer import SampleOptions, write_workspace

pytestmark = pytest.mark.skipif(dump_header._file_heads is None, reason="the C helper is not built")


_PATH = "/nonexistent/Add.op.1.2.17"


def _parse(data: bytes, *, c: bool, monkeypatch, path: str = _PATH) -> DumpHeader | str:
    """The header of a file whose content is ``data`` (or its error line), by one path."""
    with monkeypatch.context() as m:
        if not c:
            m.setattr(dump_header, "_file_heads", None)
        try:
            return dump_header.parse_dump_header(path, data)
        except FormatError as exc:
            return f"FormatError: {exc}"


def _same_either_way(data: bytes, monkeypatch, folder: Path | None = None) -> DumpHeader | str:
    """Parsed by C and by protobuf, and (``folder``) read from a file with the headers of a
    block (read_dump_headers: read and decoded in one C call): all equal."""
    by_c, by_protobuf = _parse(data, c=True, monkeypatch=monkeypatch), _parse(data, c=False, monkeypatch=monkeypatch)
    assert by_c == by_protobuf
    if folder is not None:
        path = folder / "Add.op.1.2.17"
        path.write_bytes(data)
        (read,) = dump_header.read_dump_headers([str(path)])
        want = _parse(data, c=False, monkeypatch=monkeypatch, path=str(path))
        assert (f"FormatError: {read}" if isinstance(read, FormatError) else read) == want
    if isinstance(by_c, DumpHeader):   # equal values of the same types (an int is not a bool, None not 0)
        for a, b in zip(_all_entries(by_c), _all_entries(by_protobuf)):
            assert [type(getattr(a, f)) for f in a.__slots__] == [type(getattr(b, f)) for f in b.__slots__]
    return by_c


def _all_entries(header: DumpHeader) -> list[TensorEntry]:
    return header.inputs + header.outputs + header.buffers + header.spaces


def test_pshell_no_ext_takes_the_protobuf_path(sample_dumps, monkeypatch):
    """PSHELL_NO_EXT=1: every header by protobuf (read_dump_headers reads, does not decode)."""
    monkeypatch.setenv("PSHELL_NO_EXT", "1")
    calls = []
    real = dump_header._dump_data_class
    monkeypatch.setattr(dump_header, "_dump_data_class", lambda: calls.append(1) or real())
    paths = [str(p) for p in sample_dumps]
    alone = [dump_header.read_dump_header(p) for p in paths]
    calls_alone = len(calls)
    assert dump_header.read_dump_headers(paths) == alone
    per_variant = {"v2": 1, "v1": 2, "nano": 0}   # v1: tried as v2 first
    assert len(calls) == 2 * calls_alone == 2 * sum(per_variant[h.variant] for h in alone) > 0


def _decoded_by_c(data: bytes) -> bool:
    (header_len,) = struct.unpack_from("<Q", data)
    return dump_header._file_heads.decode_v2(data[8:8 + header_len], len(data), TensorEntry) is not None


@pytest.fixture(scope="module")
def sample_dumps(sample_ws, tmp_path_factory) -> list[Path]:
    lowprec = tmp_path_factory.mktemp("lowprec")
    write_workspace(lowprec, SampleOptions(seed=1, variant="lowprec"))
    paths = []
    for root in (sample_ws[0], lowprec):
        for folder in sorted({p.parent for p in (root / "precision_data").rglob("*") if p.is_file()}):
            paths += [f.path for f in scan_dump_dir(folder).op_files]
    return paths


def test_every_sample_dump_decodes_in_c_as_protobuf_does(sample_dumps, monkeypatch):
    decoded = 0
    for path in sample_dumps:
        data = Path(path).read_bytes()
        header = _same_either_way(data, monkeypatch)
        assert isinstance(header, DumpHeader), path
        if header.variant == "v2":
            assert _decoded_by_c(data), path      # a plain header never needs protobuf
            decoded += 1
    assert decoded >= 20
    # and through read_dump_headers (the first bytes of each file, as vc's planning reads them)
    together = dump_header.read_dump_headers([str(p) for p in sample_dumps])
    assert together == [dump_header.read_dump_header(p) for p in sample_dumps]


# -- generated headers --------------------------------------------------------------------------
_U64 = st.one_of(st.integers(0, 300), st.integers(0, 2**64 - 1))
_I32 = st.one_of(st.integers(0, 50), st.integers(-2**31, 2**31 - 1))
_TEXT = st.text(max_size=12)


@st.composite
def dump_data(draw):
    """A DumpData message as a dump writer might make it (every field of dump_data.proto)."""
    msg = _dump_data_class()(version=draw(_TEXT), op_name=draw(_TEXT), dump_time=draw(_U64))
    small = st.integers(0, 64)
    for kind in draw(st.lists(st.sampled_from(["input", "output", "buffer", "space", "attr"]), max_size=8)):
        if kind == "attr":
            msg.attr.add(name=draw(_TEXT), value=draw(_TEXT))
        elif kind in ("buffer", "space"):
            getattr(msg, kind).add(size=draw(small))
        else:
            t = getattr(msg, kind).add(data_type=draw(_I32), format=draw(_I32), size=draw(small),
                                       sub_format=draw(_I32), address=draw(_U64), offset=draw(_U64))
            t.shape.dim.extend(draw(st.lists(_U64, max_size=5)))
            if draw(st.booleans()):
                t.original_shape.dim.extend(draw(st.lists(_U64, max_size=5)))
            if kind == "output" and draw(st.booleans()):
                t.original_op.name = draw(_TEXT)
                t.original_op.output_index = draw(st.integers(0, 2**32 - 1))
                t.original_op.data_type = draw(_I32)
            if kind == "output" and draw(st.booleans()):
                t.dim_range.add(dim_start=draw(_U64), dim_end=draw(_U64))
    return msg


def _file(header: bytes, data_bytes: int) -> bytes:
    return struct.pack("<Q", len(header)) + header + b"\x5a" * data_bytes


def _needed(msg) -> int:
    return sum(t.size for group in (msg.input, msg.output, msg.buffer, msg.space) for t in group)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(msg=dump_data(), spare=st.integers(-3, 3))
def test_generated_headers_decode_as_protobuf_does(msg, spare, monkeypatch, tmp_path):
    data = _file(msg.SerializeToString(), max(0, _needed(msg) + spare))
    header = _same_either_way(data, monkeypatch, tmp_path)
    if isinstance(header, DumpHeader):
        assert _decoded_by_c(data)               # a header protobuf writes is the C path's
        assert header.op_name == msg.op_name and len(header.outputs) == len(msg.output)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


# raw fields protobuf may meet in a header: unknown numbers, known numbers with other wire types,
# groups, a singular message twice, unpacked dims, overlong varints, strings that are not UTF-8
_ODD_FIELDS = [
    _varint(9 << 3 | 0) + _varint(5), _varint(99 << 3 | 2) + b"\x02ab", _varint(6 << 3 | 0) + b"\x01",
    _varint(2 << 3 | 2) + b"\x00", _varint(10 << 3 | 3) + _varint(10 << 3 | 4), _varint(11 << 3 | 5) + b"abcd",
    _varint(12 << 3 | 1) + b"abcdefgh", _varint(6 << 3 | 2) + b"\x02\xff\xfe", _varint(1 << 3 | 2) + b"\x01\x80",
    _varint(2 << 3 | 0) + b"\xff" * 9 + b"\x01", _varint(2 << 3 | 0) + b"\xff" * 9 + b"\x02",
    _varint(2 << 3 | 0) + b"\x80\x00", _varint(0 << 3 | 0) + b"\x01", b"\x07", b"\x80",
]
_ODD_TENSOR_FIELDS = [
    _varint(3 << 3 | 2) + b"\x02\x08\x05",  # a second shape (protobuf merges)
    _varint(3 << 3 | 2) + b"\x01\x08",      # a truncated one
    _varint(1 << 3 | 0) + b"\xff" * 9 + b"\x01",  # data_type -1 as 10 bytes
    _varint(1 << 3 | 2) + b"\x00", _varint(4 << 3 | 2) + b"\x02\x12\x00",
    _varint(4 << 3 | 2) + b"\x03\x0a\x01\xc3", _varint(7 << 3 | 2) + b"\x03\x0a\x01\x07",
    _varint(8 << 3 | 0) + b"\xfe\xff\xff\xff\x0f", _varint(10 << 3 | 2) + b"\x02\x08\x01",
    _varint(10 << 3 | 2) + b"\x02\x0a\x00", _varint(6 << 3 | 0) + _varint(2**63),
    _varint(3 << 3 | 2) + b"\x03\x0a\x01\x04",  # packed dims after unpacked ones
]


def _tensor_field(number: int, body: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(body)) + body


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(msg=dump_data(), odd=st.lists(st.tuples(st.sampled_from(_ODD_FIELDS + _ODD_TENSOR_FIELDS),
                                                st.sampled_from([0, 3, 4, 5, 8]), st.integers(0, 10**6)),
                                      min_size=1, max_size=4),
       spare=st.integers(-2, 40))
def test_odd_fields_decode_as_protobuf_does(msg, odd, spare, monkeypatch, tmp_path):
    """Raw fields spliced in at random places, top level or inside a tensor message (field 3:
    output, 4: input, 5: buffer, 8: space; 0: top level)."""
    header = msg.SerializeToString()
    for raw, where, at in odd:
        if where:
            header += _tensor_field(where, raw)
        else:
            cuts = [0] + [i for i in range(1, len(header)) if _field_start(header, i)]
            cut = cuts[at % len(cuts)]
            header = header[:cut] + raw + header[cut:]
    _same_either_way(_file(header, max(0, _needed(msg) + spare)), monkeypatch, tmp_path)


def _field_start(header: bytes, i: int) -> bool:
    try:
        _dump_data_class().FromString(header[:i])
        return True
    except Exception:
        return False


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(msg=dump_data(), edits=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255),
                                                 st.sampled_from(["set", "insert", "delete"])),
                                       min_size=1, max_size=3),
       spare=st.integers(-2, 40))
def test_mutated_headers_decode_as_protobuf_does(msg, edits, spare, monkeypatch, tmp_path):
    """Bytes changed, inserted and deleted anywhere in a header: C and protobuf agree (C accepts,
    or leaves it to protobuf, which accepts, reads it as v1, or words the error)."""
    header = bytearray(msg.SerializeToString() or b"\x0a\x00")
    for at, byte, how in edits:
        at %= len(header) + (how == "insert")
        if how == "set" and header:
            header[at % len(header)] = byte
        elif how == "insert":
            header.insert(at, byte)
        elif len(header) > 1:
            del header[at % len(header)]
    _same_either_way(_file(bytes(header), max(0, _needed(msg) + spare)), monkeypatch, tmp_path)


def test_headers_are_read_without_protobuf(sample_dumps, tmp_path):
    """vc's planning reads every header (read_dump_headers) and a worker re-reads some
    (read_dump_header): neither imports protobuf for v2 files (a child process: this one has
    imported it). Its output: the op names, as the protobuf path in this process reads them."""
    import subprocess

    v2 = [str(p) for p in sample_dumps if dump_header.read_dump_header(p).variant == "v2"]
    listing = tmp_path / "paths.txt"
    listing.write_text("\n".join(v2))
    code = ("import sys; from precision_shell.formats import dump_header as d; "
            f"paths = open({str(listing)!r}).read().split('\\n'); "
            "names = [h.op_name for h in d.read_dump_headers(paths)] + [d.read_dump_header(paths[0]).op_name]; "
            "print('google.protobuf' in sys.modules, *names, sep='\\n')")
    env = {k: v for k, v in os.environ.items() if k != "PSHELL_NO_EXT"}
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env)
    with_protobuf = []
    for p in v2 + v2[:1]:
        with pytest.MonkeyPatch.context() as m:
            m.setattr(dump_header, "_file_heads", None)
            with_protobuf.append(dump_header.read_dump_header(p).op_name)
    assert child.stdout.split("\n")[:-1] == ["False"] + with_protobuf, child.stderr[-2000:]
