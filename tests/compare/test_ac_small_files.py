"""`ac` on many small dumps: one read per file, float tensors of many files checked at once.

The fast path must decide exactly as the reference (header read alone, each tensor read from the
file, ``dump_looks_clean``): same findings, same order, same warnings, on every kind of file.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from precision_shell.analysis.overflow import values as value_scan
from precision_shell.analysis.overflow.scan import _SmallFileBatch, dump_looks_clean, scan_overflow
from precision_shell.errors import FormatError
from precision_shell.formats.dump_file import (
    DumpTensor, read_device_array, read_dump, read_dump_header, read_small_file, v2_tensor_layout, write_dump,
)
from precision_shell.formats.nano_dump import write_nano_dump
from precision_shell.formats.protoload import dump_data_pb
from precision_shell.model.session import Session
from precision_shell.samples.writer import SampleOptions, write_workspace
from tests.conftest import json_docs, run_cli
from tests.trust.test_readers_fuzz import FUZZ, _valid_dumps, _write, mutated

FP32, FP16, INT32, BOOL, DOUBLE, C64, BF16, UNDEF, FP8_E4M3FN = 1, 2, 7, 11, 12, 16, 27, 0, 35
ND, NC1HWC0 = 2, 3
_FLOATS = [(FP16, np.float16), (BF16, ml_dtypes.bfloat16), (FP32, np.float32), (DOUBLE, np.float64)]


def _reference_clean(path: str) -> bool | None:
    """The pre-batching decision: header alone, each tensor read from the file (None: unreadable)."""
    try:
        return dump_looks_clean(read_dump_header(path))
    except FormatError:
        return None


def _batch_decisions(paths: list[str]) -> list[bool | None]:
    """Per file: True/False when the batch decided it clean/suspect, None when it deferred it to
    the per-file path."""
    batch = _SmallFileBatch()
    for path in paths:
        batch.add(SimpleNamespace(size=os.path.getsize(path)), path)
    suspects = batch.suspects()
    return [None if per_file else i not in suspects for i, (_, _, per_file) in enumerate(batch.files)]


def _random_tensor(rng, special_rate: float) -> DumpTensor:
    code, dt = _FLOATS[rng.integers(len(_FLOATS))]
    shape = tuple(int(d) for d in rng.integers(1, 5, size=rng.integers(1, 4)))
    data = (rng.standard_normal(shape) * 100).astype(dt)
    if rng.random() < special_rate:
        value = [np.nan, np.inf, -np.inf, 65504.0, -65504.0, 65500.0][rng.integers(6)]
        data.reshape(-1)[rng.integers(data.size)] = value
    return DumpTensor(data, code, ND)


def test_batched_check_decides_each_file_as_the_reference(tmp_path):
    rng = np.random.default_rng(7)
    paths = []
    for i in range(300):
        path = tmp_path / f"Add.op_{i}.{i}.0.{1700000000000000 + i}"
        tensors = [_random_tensor(rng, 0.08) for _ in range(rng.integers(1, 5))]
        if rng.random() < 0.2:   # ints and bools ride along without being read
            tensors.insert(rng.integers(len(tensors) + 1), DumpTensor(np.arange(6, dtype=np.int32), INT32, ND))
        write_dump(path, f"op_{i}", tensors[:-1], tensors[-1:])
        paths.append(str(path))
    decisions = _batch_decisions(paths)
    reference = [_reference_clean(p) for p in paths]
    assert None not in decisions          # plain v2 files of these types are all decided in the batch
    assert decisions == reference
    assert 5 < reference.count(False) < 100  # the data really has both kinds


def test_odd_files_leave_the_batch_and_clean_files_stay_clean(tmp_path):
    def dump(name, inputs, outputs=(), **kw):
        path = tmp_path / f"Add.{name}.1.0.{1700000000000000 + len(os.listdir(tmp_path))}"
        write_dump(path, name, inputs, list(outputs), **kw)
        return str(path)

    fp16 = np.ones((2, 3), np.float16)
    paths = {
        "clean": dump("clean", [DumpTensor(fp16, FP16, NC1HWC0)], [DumpTensor(np.ones(3, bool), BOOL, ND)]),
        "empty_fp16": dump("empty_fp16", [DumpTensor(np.ones((0, 3), np.float16), FP16, ND)]),
        "complex": dump("complex", [DumpTensor(np.ones(3, np.complex64), C64, ND)]),
        "raw_bytes": dump("raw_bytes", [DumpTensor(np.ones(5, np.int8), UNDEF, ND)]),
        "trailing": dump("trailing", [DumpTensor(fp16, FP16, ND)], spaces=[b"log"]),
    }
    short = tmp_path / "Add.short.1.0.1700000000000099"
    short.write_bytes(Path(paths["clean"]).read_bytes()[:-3])
    paths["truncated"] = str(short)
    decisions = dict(zip(paths, _batch_decisions(list(paths.values()))))
    assert decisions == {"clean": True, "empty_fp16": None, "complex": None, "raw_bytes": None,
                         "trailing": True, "truncated": None}
    assert _reference_clean(paths["clean"]) and _reference_clean(paths["trailing"])
    # a file whose size changed since it was listed is left to the per-file path, which reads it anew
    size = os.path.getsize(paths["clean"])
    assert read_small_file(paths["clean"], size) == Path(paths["clean"]).read_bytes()
    assert read_small_file(paths["clean"], size - 1) is None and read_small_file(paths["clean"], size + 1) is None
    batch = _SmallFileBatch()
    batch.add(SimpleNamespace(size=size + 1), paths["clean"])
    assert batch.files[0][1:] == (None, True)


@FUZZ
@given(data=st.data())
def test_whole_file_reading_agrees_with_reading_from_the_file(tmp_path_factory, data):
    workdir = tmp_path_factory.getbasetemp() / "ac_fuzz"
    workdir.mkdir(exist_ok=True)
    path = _write(workdir, data.draw(mutated(_valid_dumps(workdir))))
    try:
        expected = read_dump_header(path)
    except FormatError as e:
        with pytest.raises(FormatError) as got:
            read_dump(path)
        assert str(got.value) == str(e)
        return
    header, blob = read_dump(path)
    assert header == expected and blob == Path(path).read_bytes()
    layout = v2_tensor_layout(blob)
    assert (layout is not None) == (header.variant == "v2")
    if layout is not None:
        start, tensors = layout
        assert [(e.dtype, e.shape, e.offset - start, e.size) for e in header.inputs + header.outputs] == list(tensors)
    for entry in header.inputs + header.outputs + header.buffers + header.spaces:
        try:
            want = read_device_array(header, entry)
        except FormatError as e:
            with pytest.raises(FormatError) as got:
                read_device_array(header, entry, blob)
            assert str(got.value) == str(e)
            continue
        got = read_device_array(header, entry, blob)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert np.array_equal(got.view(np.uint8) if got.dtype.kind == "V" else got,
                              want.view(np.uint8) if want.dtype.kind == "V" else want, equal_nan=want.dtype.kind in "fc")
    assert _batch_decisions([path])[0] in (None, _reference_clean(path))


# ----------------------------------------------------------------------------------------------
# end to end: the same report as the per-file path, on a workspace with every kind of file

def _add_odd_dumps(dump_dir) -> dict[str, str]:
    """Extra dumps next to the generator's; returns op key -> file name."""
    names = {}

    def name(op_type, key):
        names[key] = f"{op_type}.{key}.{90 + len(names)}.0.{1706196825130000 + len(names)}"
        return dump_dir / names[key]

    bf16 = np.ones(40, ml_dtypes.bfloat16)
    bf16[7] = np.nan
    write_dump(name("Add", "odd_bf16_nan"), "odd/bf16_nan", [DumpTensor(np.ones(40, ml_dtypes.bfloat16), BF16, ND)],
               [DumpTensor(bf16, BF16, ND)])
    fp64 = np.zeros((3, 5))
    fp64[2, 4] = -np.inf
    write_dump(name("Mul", "odd_fp64_ninf"), "odd/fp64_ninf", [], [DumpTensor(fp64, DOUBLE, ND)])
    sat = np.full(16, 3, np.float16)
    sat[0] = -65504
    write_dump(name("Cast", "odd_saturated_input"), "odd/saturated_input", [DumpTensor(sat, FP16, ND)],
               [DumpTensor(np.ones(16, np.float32), FP32, ND)])
    big = np.ones(300_000, np.float32)   # 1.2 MB: read tensor by tensor, not whole
    big[-1] = np.inf
    write_dump(name("Relu", "odd_big_inf"), "odd/big_inf", [], [DumpTensor(big, FP32, ND)])
    mid = np.ones(40_000, np.float16)    # 80 kB: read whole by the per-file path
    mid[123] = np.inf
    write_dump(name("Relu", "odd_mid_inf"), "odd/mid_inf", [], [DumpTensor(mid, FP16, ND)])
    write_nano_dump(name("Sub", "odd_nano_nan"), [], [DumpTensor(np.array([1, np.nan], np.float32), FP32, ND)])
    v1 = dump_data_pb().DumpData(op_name="odd/v1_inf")
    t = v1.output.add(data_type=FP32, format=ND, data=np.array([1, np.inf], np.float32).tobytes())
    t.shape.dim.append(2)
    name("Div", "odd_v1_inf").write_bytes(v1.SerializeToString())
    name("Add", "odd_corrupt").write_bytes(b"\x05\x00\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff\xff")
    write_dump(name("Add", "odd_clean_ints"), "odd/clean_ints", [DumpTensor(np.arange(9, dtype=np.int32), INT32, ND)],
               [DumpTensor(np.zeros(4, bool), BOOL, ND)])
    fp8 = np.array([1, 2, np.nan, 4], np.float32).astype(ml_dtypes.float8_e4m3fn)  # no inf in e4m3fn
    write_dump(name("Cast", "odd_fp8_nan"), "odd/fp8_nan", [], [DumpTensor(fp8, FP8_E4M3FN, ND)])
    write_dump(name("Cast", "odd_fp8_clean"), "odd/fp8_clean", [],
               [DumpTensor(np.ones(4, np.float32).astype(ml_dtypes.float8_e4m3fn), FP8_E4M3FN, ND)])
    write_dump(name("Mul", "odd_complex_inf"), "odd/complex_inf", [],
               [DumpTensor(np.array([1 + 1j, complex(0, np.inf)], np.complex64), C64, ND)])
    return names


