"""The compact ``vc`` pipeline (tasks of tuples, results in arrays) against the per-pair path it
replaced: same numbers, same reasons, same suspects; the .npy header fast path against numpy's
own parser."""

from __future__ import annotations

import io
import json
import shutil
import struct

import numpy as np
import pytest

from precision_shell.analysis.compare import fused_metrics
from precision_shell.analysis.compare.engine import make_tasks, run_compare
from precision_shell.analysis.compare.mapping import plan_golden_compare
from precision_shell.analysis.compare.metrics import compute_metrics
from precision_shell.analysis.compare.results import CompareResult, RowView
from precision_shell.analysis.compare.tasks import pack_header, run_task
from precision_shell.analysis.compare.worker import compare_job
from precision_shell.analysis.root_cause.graph import Criteria, find_suspects
from precision_shell.errors import FormatError
from precision_shell.formats.dtypes import DT_FLOAT, DT_FLOAT16, FORMAT_ND
from precision_shell.formats.dump_file import DumpTensor, read_dump_header, read_logical_array, write_dump
from precision_shell.formats.golden_npy import _standard_header, array_from_bytes, read_npy, read_npy_header
from precision_shell.model.session import Session
from precision_shell.samples.writer import SampleOptions, write_workspace


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    root = tmp_path_factory.mktemp("vc_ws")
    write_workspace(root, SampleOptions(seed=3))
    return root


def _cells(t):
    return (t.tensor, t.golden_ref, t.compared, t.shape, t.npu_dtype, t.golden_dtype, t.reason,
            tuple(t.metrics.vendor_cells()), json.dumps(t.metrics.as_json()))


# ------------------------------------------------------------------------------------------------
# .npy header fast path

@pytest.mark.parametrize("arr", [
    np.zeros((), np.float64), np.arange(5, dtype=np.float16), np.zeros((1, 13, 4, 4), ">f4"),
    np.asfortranarray(np.ones((2, 3))), np.zeros(3, bool), np.zeros((2, 0, 3), np.int8),
    np.zeros((7,) * 9, np.uint8), np.array(["ab", "c"]),
])
def test_fast_header_agrees_with_numpys_parser(arr):
    buf = io.BytesIO()
    np.save(buf, arr)
    blob = buf.getvalue()
    fast = _standard_header(blob)
    assert fast is not None
    buf.seek(0)
    np.lib.format.read_magic(buf)
    shape, fortran, dtype = np.lib.format.read_array_header_1_0(buf)
    assert fast == (shape, fortran, dtype, buf.tell())


def test_other_headers_fall_back_to_numpy(tmp_path):
    # keys in another order, a structured dtype: numpy's parser decides, same result
    arr = np.arange(6, dtype=np.float32).reshape(2, 3)
    text = "{'shape': (2, 3), 'fortran_order': False, 'descr': '<f4'}"
    text += " " * (64 - (10 + len(text) + 1) % 64) + "\n"
    path = tmp_path / "odd.0.npy"
    path.write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text.encode() + arr.tobytes())
    assert _standard_header(path.read_bytes()) is None
    header, blob = read_npy(path)
    np.testing.assert_array_equal(array_from_bytes(header, blob), arr)
    rec = np.zeros(2, [("a", "<f4"), ("b", "<i2")])
    np.save(tmp_path / "rec.0.npy", rec)
    assert _standard_header((tmp_path / "rec.0.npy").read_bytes()) is None
    # numpy's parser read the header (the dtype is in the line); a record is not a tensor
    with pytest.raises(FormatError, match=r"rec.0.npy: holds structured values \(\[\('a', '<f4'\), \('b', '<i2'\)\]\)"):
        read_npy_header(tmp_path / "rec.0.npy")


def test_read_npy_whole_file_and_errors(tmp_path):
    arr = np.random.default_rng(0).standard_normal((30, 50)).astype(np.float32)
    path = tmp_path / "a.0.npy"
    np.save(path, arr)
    header, blob = read_npy(path)
    assert blob == path.read_bytes()
    np.testing.assert_array_equal(array_from_bytes(header, blob), arr)
    assert read_npy(path, whole_below=1024)[1] is None       # large: header only
    path.write_bytes(path.read_bytes()[:-4])
    with pytest.raises(FormatError, match="truncated"):
        read_npy(path)


# ------------------------------------------------------------------------------------------------
# tasks

def _dump(path, op, inputs, outputs):
    write_dump(path, op, [DumpTensor(a, DT_FLOAT16, FORMAT_ND) for a in inputs],
               [DumpTensor(a, DT_FLOAT, FORMAT_ND) for a in outputs])
    return str(path)


