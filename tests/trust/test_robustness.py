"""Standing robustness suite: hostile and corrupt inputs to every reader and to a whole session.

Property: whatever the bytes, a reader returns or raises a :class:`PshellError` whose message is
one line, of bounded length, naming the file. Any other exception (IndexError, ValueError,
RecursionError, MemoryError, ...) escaping is a bug. Inputs are mutations of valid files made by
the sample generator (so the fuzzing gets past the magic bytes) plus structured hostile values
(dims that are negative, huge or zero, lengths beyond the file, 5000-digit numbers, deep nesting).

Settings are derandomized and bounded: the same examples every run, the whole module in ~30 s.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
import re
import shutil
import struct
from pathlib import Path

import pytest
from google.protobuf import text_format
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from precision_shell.cli import main
from precision_shell.errors import PshellError
from precision_shell.formats import dtypes
from precision_shell.formats.dump_file import (
    _dump_data_class, parse_dump_header, read_device_array, read_dump, read_dump_header, read_logical_array,
    v2_tensor_layout,
)
from precision_shell.formats.dump_names import read_mapping_csv
from precision_shell.formats.fusion_result import read_fusion_result
from precision_shell.formats.golden_npy import array_from_bytes, load_npy, read_npy, read_npy_header
from precision_shell.formats.graph.atc_json import parse_graph_json
from precision_shell.formats.opdebug import encode_opdebug_new, encode_opdebug_old, read_opdebug
from precision_shell.formats.protoload import ge_ir_pb
from precision_shell.model.dump_index import _select_dumps
from precision_shell.model.graph_load import load_op_graph
from precision_shell.samples.writer import SampleOptions, write_workspace
from tests.formats.test_graph_json import to_atc_json

# A reason longer than this after the path is not "one line" any more.
MAX_REASON = 300


def robust(examples: int):
    return settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                           HealthCheck.data_too_large, HealthCheck.filter_too_much])


_counter = itertools.count()


class Seeds(dict):
    def __repr__(self) -> str:  # failure reports print the fixtures: not 300 kB of seed files
        return f"Seeds({', '.join(f'{k}: {len(v)}' for k, v in self.items())})"


@pytest.fixture(scope="module")
def seeds(tmp_path_factory) -> Seeds:
    """Valid files of every kind, from sample workspaces (all four fusion report shapes, both
    Opdebug layouts)."""
    out = Seeds(fusion=[], opdebug=[], dump=[], graph_text=[], npy=[])
    for shape, layout in ((1, "old"), (2, "new"), (3, "old"), (4, "new")):
        root = tmp_path_factory.mktemp(f"seed{shape}")
        manifest = write_workspace(root, SampleOptions(seed=0, fusion_shape=shape, opdebug_layout=layout))
        out["fusion"].append((root / "precision_data/fusion/fusion_result.json").read_bytes())
        out["opdebug"].append((root / manifest["overflow"]["opdebug_file"]).read_bytes())
        if shape == 1:
            ops = [o for o in manifest["ops"] if o.get("dump_file")]
            out["dump"] = [(root / o["dump_file"]).read_bytes() for o in ops[:: max(1, len(ops) // 6)]]
            text = (root / manifest["paths"]["graph_file"]).read_bytes()
            out["graph_text"] = [text]
            model = ge_ir_pb().ModelDef()
            text_format.Parse(text.decode(), model, allow_unknown_field=True)
            out["graph_json"] = [json.dumps(to_atc_json(model), indent=1).encode()]
            goldens = sorted((root / manifest["paths"]["golden_dir"]).glob("*.npy"))
            out["npy"] = [g.read_bytes() for g in goldens[:4]]
    return out


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("robust")


def _write(workdir: Path, blob: bytes, name: str) -> Path:
    path = workdir / f"{next(_counter)}" / name
    path.parent.mkdir()
    path.write_bytes(blob)
    return path


def check_message(exc: PshellError, path: Path) -> None:
    message = str(exc)
    assert "\n" not in message and "\r" not in message, message
    assert message.startswith(str(path)), message
    assert len(message) <= len(str(path)) + MAX_REASON, message


def survive(path: Path, read, *args, **kwargs):
    """``read(*args)``; a PshellError is checked and gives None, anything else propagates."""
    try:
        return read(*args, **kwargs)
    except PshellError as exc:
        check_message(exc, path)
        return None


# -- mutations --------------------------------------------------------------------------------------

HUGE_NUMBERS = [b"9" * 5000, b"1" * 400, b"18446744073709551616", b"-1", b"1e999", b"NaN"]


@st.composite
def mutated(draw, blobs: list[bytes], text: bool = False):
    """A valid file after a few edits: truncation, byte flips, a length prefix rewritten, a
    span repeated; for text also a number made huge and brackets nested thousands deep."""
    blob = bytearray(draw(st.sampled_from(blobs)))
    kinds = ["truncate", "flip", "repeat"] + (["number", "reference", "nest"] if text else ["length"])
    for kind in draw(st.lists(st.sampled_from(kinds), min_size=1, max_size=3)):
        if not blob:
            break
        at = draw(st.integers(0, len(blob) - 1))
        if kind == "truncate":
            del blob[at:]
        elif kind == "flip":
            blob[at] = draw(st.integers(0, 255))
        elif kind == "repeat":
            blob[at:at] = blob[at:at + draw(st.integers(1, 64))] * draw(st.integers(1, 4))
        elif kind == "length" and len(blob) >= 8:
            blob[:8] = struct.pack("<Q", draw(st.sampled_from([0, 1, len(blob) - 8, len(blob), 2**32 - 1, 2**64 - 1])))
        elif kind == "number":
            digits = [m.span() for m in re.finditer(rb"\d+", blob)]
            if digits:
                start, end = draw(st.sampled_from(digits))
                blob[start:end] = draw(st.sampled_from(HUGE_NUMBERS))
        elif kind == "reference":  # the index of an "op:N" input reference (few among all numbers)
            refs = [m.span(1) for m in re.finditer(rb':(\d+)"', blob)]
            if refs:
                start, end = draw(st.sampled_from(refs))
                blob[start:end] = draw(st.sampled_from(HUGE_NUMBERS))
        elif kind == "nest":
            depth = draw(st.sampled_from([50, 3000, 100_000]))
            opener = draw(st.sampled_from([b"[", b'{"a":']))
            blob[at:at] = opener * depth + (b"]" if opener == b"[" else b"}") * depth
    return bytes(blob)


HUGE_DIMS = [0, 1, 16, 2**31, 30_000_000, 2**40, 2**62, 2**63, 2**64 - 1]  # dump dims are uint64
DIMS = st.one_of(st.integers(0, 40), st.sampled_from(HUGE_DIMS))
NPY_DIMS = st.one_of(DIMS, st.sampled_from([-1, -2**63]))
DTYPE_CODES = sorted(set(dtypes.__dict__[n] for n in dir(dtypes) if n.startswith("DT_"))) + [14, 999]
FORMAT_CODES = sorted(set(dtypes.__dict__[n] for n in dir(dtypes) if n.startswith("FORMAT_"))) + [7, 999]


SMALL_DIMS = st.lists(st.integers(0, 33), max_size=6)


@st.composite
def hostile_dump(draw) -> bytes:
    """A v2 dump whose header is well-formed protobuf but says anything: dims huge or zero,
    original shapes that disagree, sizes beyond the data, every data type and format. Half the
    tensors are self-consistent (size = elements x item size, data present), so the layout
    converters get real arrays with hostile original shapes."""
    msg = _dump_data_class()(op_name="hostile", version="2.0")
    need = 0
    for group in (msg.input, msg.output, msg.buffer):
        for _ in range(draw(st.integers(0, 2))):
            t = group.add()
            if group is msg.buffer:
                t.size = draw(st.integers(0, 64))
                need += t.size
                continue
            t.data_type = draw(st.sampled_from(DTYPE_CODES))
            t.format = draw(st.sampled_from(FORMAT_CODES))
            t.sub_format = draw(st.sampled_from([0, 1, 2]))
            consistent = dtypes.is_supported_dtype(t.data_type) and draw(st.booleans())
            shape = draw(SMALL_DIMS if consistent else st.lists(DIMS, max_size=6))
            t.shape.dim.extend(shape)
            if consistent and math.prod(shape) * dtypes.numpy_dtype(t.data_type).itemsize <= 4096:
                t.size = math.prod(shape) * dtypes.numpy_dtype(t.data_type).itemsize
            else:
                t.size = draw(st.one_of(st.integers(0, 256), st.sampled_from([2**40, 2**63 - 1])))
            need += t.size
            if draw(st.booleans()):
                t.original_shape.dim.extend(draw(st.one_of(SMALL_DIMS, st.lists(DIMS, max_size=6))))
    header = msg.SerializeToString()
    data = draw(st.binary(min_size=0, max_size=64))
    if need <= 16384:  # usually all of it, sometimes cut short
        data = bytes(range(256)) * (need // 256 + 1)
        data = data[:draw(st.sampled_from([need, need, need, max(0, need - 1)]))]
    return struct.pack("<Q", len(header)) + header + data


def exercise_dump(path: Path) -> None:
    header = survive(path, read_dump_header, path)
    whole = survive(path, read_dump, path)
    survive(path, v2_tensor_layout, path.read_bytes())
    if header is None:
        assert whole is None  # both ways of reading agree on what is a dump
        return
    data = whole[1] if whole is not None else None
    survive(path, parse_dump_header, path, path.read_bytes())
    for entry in header.inputs + header.outputs + header.buffers:
        survive(path, read_device_array, header, entry)
        survive(path, read_device_array, header, entry, data)
        for target in (None, "NHWC"):
            survive(path, read_logical_array, header, entry, target_format=target)


# -- readers ------------------------------------------------------------------------------------------

@robust(300)
@given(data=st.data())
def test_mutated_dumps(seeds, workdir, data):
    exercise_dump(_write(workdir, data.draw(mutated(seeds["dump"])), "Add.add.1.2.1700000000000001"))


@robust(800)
@given(blob=hostile_dump())
def test_hostile_dump_headers(workdir, blob):
    exercise_dump(_write(workdir, blob, "Add.add.1.2.1700000000000001"))


@st.composite
def hostile_opdebug(draw) -> bytes:
    if draw(st.booleans()):
        record = encode_opdebug_old(ai_core={"status": draw(st.integers(0, 2**64 - 1))})
        record = record[:draw(st.integers(0, len(record) + 8))].ljust(draw(st.sampled_from([0, 2048])), b"\0")
    else:
        acc = draw(st.sampled_from(["AIC", "AIV", "AICPU", "SDMA"]))
        record = encode_opdebug_new(acc, {"status": draw(st.integers(0, 2**64 - 1)),
                                          "data_len": draw(st.sampled_from([0, 8, 80, 2**32 - 1])),
                                          "valid": draw(st.integers(0, 2))},
                                    version=draw(st.sampled_from([0, 1, 7])))
        record = record[:draw(st.integers(0, len(record)))]
    dtype = draw(st.sampled_from([dtypes.DT_UINT8, dtypes.DT_FLOAT16, dtypes.DT_UNDEFINED, 999]))
    # a uint8 record whose header may claim another dtype or shape (what a corrupt file does)
    msg = _dump_data_class()(op_name="Node_OpDebug")
    t = msg.output.add(data_type=dtype, format=2, size=len(record))
    t.shape.dim.append(draw(st.sampled_from([len(record), 0, 2**40, 2**64 - 1])))
    header = msg.SerializeToString()
    return struct.pack("<Q", len(header)) + header + record


@robust(250)
@given(data=st.data())
def test_mutated_and_hostile_opdebug(seeds, workdir, data):
    blob = data.draw(st.one_of(mutated(seeds["opdebug"]), hostile_opdebug()))
    path = _write(workdir, blob, "Opdebug.Node_OpDebug.22.1.1700000000000001")
    survive(path, read_opdebug, path)


@robust(300)
@given(data=st.data())
def test_mutated_fusion_reports(seeds, workdir, data):
    path = _write(workdir, data.draw(mutated(seeds["fusion"], text=True)), "fusion_result.json")
    survive(path, read_fusion_result, path)


def exercise_graph(path: Path) -> None:
    errors: list[str] = []
    graph, _ = load_op_graph([path], errors)
    for line in errors:
        assert line.startswith(str(path)) and "\n" not in line and len(line) <= len(str(path)) + MAX_REASON, line
    if graph is None:
        return
    for node in graph.ops.values():  # op details are decoded on first use: from the text, now
        survive(path, lambda n=node: (n.outputs, dict(n.attrs)))


@robust(150)
@given(data=st.data())
def test_mutated_graph_texts(seeds, workdir, data):
    exercise_graph(_write(workdir, data.draw(mutated(seeds["graph_text"], text=True)), "ge_proto_00000001_Build.txt"))


@robust(120)
@given(data=st.data())
def test_mutated_graph_json(seeds, workdir, data):
    path = _write(workdir, data.draw(mutated(seeds["graph_json"], text=True)), "ge_proto_00000001_Build.txt.json")
    survive(path, parse_graph_json, path)
    exercise_graph(path)


@st.composite
def hostile_npy(draw) -> bytes:
    """A .npy whose header dict says anything (the data after it is short or long)."""
    shape = tuple(draw(st.lists(NPY_DIMS, max_size=5)))
    descr = draw(st.sampled_from(["<f4", "|b1", "<c8", "|O", "<V8", "|u1", "<f2", "zz", "Z" * 5000]))
    fortran = draw(st.sampled_from(["False", "True", "1"]))
    text = "{'descr': '%s', 'fortran_order': %s, 'shape': %r, }" % (descr, fortran, shape)
    text = text.ljust(draw(st.sampled_from([64 - 11, 118, 5000]))) + "\n"
    version = draw(st.sampled_from([b"\x01\x00", b"\x02\x00", b"\x03\x00", b"\x09\x00"]))
    size = struct.pack("<H" if version == b"\x01\x00" else "<I", len(text))
    return b"\x93NUMPY" + version + size + text.encode() + draw(st.binary(max_size=256))


@robust(400)
@given(data=st.data())
def test_mutated_and_hostile_npy(seeds, workdir, data):
    blob = data.draw(st.one_of(mutated(seeds["npy"]), hostile_npy()))
    path = _write(workdir, blob, "golden.0.1700000000000001.npy")
    survive(path, read_npy_header, path)
    survive(path, load_npy, path)
    survive(path, load_npy, path, mmap=False)
    found = survive(path, read_npy, path)
    if found is not None and found[1] is not None:
        survive(path, array_from_bytes, *found)


HASHED = st.from_regex(r"[0-9]{1,6}", fullmatch=True)
REAL_NAME = st.one_of(st.text(max_size=30), st.from_regex(r"Add\.add_1(\.[0-9]{1,40}){2,5}", fullmatch=True),
                      st.sampled_from(["Add.add_1.3.2." + "9" * 5000, "Add.add_1.3.2.1700000000000001"]))


MAPPING_ROW = st.tuples(HASHED, REAL_NAME).map(list)


@robust(150)
@given(rows=st.one_of(st.lists(MAPPING_ROW, min_size=1, max_size=4),  # well-formed: names get parsed
                      st.lists(st.one_of(MAPPING_ROW, st.lists(st.text(max_size=30), max_size=4)), max_size=6)),
       tail=st.one_of(st.just(b""), st.binary(max_size=40)))
def test_hostile_mapping_csv(workdir, rows, tail):
    """mapping.csv of a dump folder: any rows, real names with 5000-digit fields, stray quotes,
    NUL and non-UTF-8 bytes; read alone and when hashed names in its folder are selected."""
    buf = io.StringIO()
    csv.writer(buf).writerows(rows)
    path = _write(workdir, buf.getvalue().encode("utf-8", "surrogatepass") + tail, "mapping.csv")
    survive(path, read_mapping_csv, path)
    warnings: list[str] = []
    _select_dumps([row[0] for row in rows if row and row[0].isdigit()] + ["1"], path.parent, warnings)
    for line in warnings:
        assert "\n" not in line and len(line) <= len(str(path.parent)) + MAX_REASON, line


# -- a whole session ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def session_ws(sample_ws, tmp_path_factory) -> tuple[Path, dict]:
    src, manifest = sample_ws
    root = tmp_path_factory.mktemp("session") / "ws"
    shutil.copytree(src / "precision_data", root / "precision_data", ignore=shutil.ignore_patterns("temp"))
    return root, manifest


SESSION_PARTS = ["graph", "fusion", "dump", "opdebug", "golden"]


@robust(80)
@given(data=st.data())
def test_session_survives_one_corrupt_file(seeds, session_ws, capsys, data):
    """One file of the workspace replaced by a mutated copy: start-up and the main commands give
    one-line errors at most, never a traceback or an internal error."""
    root, manifest = session_ws
    part = data.draw(st.sampled_from(SESSION_PARTS))
    lossy = next(o for o in manifest["ops"] if o["name"] == manifest["lossy"]["op"])
    target, pool = {
        "graph": (manifest["paths"]["graph_file"], seeds["graph_text"]),
        "fusion": ("precision_data/fusion/fusion_result.json", seeds["fusion"]),
        "dump": (lossy["dump_file"], seeds["dump"]),
        "opdebug": (manifest["overflow"]["opdebug_file"], seeds["opdebug"]),
        "golden": (manifest["golden_files"][lossy["outputs"][0]["golden"]], seeds["npy"]),
    }[part]
    path = root / target
    original = path.read_bytes()
    blob = data.draw(st.one_of(mutated(pool, text=part in ("graph", "fusion")), hostile_dump()) if part == "dump"
                     else mutated(pool, text=part in ("graph", "fusion")))
    path.write_bytes(blob)
    try:
        rc = main([str(root), "-c", f"info; ac; vc; pt {lossy['name']}:output:0 -l 2; ni {lossy['name']}"])
    finally:
        path.write_bytes(original)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and "internal error" not in out + err, err
    assert rc in (0, 1, 2), err
    for line in err.splitlines():
        assert len(line) <= 600, line
