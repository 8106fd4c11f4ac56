"""The torch-free .pt reader: values of real torch.save files, and refusal of anything else.

The fixtures in tests/data/torch_pt/ were written by a real torch (make_fixtures.py there), with
the expected values saved by numpy beside them; no torch is needed here.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from precision_shell.errors import FormatError
from precision_shell.formats import torch_pt
from precision_shell.formats.torch_pt import PtTensor, load_pt_tensor, open_pt

DATA = Path(__file__).parents[1] / "data" / "torch_pt"
MANIFEST = json.loads((DATA / "manifest.json").read_text())


def _tensors(obj) -> dict[str, PtTensor]:
    return dict(obj) if isinstance(obj, dict) else {"": obj}


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_values_equal_torch_exactly(name):
    entry = MANIFEST[name]
    obj = open_pt(DATA / name)
    got = _tensors(obj)
    assert list(got) == list(entry["tensors"])     # dict order kept (OrderedDict state dicts)
    for key, want in entry["tensors"].items():
        t = got[key]
        assert isinstance(t, PtTensor)
        assert t.dtype == torch_pt.TORCH_DTYPES[want["dtype"]]
        assert (list(t.shape), list(t.stride), t.offset) == (want["shape"], want["stride"], want["offset"])
        arr = t.load()
        expected = np.load(DATA / want["expected"])
        assert arr.dtype == t.dtype and arr.shape == expected.shape and arr.flags.c_contiguous
        # bf16/fp8 expected values were widened to float32 by torch: exact for these formats
        np.testing.assert_array_equal(arr.astype(expected.dtype), expected, strict=True)


def test_view_reads_only_its_span_and_shared_storage_is_one_member():
    view = open_pt(DATA / "view_t.pt")
    assert view.offset > 0 and view.stride != torch_pt._contiguous_strides(view.shape)
    shared = open_pt(DATA / "shared.pt")
    assert shared["whole"].storage is shared["tail"].storage
    np.testing.assert_array_equal(shared["tail"].load(), shared["whole"].load()[4:])


def test_parameter_keeps_requires_grad_and_single_tensor_helper():
    assert open_pt(DATA / "param.pt").requires_grad is True
    assert open_pt(DATA / "fp32.pt").requires_grad is False
    np.testing.assert_array_equal(load_pt_tensor(DATA / "fp32.pt"), np.load(DATA / "fp32.npy"))
    with pytest.raises(FormatError, match="holds a OrderedDict, not a single tensor"):
        load_pt_tensor(DATA / "state_dict.pt")


# --- rewriting a real archive --------------------------------------------------------------------

def _rewrite(src: Path, dst: Path, edit) -> Path:
    """A copy of the archive ``src`` with ``edit(name, bytes) -> bytes | None`` applied per member
    (None drops it)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            data = edit(info.filename, zin.read(info))
            if data is not None:
                zout.writestr(info.filename, data)
    return dst


def _edit_pickle(replacements):
    def edit(name, data):
        if name.endswith("/data.pkl"):
            for old, new in replacements:
                assert old in data
                data = data.replace(old, new)
        return data
    return edit


def _binunicode(s: str) -> bytes:
    b = s.encode()
    return b"X" + len(b).to_bytes(4, "little") + b


@pytest.mark.parametrize("location", ["cuda:0", "npu:0"])
def test_device_locations_read_like_cpu(tmp_path, location):
    path = _rewrite(DATA / "bf16.pt", tmp_path / "bf16.pt",
                    _edit_pickle([(_binunicode("cpu"), _binunicode(location))]))
    t = open_pt(path)
    assert t.storage.location == location
    np.testing.assert_array_equal(t.load().astype(np.float32), np.load(DATA / "bf16.npy"))