def test_repeated_bytes_against_one_golden_take_the_first_rows_result(tmp_path):
    const = np.linspace(-1, 1, 13, dtype=np.float16)
    other = const.copy()
    other[3] = 0.25
    golden = tmp_path / "g.0.npy"
    np.save(golden, np.linspace(-1, 1, 13).astype(np.float32))
    a = _dump(tmp_path / "Add.a.1.2.100", "a", [const], [np.zeros(2, np.float32)])
    b = _dump(tmp_path / "Add.b.1.2.200", "b", [const], [np.zeros(2, np.float32)])
    c = _dump(tmp_path / "Add.c.1.2.300", "c", [other], [np.zeros(2, np.float32)])
    row = (0, None, None, str(golden), None)
    task = (False, [("a", a, None, [(0, 0, 0, *row[1:])]),
                    ("b", b, pack_header(read_dump_header(b)), [(1, 0, 0, *row[1:])]),
                    ("c", c, None, [(2, 0, 0, *row[1:])])])
    first, second, third = run_task(task)
    assert second == (1, 0, first[2])               # same bytes, same golden: row 0's result
    assert third[1] == -1 and third[3] != first[3]  # different bytes: computed
    assert first[12] and abs(first[3][0] - 1.0) < 1e-3


def test_task_results_equal_the_per_pair_path(sample):
    s = Session.open(sample)
    plan = plan_golden_compare(s.graph, s.dumps, s.golden)
    result = run_compare(plan, workers=1)
    assert isinstance(result.rows, RowView)
    by_pair = {}
    for job in plan.jobs:
        res = compare_job(job)
        by_pair[job.row] = by_pair[res.same_as] if res.same_as is not None else res
    for row, t in enumerate(result.rows):
        res = by_pair[row]
        assert (t.compared, t.shape, t.reason, t.npu_dtype, t.golden_dtype) == \
            (res.compared, res.shape, res.reason, res.npu_dtype, res.golden_dtype), t.tensor
        assert t.metrics.vendor_cells() == res.metrics.vendor_cells()
        assert json.dumps(t.metrics.as_json()) == json.dumps(res.metrics.as_json())
    # every runnable row went to exactly one task, in row order
    rows = [r for rows, _ in make_tasks(plan, 2) for r in rows]
    assert rows == [r for r in range(len(plan)) if plan.table.runnable(r)]


def test_suspects_from_arrays_equal_suspects_from_objects(sample):
    s = Session.open(sample)
    result = run_compare(plan_golden_compare(s.graph, s.dumps, s.golden), workers=1)
    listed = CompareResult(result.mode, result.npu_label, result.golden_label, result.ops,
                           list(result.rows))
    for threshold in (0.98, 0.9999, 1.0):
        fast = find_suspects(result, Criteria(threshold))
        slow = find_suspects(listed, Criteria(threshold))
        # as JSON text: NaN values compare equal there
        assert json.dumps([x.to_json() for x in fast]) == json.dumps([x.to_json() for x in slow])
    assert find_suspects(result, Criteria(1.0))       # the sample has failing ops at 1.0
    assert result.count_done() == (len(listed.done_rows), sum(r.compared for r in listed.done_rows))


def test_a_truncated_dump_is_a_reason_row_naming_the_file(sample, tmp_path):
    root = tmp_path / "ws"
    shutil.copytree(sample / "precision_data", root / "precision_data")
    s = Session.open(root)
    plan = plan_golden_compare(s.graph, s.dumps, s.golden)
    row = next(r for r in range(len(plan)) if plan.table.runnable(r) and plan.table.io[r] == 1)
    path = plan.npu_source(row).path
    header = read_dump_header(path)
    with open(path, "r+b") as fh:
        fh.truncate(header.outputs[0].offset + 1)
    before = {t.tensor: _cells(t) for t in run_compare(plan, workers=1).rows}
    bad = before[plan.job(row).tensor]
    assert not bad[2] and path in bad[6] and all(c == "NaN" for c in bad[7])
    assert sum(not c[2] for c in before.values()) < len(before)   # the other rows still compare


def test_read_buffers_are_reused_aligned_and_not_kept_by_the_main_thread(sample, monkeypatch):
    """Reads go to 64-byte aligned buffers that are reused (no fresh allocation per tensor); a
    compare run in this thread gives them back when it ends, and every output repeated by a
    later input was checked against the bytes kept from its own read (none left kept)."""
    from precision_shell.analysis.compare.task_files import TaskFiles
    from precision_shell.formats import dump_file

    buffers = dump_file.ReadBuffers()
    first = buffers.take(100_000)
    assert first.ctypes.data % 64 == 0 and first.size >= 100_000
    buffers.give(first)
    assert buffers.take(50_000) is first

    s = Session.open(sample)
    plan = plan_golden_compare(s.graph, s.dumps, s.golden)
    closed = []
    real_close = TaskFiles.close

    def close(files):
        closed.append((dict(files.wanted), len(files.kept)))
        real_close(files)
    monkeypatch.setattr(TaskFiles, "close", close)
    result = run_compare(plan, workers=1)
    assert sum(plan.table.alias[r] >= 0 for r in range(len(plan))) > 0
    assert closed and all(wanted == {} and kept == 0 for wanted, kept in closed)
    assert result.rows and not hasattr(dump_file._local, "buffers")