@pytest.fixture(scope="module")
def odd_ws(tmp_path_factory):
    root = tmp_path_factory.mktemp("ac_odd_ws")
    manifest = write_workspace(root, SampleOptions(seed=0))
    _add_odd_dumps(root / manifest["paths"]["npu_dump_dir"])
    return root, manifest


def _per_file_only(monkeypatch):
    """Disable whole-file reading and batching: every file as before (header, then tensors)."""
    monkeypatch.setattr(value_scan, "read_small_file", lambda path, size: None)
    monkeypatch.setattr(value_scan, "_WHOLE_MAX", -1)


def test_ac_reports_exactly_what_the_per_file_path_reports(odd_ws, capsys, monkeypatch, tmp_path):
    ws, manifest = odd_ws
    outputs = []
    for per_file in (False, True):
        if per_file:
            _per_file_only(monkeypatch)
        rc, doc, err = run_cli(capsys, ws, "-o", tmp_path / "out", "-c", "ac -l 0", "--format", "json")
        assert rc == 0, err
        rc, text, err = run_cli(capsys, ws, "-o", tmp_path / "out", "-c", "ac -l 0")
        assert rc == 0, err
        outputs.append((doc, text))
    assert outputs[0] == outputs[1]
    rows = {r["op"]: r for r in json_docs(outputs[0][0])[0]}
    assert rows["odd/bf16_nan"]["outputs"][0]["nan"] == 1 and rows["odd/bf16_nan"]["role"] == "producer"
    assert rows["odd/fp64_ninf"]["outputs"][0]["neg_inf"] == 1
    assert rows["odd/saturated_input"]["inputs"][0]["saturated"] == 1
    # a saturated input, finite outputs: listed as healed, not as an overflowing op
    assert rows["odd/saturated_input"]["role"] == "healed"
    assert rows["odd/big_inf"]["outputs"][0]["pos_inf"] == 1
    assert rows["odd/mid_inf"]["outputs"][0]["pos_inf"] == 1
    assert rows["odd/v1_inf"]["outputs"][0]["pos_inf"] == 1
    assert rows["odd_nano_nan"]["outputs"][0]["nan"] == 1   # nano headers carry no op name
    assert "odd/clean_ints" not in rows and "odd/fp8_clean" not in rows
    assert rows["odd/fp8_nan"]["outputs"][0]["nan"] == 1  # fp8 is checked, not taken for an int
    assert rows["odd/complex_inf"]["outputs"][0]["pos_inf"] == 1  # the imaginary part, as a float
    assert manifest["overflow"]["op"] in rows
    assert "odd_corrupt" in outputs[0][1] and "warning:" in outputs[0][1]