def test_npu_rebuild_function(tmp_path):
    npu = [(b"ctorch._utils\n_rebuild_tensor_v2\n", b"ctorch_npu.utils.storage\n_rebuild_npu_tensor\n"),
           (_binunicode("cpu"), _binunicode("npu:0"))]
    path = _rewrite(DATA / "fp32.pt", tmp_path / "fp32.pt", _edit_pickle(npu))
    np.testing.assert_array_equal(load_pt_tensor(path), np.load(DATA / "fp32.npy"))
    # the 7th argument: an NPU device layout (FRACTAL_NZ = 29) is refused, ND (2) is plain
    for code, ok in ((2, True), (29, False)):
        fmt = b"ctorch_npu.npu._format\nFormat\nK" + bytes([code]) + b"\x85R"
        # append the Format(code) argument after the OrderedDict() hooks argument
        edit = npu + [(b"collections\nOrderedDict\nq\x08)R", b"collections\nOrderedDict\nq\x08)R" + fmt)]
        path = _rewrite(DATA / "fp32.pt", tmp_path / f"nz{code}.pt", _edit_pickle(edit))
        if ok:
            np.testing.assert_array_equal(load_pt_tensor(path), np.load(DATA / "fp32.npy"))
        else:
            with pytest.raises(FormatError, match="device format 29"):
                open_pt(path)


@pytest.mark.parametrize("name,item", [("fp32", "<u4"), ("bf16", "<u2"), ("int64", "<u8"), ("bool", "u1")])
def test_big_endian_archive(tmp_path, name, item):
    def swap(member, data):
        if member.endswith("/byteorder"):
            return b"big"
        if "/data/" in member:
            return np.frombuffer(data, item).byteswap().tobytes()
        return data
    path = _rewrite(DATA / f"{name}.pt", tmp_path / f"{name}.pt", swap)
    got = load_pt_tensor(path)
    assert got.dtype == torch_pt.TORCH_DTYPES[MANIFEST[f"{name}.pt"]["tensors"][""]["dtype"]]
    assert got.dtype.byteorder in "=|<"
    expected = np.load(DATA / f"{name}.npy")
    np.testing.assert_array_equal(got.astype(expected.dtype), expected, strict=True)


def test_compressed_storage_is_refused(tmp_path):
    path = tmp_path / "z.pt"
    with zipfile.ZipFile(DATA / "fp32.pt") as zin, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for info in zin.infolist():
            z.writestr(info.filename, zin.read(info))
    t = open_pt(path)   # the pickle may be compressed; storages are read raw, never inflated
    with pytest.raises(FormatError, match="fp32/data/0 is compressed"):
        t.load()


# --- refusals ------------------------------------------------------------------------------------

def _archive(tmp_path: Path, pickle_bytes: bytes, name="evil") -> Path:
    path = tmp_path / f"{name}.pt"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name}/data.pkl", pickle_bytes)
        z.writestr(f"{name}/byteorder", "little")
        z.writestr(f"{name}/data/0", b"\0" * 8)
    return path


def _call(module: str, name: str, arg: str) -> bytes:
    """Protocol-2 pickle of ``module.name(arg)`` (GLOBAL, a one-string tuple, REDUCE)."""
    return b"\x80\x02c" + f"{module}\n{name}\n".encode() + _binunicode(arg) + b"\x85R."


@pytest.mark.parametrize("module,name", [("os", "system"), ("posix", "system"), ("builtins", "eval"),
                                         ("builtins", "exec"), ("subprocess", "getoutput")])
def test_malicious_global_is_refused_and_never_runs(tmp_path, module, name):
    marker = tmp_path / "pwned"
    code = f"touch {marker}" if name in ("system", "getoutput") else f"open({str(marker)!r}, 'w')"
    for proto, blob in (("GLOBAL", _call(module, name, code)),
                        # protocol 4's STACK_GLOBAL takes the names from the stack
                        ("STACK_GLOBAL", b"\x80\x04" + _binunicode(module) + _binunicode(name)
                         + b"\x93" + _binunicode(code) + b"\x85R."),
                        # protocol 0's INST opcode
                        ("INST", b"(" + _binunicode(code) + f"i{module}\n{name}\n.".encode())):
        with pytest.raises(FormatError, match=f"disallowed pickle global {module}.{name}") as exc:
            open_pt(_archive(tmp_path, blob))
        assert str(exc.value).startswith(str(tmp_path)), proto
    assert not marker.exists()