def test_an_input_one_element_off_its_producer_is_caught_by_the_early_check(sample, tmp_path, monkeypatch):
    """Inputs repeating their producer's output are checked in C when the producer is read
    (``TaskFiles.check_aliases``); one element changed in the consumer's dump makes that row a
    real compare of its own bytes, while every other alias still takes its producer's result.
    Without the kernel the rows check themselves, with the same outcome."""
    root = tmp_path / "ws"
    shutil.copytree(sample / "precision_data", root / "precision_data")
    s = Session.open(root)
    plan = plan_golden_compare(s.graph, s.dumps, s.golden)
    t = plan.table
    aliases = [r for r in range(len(plan)) if t.alias[r] >= 0]
    row = aliases[len(aliases) // 2]
    job = plan.job(row)
    header = read_dump_header(job.npu.path)
    entry = header.inputs[job.index]
    data = bytearray(open(job.npu.path, "rb").read())
    values = np.frombuffer(bytes(data[entry.offset:entry.offset + entry.size]), np.float16).copy()
    where = values.size // 2
    values[where] = np.float16(values[where] + 64)   # this op read one value its producer never wrote
    data[entry.offset:entry.offset + entry.size] = values.tobytes()
    open(job.npu.path, "wb").write(bytes(data))

    checks = []
    real = fused_metrics.file_same_bytes

    def counted(fd, offset, buf):
        checks.append(real(fd, offset, buf))
        return checks[-1]
    monkeypatch.setattr(fused_metrics, "file_same_bytes", counted)
    result = run_compare(plan, workers=1)
    if fused_metrics.batch_enabled():    # nearly all checked in C (not: a producer in an earlier task)
        assert checks.count(False) == 1 and checks.count(True) >= len(aliases) - 2
    else:
        assert checks == []
    rows = result.rows
    mine, producer = rows[row], rows[int(t.alias[row])]
    assert mine.compared and mine.metrics.vendor_cells() != producer.metrics.vendor_cells()
    golden = np.load(job.golden.path)
    npu = read_logical_array(header, header.inputs[job.index])
    assert mine.metrics.vendor_cells() == compute_metrics(npu, golden).vendor_cells()
    for other in aliases:
        if other != row:
            assert rows[other].metrics.vendor_cells() == rows[int(t.alias[other])].metrics.vendor_cells()


def test_tasks_start_small_and_shrink_at_the_end_even_on_an_estimate(tmp_path, monkeypatch):
    """The first task is a few ops (a worker starts early), the sizes double up to the steady
    size, and the last tasks shrink with what is left, also while planning on a size estimate
    that is far off (what is left is judged by the ops still expected)."""
    from precision_shell.analysis.compare import engine
    from precision_shell.analysis.compare.mapping import golden_plan_steps

    write_workspace(tmp_path, SampleOptions(seed=3, scale_mb=24, small_tensors=True))
    s = Session.open(tmp_path)
    plan = plan_golden_compare(s.graph, s.dumps, s.golden)
    total = plan.total_bytes
    op_bytes = total // len(plan.ops)
    assert len(plan.ops) >= 30
    monkeypatch.setattr(engine, "_MIN_BATCH_BYTES", op_bytes // 4)
    monkeypatch.setattr(engine, "_MAX_BATCH_BYTES", 8 * op_bytes)
    runs = {"planned": (plan, None, None)}
    growing, steps = golden_plan_steps(s.graph, s.dumps, s.golden)
    runs["planning"] = (growing, steps, 3 * total)
    for label, (p, ops, estimate) in runs.items():
        tasks = list(make_tasks(p, 2, ops, estimate))
        sizes = [sum(p.table.nbytes[r] for r in rows) for rows, _ in tasks]
        peak = max(sizes)
        assert peak > 3 * op_bytes, (label, sizes)
        assert sizes[0] <= 2 * op_bytes and max(sizes[-3:]) <= 3 * op_bytes, (label, sizes)
        assert [r for rows, _ in tasks for r in rows] == [r for r in range(len(p)) if p.table.runnable(r)]