def test_ctrl_c_keeps_the_findings_of_the_files_scanned(odd_ws, monkeypatch, tmp_path):
    ws, manifest = odd_ws
    complete = scan_overflow(Session.open(ws, output=tmp_path / "out"), opdebug=False)
    session = Session.open(ws, output=tmp_path / "out")
    files = session.dumps.op_files
    # Ctrl-C while the progress bar counts the file just after the generator's overflow op and
    # the one after it, with batches smaller than that, so earlier batches are complete
    stop = 3 + next(i for i, f in enumerate(files) if str(f.path).endswith(manifest["overflow"]["dump_file"]))
    assert stop < len(files)
    monkeypatch.setattr(value_scan, "_BATCH_FILES", 4)

    class InterruptAt:
        def __init__(self, label, total):
            self.count = 0

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def advance(self, n=1):
            self.count += n
            if self.count == stop:
                raise KeyboardInterrupt

    session.progress = InterruptAt
    scan = scan_overflow(session, opdebug=False)
    assert scan.cancelled and scan.scanned_files == stop
    assert not complete.cancelled and complete.scanned_files == len(files)
    done = {f.path for f in files[:stop - 1]}   # the file being counted was not looked at
    expected = [f.to_json() for f in complete.findings if f.dump_path in done]
    assert len(expected) >= 2 and [f.to_json() for f in scan.findings] == expected


def test_ac_on_threads_reports_exactly_what_one_thread_reports(odd_ws, capsys, monkeypatch, tmp_path):
    """The local scan on threads (tasks of a few files, results put back in file order) prints
    the same as the scan in one thread, unreadable files and all."""
    ws, _ = odd_ws
    outputs = []
    for threads in (False, True):
        if threads:
            monkeypatch.setattr(value_scan, "_THREADS_FROM", 0)
            monkeypatch.setattr(value_scan, "_THREAD_TASK_BYTES", 1)
            monkeypatch.setattr(value_scan.os, "cpu_count", lambda: 2)
        rc, doc, err = run_cli(capsys, ws, "-o", tmp_path / "out", "-c", "ac -l 0", "--format", "json")
        assert rc == 0, err
        rc, text, err = run_cli(capsys, ws, "-o", tmp_path / "out", "-c", "ac -l 0")
        assert rc == 0, err
        outputs.append((doc, text))
    assert outputs[0] == outputs[1]
    assert len(json_docs(outputs[0][0])[0]) > 5