def test_malicious_global_inside_a_tensor_file_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    # the hooks argument of a real tensor replaced by a call to os.system
    path = _rewrite(DATA / "fp32.pt", tmp_path / "fp32.pt", _edit_pickle(
        [(b"ccollections\nOrderedDict\nq\x08)R", _call("os", "system", f"touch {marker}")[2:-1])]))
    with pytest.raises(FormatError, match="disallowed pickle global os.system"):
        open_pt(path)
    assert not marker.exists()


def test_build_cannot_alter_the_allow_list(tmp_path):
    """BUILD on an allowed global (state dict applied to it) is refused: the objects behind the
    allow-list are shared by every later file, so a pickle must not be able to change one."""
    before = open_pt(DATA / "fp32.pt").load()
    evil = b"\x80\x02ctorch\nFloatStorage\n}X\x05\x00\x00\x00dtypeX\x02\x00\x00\x00u1sb."
    with pytest.raises(FormatError, match="pickle BUILD on a StorageType"):
        open_pt(_archive(tmp_path, evil))
    after = open_pt(DATA / "fp32.pt").load()
    assert after.dtype == before.dtype == np.float32 and np.array_equal(after, before)


@pytest.mark.parametrize("blob,reason", [
    (b"\x80\x02ctorch\nFloatStorage\nq\x00.", None),   # a bare class object is allowed data
    (b"garbage", "invalid data.pkl"),
    # memo bombs: the C unpickler would size (and zero) its memo by the index, 16 GB and 8 GB here;
    # refused by the opcode pre-scan before the unpickler runs
    (b"\x80\x02N" + b"r" + (0x40000000).to_bytes(4, "little") + b".", "memo index 1073741824 at opcode 2"),
    (b"\x80\x02Np500000000\n.", "memo index 500000000"),
    (b"\x80\x02Nq\x05.", "memo index 5 at opcode 2"),     # small, still not honest
    (b"\x80\x02(X\x07\x00\x00\x00storage", "invalid data.pkl"),        # truncated
    (b"\x80\x02K\x01Q.", "invalid data.pkl: .*unsupported persistent id"),
    # a storage the archive does not hold
    (b"\x80\x02(X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x009X\x03\x00\x00\x00cpuK\x02tQ.",
     "storage evil/data/9 is not in the archive"),
    # more elements than data/0 holds (8 bytes = 2 floats)
    (b"\x80\x02(X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x09tQ.",
     "holds 8 bytes, the pickle says 9 x 4"),
])
def test_malformed_pickles(tmp_path, blob, reason):
    path = _archive(tmp_path, blob)
    if reason is None:
        assert open_pt(path).name == "FloatStorage"
    else:
        with pytest.raises(FormatError, match=reason):
            open_pt(path)


