"""msprobe dump folders: layout, entries and leaf paths, statistics, files, and bad input.

Dumps are written here by hand in msprobe's schema (framework-dumps.md A); tensor files are the
torch.save fixtures of tests/data/torch_pt (written by a real torch) copied under msprobe names,
and .npy files written by numpy, so every expected value comes from those files.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from precision_shell.errors import FormatError
from precision_shell.formats.msprobe.dump import load_leaf, read_msprobe_dump, read_rank_dump
from precision_shell.formats.msprobe.layout import (find_rank_dirs, parse_entry_name,
                                                    split_tensor_file_name)

PT = Path(__file__).parents[1] / "data" / "torch_pt"
SAMPLE = Path(__file__).parents[2] / "sample_data" / "framework"


def _tensor_leaf(expected: np.ndarray, dtype: str, data_name: str | None = None, **extra) -> dict:
    x = expected.astype(np.float64)
    leaf = {"type": "torch.Tensor", "dtype": dtype, "shape": list(expected.shape),
            "Max": float(x.max()), "Min": float(x.min()), "Mean": float(x.mean()),
            "Norm": float(np.linalg.norm(x)), "requires_grad": False, **extra}
    if data_name:
        leaf["data_name"] = data_name
    return leaf


def _write_rank(rank_dir: Path, data: dict, files: dict[str, object], **header) -> Path:
    """A rank folder: dump.json (header keys in msprobe's order, then data) and the tensor files
    (a source path to copy, or an array to np.save)."""
    tensor_dir = rank_dir / "dump_tensor_data"
    tensor_dir.mkdir(parents=True)
    for name, src in files.items():
        if isinstance(src, Path):
            shutil.copy(src, tensor_dir / name)
        else:
            np.save(tensor_dir / name, src)
    doc = {"task": "tensor", "level": "mix", "framework": "pytorch",
           "dump_data_dir": "/elsewhere/at/capture/time/dump_tensor_data", **header, "data": data}
    doc = {k: v for k, v in doc.items() if v is not ...}
    (rank_dir / "dump.json").write_text(json.dumps(doc, indent=1))
    return rank_dir


FP32, BF16, I64 = (np.load(PT / f"{n}.npy") for n in ("fp32", "bf16", "int64"))
LIN = "Functional.linear.0.forward"
MOD = "Module.fc1.Linear.forward.0"


def _pytorch_data() -> tuple[dict, dict]:
    data = {
        LIN: {
            "input_args": [_tensor_leaf(FP32, "torch.float32", f"{LIN}.input.0.pt"),
                           [_tensor_leaf(BF16, "torch.bfloat16", f"{LIN}.input.1.0.pt"),
                            {"type": "int", "value": 2}],
                           None],
            "input_kwargs": {"dim": {"type": "int", "value": -1},
                             "bias": _tensor_leaf(I64, "torch.int64", f"{LIN}.input.bias.pt")},
            "output": [_tensor_leaf(BF16, "torch.bfloat16", f"{LIN}.output.0.pt"), None],
        },
        MOD: {"input_args": [_tensor_leaf(FP32, "torch.float32", f"{MOD}.input.0.pt")],
              "input_kwargs": {},
              "output": [_tensor_leaf(FP32, "torch.float32", f"{MOD}.output.0.pt")],
              "parameters": {"weight": _tensor_leaf(FP32, "torch.float32", f"{MOD}.parameters.weight.pt")}},
        "Functional.linear.0.backward": {"input": [_tensor_leaf(BF16, "torch.bfloat16")],
                                         "output": [None, {"type": "slice", "value": [0, 2, None]}]},
        "Module.fc1.Linear.parameters_grad.0": {"bias": [_tensor_leaf(FP32, "torch.float32")],
                                                "weight": [_tensor_leaf(FP32, "torch.float32")]},
    }
    files = {f"{LIN}.input.0.pt": PT / "fp32.pt", f"{LIN}.input.1.0.pt": PT / "bf16.pt",
             f"{LIN}.input.bias.pt": PT / "int64.pt", f"{LIN}.output.0.pt": PT / "bf16.pt",
             f"{MOD}.input.0.pt": PT / "fp32.pt", f"{MOD}.output.0.pt": PT / "fp32.pt",
             f"{MOD}.parameters.weight.pt": PT / "fp32.pt"}
    return data, files


def test_pytorch_tensor_dump_entries_leaves_and_values(tmp_path):
    data, files = _pytorch_data()
    _write_rank(tmp_path / "dump" / "step0" / "proc4242", data, files)
    dump = read_msprobe_dump(tmp_path / "dump")
    assert (dump.framework, dump.task, dump.level, dump.steps, dump.rank_names) == \
        ("pytorch", "tensor", "mix", [0], ["proc4242"])
    assert dump.warnings == []
    rank = dump.ranks[0]
    assert [e.name for e in rank.entries] == list(data)      # dump order
    got = {e.name: (e.kind, e.scope, e.prefix, e.op, e.counter, [leaf.path for leaf in e.leaves])
           for e in rank.entries}
    assert got == {
        LIN: ("forward", "api", "Functional", "linear", 0,
              ["input.0", "input.1.0", "input.1.1", "input.2", "input.dim", "input.bias", "output.0", "output.1"]),
        MOD: ("forward", "module", "Module", "fc1.Linear", 0, ["input.0", "output.0", "parameters.weight"]),
        "Functional.linear.0.backward": ("backward", "api", "Functional", "linear", 0,
                                         ["input.0", "output.0", "output.1"]),
        "Module.fc1.Linear.parameters_grad.0": ("parameters_grad", "module", "Module", "fc1.Linear", 0,
                                                ["bias", "weight"]),
    }
    leaves = {leaf.path: leaf for leaf in rank.entries[0].leaves}
    assert leaves["input.1.1"].value == 2 and not leaves["input.1.1"].is_tensor
    assert leaves["input.2"].type is None and leaves["output.1"].type is None
    want = {"input.0": ("float32", FP32), "input.1.0": ("bfloat16", BF16), "input.bias": ("int64", I64),
            "output.0": ("bfloat16", BF16)}
    for path, (dtype, expected) in want.items():
        leaf = leaves[path]
        assert (leaf.dtype, leaf.shape) == (dtype, expected.shape)
        # resolved next to dump.json, not at the recorded dump_data_dir
        assert leaf.file == str(tmp_path / "dump/step0/proc4242/dump_tensor_data" / f"{LIN}.{path}.pt")
        arr = load_leaf(leaf)
        np.testing.assert_array_equal(arr.astype(expected.dtype), expected, strict=True)
        assert leaf.max == float(arr.astype(np.float64).max())
    assert rank.dump_data_dir.startswith("/elsewhere")
    assert rank.undescribed_files == []


def test_every_entry_point_finds_the_same_rank_folders(tmp_path):
    data, files = _pytorch_data()
    for step, rank in (("step0", "rank0"), ("step0", "rank1"), ("step1", "rank0"), ("step10", "rank0")):
        _write_rank(tmp_path / "run" / step / rank, data, files)
    (tmp_path / "run" / "step0" / "notes").mkdir()       # not a rank folder: ignored
    dump = read_msprobe_dump(tmp_path / "run")
    assert [(r.location.step, r.location.rank, r.location.rank_id) for r in dump.ranks] == \
        [(0, "rank0", 0), (0, "rank1", 1), (1, "rank0", 0), (10, "rank0", 0)]
    assert dump.steps == [0, 1, 10] and dump.rank_names == ["rank0", "rank1"]
    assert [r.rank for r in find_rank_dirs(tmp_path / "run" / "step0")] == ["rank0", "rank1"]
    assert [r.step for r in find_rank_dirs(tmp_path / "run" / "step1" / "rank0")] == [1]
    assert [r.path for r in find_rank_dirs(tmp_path / "run" / "step1" / "rank0" / "dump.json")] == \
        [str(tmp_path / "run" / "step1" / "rank0")]
    # MindSpore's pynative/ level and the plain "rank" folder
    _write_rank(tmp_path / "ms" / "pynative" / "step2" / "rank", data, files)
    (loc,) = find_rank_dirs(tmp_path / "ms")
    assert (loc.mode, loc.step, loc.rank, loc.rank_id) == ("pynative", 2, "rank", None)
    for bad, reason in ((tmp_path / "run" / "step0" / "notes", "no msprobe dump here"),
                        (tmp_path / "nowhere", "no such file or folder")):
        with pytest.raises(FormatError, match=reason):
            read_msprobe_dump(bad)


def test_mindspore_dump_npy_and_dtype_names(tmp_path):
    bf16_as_fp32 = BF16.astype(np.float32)     # MindSpore saves bf16 up-cast to fp32 (A4)
    mask = np.array([[True, False]])
    name = "Mint.add.0.forward"
    data = {name: {"input_args": [{**_tensor_leaf(bf16_as_fp32, "BFloat16", f"{name}.input.0.npy"),
                                   "type": "mindspore.Tensor"},
                                  {"type": "mindspore.Tensor", "dtype": "Bool", "shape": [1, 2],
                                   "Max": True, "Min": False, "Mean": None, "Norm": None,
                                   "data_name": f"{name}.input.1.npy"}],
                   "input_kwargs": {},
                   "output": [{**_tensor_leaf(I64, "Int64", f"{name}.output.0.npy"), "type": "mindspore.Tensor"}]},
            "Cell.net.Dense.forward.0": {"input": [_tensor_leaf(FP32, "Float32")], "output": [None]}}
    files = {f"{name}.input.0.npy": bf16_as_fp32, f"{name}.input.1.npy": mask, f"{name}.output.0.npy": I64}
    rank = read_rank_dump(find_rank_dirs(_write_rank(tmp_path / "step0" / "rank0", data, files,
                                                     framework="mindspore"))[0])
    assert rank.framework == "mindspore" and rank.warnings == []
    leaves = rank.entries[0].leaves
    assert [(x.path, x.dtype, x.dtype_raw) for x in leaves] == [
        ("input.0", "bfloat16", "BFloat16"), ("input.1", "bool", "Bool"), ("output.0", "int64", "Int64")]
    assert (leaves[1].max, leaves[1].min, leaves[1].mean, leaves[1].norm) == (1.0, 0.0, None, None)
    for leaf, want in zip(leaves, (bf16_as_fp32, mask, I64)):
        np.testing.assert_array_equal(load_leaf(leaf), want, strict=True)
    cell = rank.entries[1]
    assert (cell.scope, cell.prefix, cell.op, [x.path for x in cell.leaves]) == \
        ("module", "Cell", "net.Dense", ["input.0", "output.0"])


def test_old_schema_null_and_odd_statistics_unknown_dtype(tmp_path):
    leaf = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "Max": None,
            "Min": "-inf", "Mean": float("nan"), "Norm": float("inf"), "md5": "8465ff67"}
    data = {"Torch.cat.3.forward": {"input_args": [[leaf, leaf]], "input_kwargs": {}, "output": [
                {**leaf, "dtype": "torch.float4_e2m1fn_x2"}, {**leaf, "dtype": 7, "shape": [-1]}]}}
    # an older dump: no framework key (means pytorch), statistics task, NaN/Infinity literals
    rank_dir = _write_rank(tmp_path / "step0" / "rank", data, {}, framework=..., task="statistics",
                           dump_data_dir=None, level=["L1"])
    assert "NaN" in (rank_dir / "dump.json").read_text()
    rank = read_rank_dump(find_rank_dirs(rank_dir)[0])
    assert (rank.framework, rank.task) == ("pytorch", "md5")    # statistics + md5 leaves
    a, b, bad_dtype, bad_both = rank.entries[0].leaves
    assert (a.path, b.path) == ("input.0.0", "input.0.1")
    assert a.max is None and a.min == -math.inf and math.isnan(a.mean) and a.norm == math.inf
    assert a.md5 == "8465ff67" and a.file is None
    assert bad_dtype.dtype is None and bad_dtype.dtype_raw == "torch.float4_e2m1fn_x2" and bad_dtype.shape == (2,)
    where = f"{rank_dir / 'dump.json'}: Torch.cat.3.forward"
    assert rank.level is None
    assert rank.warnings == [f"{rank_dir / 'dump.json'}: level ['L1'] is not a string, ignored",
                             f"{where} output.0: unknown dtype 'torch.float4_e2m1fn_x2'",
                             f"{where} output.1: bad shape [-1]",
                             f"{where} output.1: unknown dtype '7'"]
    with pytest.raises(FormatError, match="output.0: no tensor file"):
        load_leaf(bad_dtype)


def test_truncated_dump_json_keeps_entries_and_recovers_the_rest(tmp_path):
    data, files = _pytorch_data()
    rank_dir = _write_rank(tmp_path / "step0" / "rank0", data, files)
    text = (rank_dir / "dump.json").read_text()
    cut = text.index(f'"{MOD}"') + 200          # inside the second entry
    (rank_dir / "dump.json").write_text(text[:cut])
    rank = read_rank_dump(find_rank_dirs(rank_dir)[0])
    assert [e.name for e in rank.entries] == [LIN, MOD]
    assert [x.path for x in rank.entries[0].leaves][:2] == ["input.0", "input.1.0"]
    assert rank.undescribed_files == [f"{MOD}.input.0.pt", f"{MOD}.output.0.pt", f"{MOD}.parameters.weight.pt"]
    recovered = rank.entries[1]
    assert (recovered.kind, recovered.scope, recovered.counter) == ("forward", "module", 0)
    assert [(x.path, x.dtype, x.shape, x.max) for x in recovered.leaves] == [
        ("input.0", "float32", FP32.shape, None), ("output.0", "float32", FP32.shape, None),
        ("parameters.weight", "float32", FP32.shape, None)]
    np.testing.assert_array_equal(load_leaf(recovered.leaves[2]), FP32)
    assert rank.warnings[0].startswith(f"{rank_dir / 'dump.json'}: truncated or invalid (cut at char ")
    assert rank.warnings[0].endswith("kept the 1 entries before it")
    assert rank.warnings[1:] == [f"{rank_dir / 'dump_tensor_data' / f}: not described by dump.json; "
                                 f"recovered as {MOD} {f[len(MOD) + 1:-3]}" for f in rank.undescribed_files]


def test_missing_dump_json_rebuilt_from_file_names(tmp_path):
    data, files = _pytorch_data()
    rank_dir = _write_rank(tmp_path / "step3" / "proc7", data, files)
    (rank_dir / "dump.json").unlink()
    (rank_dir / "dump_tensor_data" / "README.pt").write_bytes(b"x")
    dump = read_msprobe_dump(tmp_path)
    rank = dump.ranks[0]
    assert (rank.location.step, rank.framework, rank.task) == (3, "pytorch", "tensor")
    assert {e.name: [x.path for x in e.leaves] for e in rank.entries} == {
        LIN: ["input.0", "input.1.0", "input.bias", "output.0"],
        MOD: ["input.0", "output.0", "parameters.weight"]}
    assert rank.entries[0].leaves[2].dtype == "int64"
    assert dump.warnings[0] == f"{rank_dir / 'dump.json'}: missing; entries rebuilt from the 8 tensor file names (statistics unknown)"
    assert f"{rank_dir / 'dump_tensor_data' / 'README.pt'}: not described by dump.json and not an msprobe tensor name" in dump.warnings


def test_listed_but_absent_and_unreadable_files(tmp_path):
    data, files = _pytorch_data()
    del files[f"{LIN}.input.0.pt"]
    files[f"{LIN}.output.0.pt"] = tmp_path / "garbage.pt"
    (tmp_path / "garbage.pt").write_bytes(b"PK\x03\x04 not really")
    rank_dir = _write_rank(tmp_path / "step0" / "rank0", data, files)
    rank = read_rank_dump(find_rank_dirs(rank_dir)[0])
    missing = rank_dir / "dump_tensor_data" / f"{LIN}.input.0.pt"
    assert rank.warnings == [f"{missing}: listed in dump.json ({LIN} input.0) but absent"]
    leaves = {x.path: x for x in rank.entries[0].leaves}
    with pytest.raises(FormatError, match="no such file"):
        load_leaf(leaves["input.0"])
    with pytest.raises(FormatError, match="not a readable zip archive"):
        load_leaf(leaves["output.0"])
    np.testing.assert_array_equal(load_leaf(leaves["input.bias"]), I64)


def test_bad_and_deep_json(tmp_path):
    rank_dir = tmp_path / "step0" / "rank0"
    rank_dir.mkdir(parents=True)
    (rank_dir / "dump.json").write_text("[1, 2]")
    rank = read_rank_dump(find_rank_dirs(rank_dir)[0])
    assert rank.entries == [] and rank.warnings == [f"{rank_dir / 'dump.json'}: truncated or invalid (not a JSON object); kept the 0 entries before it"]
    deep = {"type": "int", "value": 1}
    for _ in range(20):
        deep = [deep]
    nested = "[" * 5000 + "]" * 5000
    (rank_dir / "dump.json").write_text(
        '{"task": "tensor", "data": {"A.a.0.forward": {"input_args": %s}, "B.b.0.forward": {"output": %s}, '
        '"C.c.0.forward": {}}}' % (json.dumps(deep), nested))
    rank = read_rank_dump(find_rank_dirs(rank_dir)[0])
    # the entry nested past the recursion limit is skipped and named; the one after it loads
    assert [e.name for e in rank.entries] == ["A.a.0.forward", "C.c.0.forward"]
    assert rank.warnings[0] == (f"{rank_dir / 'dump.json'}: entry B.b.0.forward: nests too deeply, skipped "
                                f"(the other entries load)")
    assert rank.warnings[1] == f"{rank_dir / 'dump.json'}: A.a.0.forward input{'.0' * 17}: nested deeper than 16, skipped"


def test_a_number_too_long_for_json_skips_its_entry_not_a_traceback(tmp_path):
    """json's int() refuses more than 4300 digits with a ValueError (not a JSONDecodeError): that
    entry is skipped and named, the others are kept."""
    rank_dir = tmp_path / "step0" / "rank0"
    rank_dir.mkdir(parents=True)
    leaf = '{"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "Max": %s}'
    (rank_dir / "dump.json").write_text(
        '{"task": "statistics", "data": {"A.a.0.forward": {"output": [%s]}, "B.b.0.forward": {"output": [%s]}}}'
        % (leaf % "1.5", leaf % ("9" * 5000)))
    rank = read_rank_dump(find_rank_dirs(rank_dir)[0])
    assert [e.name for e in rank.entries] == ["A.a.0.forward"] and rank.entries[0].leaves[0].max == 1.5
    (warning,) = rank.warnings
    assert warning == (f"{rank_dir / 'dump.json'}: entry B.b.0.forward: a number of more than 4300 digits, "
                       f"skipped (the other entries load)")


def test_stack_and_construct_both_formats(tmp_path):
    data, files = _pytorch_data()
    new_dir = _write_rank(tmp_path / "new" / "step0" / "rank0", data, files)
    frames = ["File /m.py, line 3, in f, \n y = g(x)", "File /m.py, line 9, in <module>, \n f()"]
    (new_dir / "stack.json").write_text(json.dumps({"0": [[LIN, MOD], frames], "1": [[MOD + "x"], frames[1:]]}))
    (new_dir / "construct.json").write_text(json.dumps({LIN: MOD, MOD: None, "Tensor.float.0.forward": MOD}))
    rank = read_rank_dump(find_rank_dirs(new_dir)[0])
    assert rank.stack == {LIN: tuple(frames), MOD: tuple(frames), MOD + "x": tuple(frames[1:])}
    assert rank.construct == {LIN: MOD, MOD: None, "Tensor.float.0.forward": MOD}
    old_dir = _write_rank(tmp_path / "old" / "step0" / "rank0", data, files)
    (old_dir / "stack.json").write_text(json.dumps({LIN: frames, MOD: "oops"}))
    (old_dir / "construct.json").write_text(json.dumps({LIN: "", MOD: ["Module.top.T.forward.0", 1], "X": 5}))
    rank = read_rank_dump(find_rank_dirs(old_dir)[0])
    assert rank.stack == {LIN: tuple(frames)}
    assert rank.construct == {LIN: None, MOD: "Module.top.T.forward.0", "X": None}
    assert rank.warnings == [f"{old_dir / 'stack.json'}: {MOD}: unexpected str, ignored",
                             f"{old_dir / 'construct.json'}: X: parent 5 is not a name, ignored"]
    (old_dir / "stack.json").write_text("{")
    assert read_rank_dump(find_rank_dirs(old_dir)[0]).warnings[0].startswith(
        f"{old_dir / 'stack.json'}: invalid JSON at line 1")


@pytest.mark.parametrize("name,want", [
    ("Functional.conv2d.0.forward", ("forward", "api", "Functional", "conv2d", 0)),
    ("Tensor.__add__.12.backward", ("backward", "api", "Tensor", "__add__", 12)),
    ("Primitive.norm.RmsNorm.0.forward", ("forward", "api", "Primitive", "norm.RmsNorm", 0)),
    ("Module.0.conv1.Conv2d.forward.3", ("forward", "module", "Module", "0.conv1.Conv2d", 3)),
    ("Module.fc1.Linear.parameters_grad.0", ("parameters_grad", "module", "Module", "fc1.Linear", 0)),
    ("Module.fc1.Linear.parameters_grad", ("parameters_grad", "module", "Module", "fc1.Linear", None)),
    ("Cell.net.Dense.backward.1", ("backward", "module", "Cell", "net.Dense", 1)),
    ("weird", ("unknown", "api", "weird", "", None)),
])
def test_entry_names(name, want):
    parsed = parse_entry_name(name)
    assert (parsed.kind, parsed.scope, parsed.prefix, parsed.op, parsed.counter) == want


@pytest.mark.parametrize("file_name,want", [
    ("Functional.linear.0.forward.input.1.pt", ("Functional.linear.0.forward", "input.1")),
    ("Functional.linear.0.backward.output.2.pt", ("Functional.linear.0.backward", "output.2")),
    ("Torch.sum.0.forward.kwargs.dim.npy", ("Torch.sum.0.forward", "input.dim")),
    ("Module.fc1.Linear.forward.0.parameters.weight.pt", ("Module.fc1.Linear.forward.0", "parameters.weight")),
    ("Module.fc1.Linear.parameters_grad.0.bias.pt", ("Module.fc1.Linear.parameters_grad.0", "bias")),
    ("notes.txt.pt", None),
    ("Functional.linear.0.forward.pt", None),
])
def test_tensor_file_names(file_name, want):
    assert split_tensor_file_name(file_name) == want


@pytest.mark.skipif(not SAMPLE.is_dir(), reason="sample_data/framework (real msprobe output) not present")
def test_real_msprobe_sample_data():
    runs = [d for d in sorted(SAMPLE.iterdir()) if d.is_dir() and any(d.glob("step*/*/dump.json"))]
    assert runs
    for run in runs:
        dump = read_msprobe_dump(run)
        assert dump.warnings == [] and dump.framework == "pytorch", run
        for rank in dump.ranks:
            assert rank.entries and rank.undescribed_files == []
            for entry in rank.entries:
                assert entry.kind != "unknown", entry.name
                for leaf in entry.leaves:
                    if leaf.is_tensor:
                        assert leaf.dtype is not None
                    if leaf.data_name is None:
                        continue
                    assert leaf.data_name == f"{entry.name}.{leaf.path}.pt"
                    arr = load_leaf(leaf).astype(np.float64)
                    if arr.size and leaf.dtype != "bool" and not np.isnan(arr).any():
                        assert float(arr.max()) == leaf.max and float(arr.min()) == leaf.min, leaf.file


FUZZ = settings(max_examples=120, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def test_leaf_file_of_another_kind_is_a_format_error(tmp_path):
    """A dump.json naming a tensor file that is neither .npy nor .pt, on a leaf whose path is not a
    CANN dump's ``input.N``/``output.N`` (found by the fuzz test: ``int('1.0')`` escaped), gives a
    FormatError naming the file; the other leaves still load."""
    data, files = _pytorch_data()
    odd = f"{LIN}.input.1.0.bin"
    data[LIN]["input_args"][1][0]["data_name"] = odd
    files[odd] = files.pop(f"{LIN}.input.1.0.pt")
    rank = read_rank_dump(find_rank_dirs(_write_rank(tmp_path / "rank0", data, files))[0])
    leaves = {leaf.path: leaf for entry in rank.entries if entry.name == LIN for leaf in entry.leaves}
    with pytest.raises(FormatError) as caught:
        load_leaf(leaves["input.1.0"])
    assert odd in str(caught.value) and "input.1.0" in str(caught.value)
    np.testing.assert_array_equal(load_leaf(leaves["input.0"]), FP32)


@FUZZ
@given(cut=st.integers(0, 10**6), edits=st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from(
    list(b'{}[]",:0-9eE.ntfNI \\x'))), max_size=4))
def test_fuzz_dump_json_never_raises(tmp_path_factory, cut, edits):
    """Whatever a dump.json holds, reading the folder gives entries and warnings, never an
    exception; loading any leaf gives an array or a FormatError."""
    rank_dir = tmp_path_factory.mktemp("fz") / "step0" / "rank0"
    data, files = _pytorch_data()
    _write_rank(rank_dir, data, files)
    text = bytearray((rank_dir / "dump.json").read_bytes())
    for pos, value in edits:
        text[pos % len(text)] = value
    (rank_dir / "dump.json").write_bytes(bytes(text[:cut % (len(text) + 1)]))
    rank = read_rank_dump(find_rank_dirs(rank_dir)[0])
    for entry in rank.entries:
        for leaf in entry.leaves:
            if leaf.file:
                try:
                    load_leaf(leaf)
                except FormatError:
                    pass


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.floats() | st.sampled_from(
        ["torch.Tensor", "torch.float32", "BFloat16", "x.pt", "../x.pt", "", "0"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(
        ["type", "dtype", "shape", "Max", "Min", "Mean", "Norm", "md5", "value", "data_name",
         "requires_grad", "input_args", "input_kwargs", "input", "output", "parameters", "0", "weight"]),
        inner, max_size=5),
    max_leaves=12)


@FUZZ
@given(header=st.dictionaries(st.sampled_from(["task", "level", "framework", "dump_data_dir", "data"]), _JSON),
       entries=st.dictionaries(st.sampled_from([LIN, MOD, "Module.fc1.Linear.parameters_grad.0", "x\ny"]), _JSON),
       stack=_JSON, construct=_JSON)
def test_fuzz_json_shapes_never_raise(tmp_path_factory, header, entries, stack, construct):
    rank_dir = tmp_path_factory.mktemp("fz") / "step0" / "rank0"
    rank_dir.mkdir(parents=True)
    doc = {**header, "data": entries} if entries or "data" not in header else header
    for name, value in (("dump.json", doc), ("stack.json", stack), ("construct.json", construct)):
        (rank_dir / name).write_text(json.dumps(value))
    dump = read_msprobe_dump(rank_dir)
    assert all(isinstance(w, str) and "\n" not in w for w in dump.warnings)