def _tensor_pickle(size: bytes, stride: bytes, offset: int = 0) -> bytes:
    return (b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n(" + b"(" + _binunicode("storage")
            + b"ctorch\nFloatStorage\n" + _binunicode("0") + _binunicode("cpu") + b"K\x02tQ"
            + b"K" + bytes([offset]) + size + stride + b"\x89}tR.")


@pytest.mark.parametrize("size,stride,offset,reason", [
    (b"K\x03\x85", b"K\x01\x85", 0, "exceeds its storage of 2 elements"),
    (b"K\x02\x85", b"K\x01\x85", 1, "exceeds its storage"),
    (b"K\x02\x85", b"K\x02\x85", 0, "exceeds its storage"),
    (b"J\xff\xff\xff\xff\x85", b"K\x01\x85", 0, "bad tensor size"),             # negative
    (b"\x8a\x09" + b"\x01" * 9 + b"\x85", b"K\x01\x85", 0, "bad tensor size"),  # 2**65-ish
    (b"K\x02\x85", b"K\x01K\x01\x86", 0, "bad tensor geometry"),               # rank mismatch
    # 2**40 elements, all one stored float (stride 0): refused before load() could allocate 4 TB
    (b"\x8a\x06" + (1 << 40).to_bytes(6, "little") + b"\x85", b"K\x00\x85", 0,
     "expanded tensor of 1099511627776 elements over a storage of 2"),
])
def test_geometry_is_checked_before_any_read(tmp_path, size, stride, offset, reason):
    with pytest.raises(FormatError, match=reason):
        open_pt(_archive(tmp_path, _tensor_pickle(size, stride, offset)))


def test_valid_hand_written_tensor_and_stride_zero_broadcast(tmp_path):
    path = tmp_path / "t.pt"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("t/data.pkl", _tensor_pickle(b"K\x03K\x02\x86", b"K\x00K\x01\x86"))
        z.writestr("t/data/0", np.array([1.5, -2], "<f4").tobytes())
    np.testing.assert_array_equal(load_pt_tensor(path), np.array([[1.5, -2]] * 3, np.float32))


def test_bad_files(tmp_path):
    (tmp_path / "empty.pt").write_bytes(b"")
    (tmp_path / "text.pt").write_text("hello")
    (tmp_path / "bare.pt").write_bytes(b"\x80\x02K\x01.")
    (tmp_path / "cut.pt").write_bytes((DATA / "fp32.pt").read_bytes()[:200])
    (tmp_path / "dir.pt").mkdir()
    script = tmp_path / "script.pt"
    with zipfile.ZipFile(script, "w") as z:
        z.writestr("m/constants.pkl", b"")
        z.writestr("m/code/m.py", b"")
    cases = {"empty.pt": "empty file", "text.pt": "not a PyTorch .pt file",
             "bare.pt": "a bare pickle", "cut.pt": "not a readable zip archive",
             "dir.pt": "is a directory", "missing.pt": "no such file",
             "script.pt": "TorchScript archive"}
    for name, reason in cases.items():
        with pytest.raises(FormatError, match=reason):
            open_pt(tmp_path / name)
    with pytest.raises(FormatError, match=r"legacy \(pre-1.6, non-zip\) torch.save format"):
        open_pt(DATA / "legacy.pt")


def test_oversized_pickle_is_refused_unread(tmp_path, monkeypatch):
    monkeypatch.setattr(torch_pt, "MAX_PICKLE_BYTES", 100)
    with pytest.raises(FormatError, match="data.pkl is .* bytes, over the"):
        open_pt(DATA / "state_dict.pt")


def test_storage_member_truncated_after_open(tmp_path):
    def shorten(name, data):
        return data[:4] if "/data/" in name else data
    # the pickle says 12 floats; the member now holds 1: refused at open, before any read
    with pytest.raises(FormatError, match="holds 4 bytes"):
        open_pt(_rewrite(DATA / "fp32.pt", tmp_path / "fp32.pt", shorten))


# --- fuzzing: any bytes give a value or a FormatError, and nothing runs ----------------------------

FUZZ = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
_SEEDS = ["view_t.pt", "state_dict.pt", "shared.pt", "fp8_e4m3fn.pt", "param.pt"]


def _open_and_load(path):
    try:
        obj = open_pt(path)
    except FormatError:
        return
    for t in _tensors(obj).values() if isinstance(obj, (dict, PtTensor)) else ():
        if isinstance(t, PtTensor):
            try:
                t.load()
            except FormatError:
                pass


@FUZZ
@given(seed=st.sampled_from(_SEEDS), edits=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)),
                                                    min_size=1, max_size=4))
def test_fuzz_pickle_bytes(tmp_path, seed, edits):
    def flip(name, data):
        if name.endswith("/data.pkl"):
            data = bytearray(data)
            for pos, value in edits:
                data[pos % len(data)] = value
            data = bytes(data)
        return data
    _open_and_load(_rewrite(DATA / seed, tmp_path / "f.pt", flip))


@FUZZ
@given(seed=st.sampled_from(_SEEDS), cut=st.integers(0, 4000),
       edits=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=3))
def test_fuzz_file_bytes(tmp_path, seed, cut, edits):
    data = bytearray((DATA / seed).read_bytes())
    for pos, value in edits:
        data[pos % len(data)] = value
    path = tmp_path / "f.pt"
    path.write_bytes(bytes(data[:len(data) - cut % len(data)] if cut else data))
    _open_and_load(path)
