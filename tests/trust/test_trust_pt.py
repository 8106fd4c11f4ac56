"""Issue 22 (part A): a crafted ``.pt`` cannot steer the unpickler. Each trick of the issue is
crafted here from a few pickle opcodes: BUILD writing into a storage or tensor after its checks
(path, strides, shape, dtype), slot state on an allow-listed function, and the same geometry
given straight to the rebuild call. Each is one refusal naming the file; nothing outside the
storage is read; the child-process runs show no crash (a segfault is exit -11 / 139)."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import zipfile
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import precision_shell
from precision_shell.errors import FormatError
from precision_shell.formats import torch_pt
from precision_shell.formats.torch_pt import PtTensor, load_pt_tensor, open_pt

DATA = Path(__file__).parents[1] / "data" / "torch_pt"
FRAMEWORK_SAMPLE = Path(__file__).resolve().parents[2] / "sample_data" / "framework"

# --- a few pickle opcodes (protocol 2) -----------------------------------------------------------


def _str(s: str) -> bytes:
    b = s.encode()
    return b"X" + len(b).to_bytes(4, "little") + b


def _int(v: int) -> bytes:
    if -2**31 <= v < 2**31:
        return b"J" + v.to_bytes(4, "little", signed=True)
    n = (v.bit_length() + 8) // 8
    return b"\x8a" + bytes([n]) + v.to_bytes(n, "little", signed=True)


def _tuple(items) -> bytes:
    return b"(" + b"".join(items) + b"t"


def _value(v) -> bytes:
    if isinstance(v, str):
        return _str(v)
    if isinstance(v, bool):
        return b"\x88" if v else b"\x89"
    if isinstance(v, int):
        return _int(v)
    if isinstance(v, tuple):
        return _tuple(_value(x) for x in v)
    if isinstance(v, bytes):     # already opcodes (a global, say)
        return v
    raise TypeError(v)


def _dict(state: dict) -> bytes:
    return b"}(" + b"".join(_str(k) + _value(v) for k, v in state.items()) + b"u"


def _build(state: dict) -> bytes:
    """BUILD with ``state`` on the object on top of the stack."""
    return _dict(state) + b"b"


def _storage(key="0", numel=1536, cls="FloatStorage") -> bytes:
    return b"(" + _str("storage") + f"ctorch\n{cls}\n".encode() + _str(key) + _str("cpu") + _int(numel) + b"tQ"


def _tensor_pickle(shape, stride, offset=0, *, key="0", numel=1536, after_storage=b"", after_tensor=b"",
                   function=b"ctorch._utils\n_rebuild_tensor_v2\n") -> bytes:
    return (b"\x80\x02" + function + b"(" + _storage(key, numel) + after_storage + _int(offset)
            + _value(tuple(shape)) + _value(tuple(stride)) + b"\x89" + b"ccollections\nOrderedDict\n)R"
            + b"tR" + after_tensor + b".")


def _archive(path: Path, pickle_bytes: bytes, storages: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", pickle_bytes)
        z.writestr("archive/byteorder", "little")
        for key, data in storages.items():
            z.writestr(f"archive/data/{key}", data)
    return path


ONES = np.ones(1536, "<f4")    # the storage: 1,536 float32 ones


def _ones_pt(tmp_path, name="t", **kw) -> Path:
    shape, stride = kw.pop("shape", (2, 3, 256)), kw.pop("stride", (768, 256, 1))
    return _archive(tmp_path / f"{name}.pt", _tensor_pickle(shape, stride, **kw), {"0": ONES.tobytes()})


def _refused(path: Path, reason: str) -> str:
    with pytest.raises(FormatError) as exc:
        obj = open_pt(path)
        if isinstance(obj, PtTensor):
            obj.load()
    text = str(exc.value)
    assert text.startswith(f"{path}: ") and reason in text and "\n" not in text, text
    return text


def test_the_crafted_tensor_is_valid_without_the_trick(tmp_path):
    # the builders make a real tensor: each trick below differs from this file by the trick alone
    np.testing.assert_array_equal(load_pt_tensor(_ones_pt(tmp_path)), np.ones((2, 3, 256), np.float32))


# --- BUILD on what the unpickler made --------------------------------------------------------------

def test_storage_path_rewritten_to_another_zip_is_refused(tmp_path):
    other = _archive(tmp_path / "other.pt", _tensor_pickle((4,), (1,), numel=4),
                     {"0": np.full(4, 7.0, "<f4").tobytes()})
    assert load_pt_tensor(other).tolist() == [7.0] * 4
    state = {"path": str(other), "member": "archive/data/0"}
    evil = _ones_pt(tmp_path, "evil", shape=(4,), stride=(1,), after_storage=_build(state))
    text = _refused(evil, "pickle BUILD on a PtStorage")
    assert str(other) not in text


@pytest.mark.parametrize("stride", [(-700, 200, 1), (-7 * 2**26, 1, 1), (-7 * 2**26 + 3, -2**31, 1)])
def test_rewritten_negative_strides_are_refused(tmp_path, stride):
    evil = _ones_pt(tmp_path, after_tensor=_build({"stride": stride}))
    _refused(evil, "pickle BUILD on a PtTensor")
    # given straight to the rebuild call, the same strides are a bad stride, before any read
    direct = _ones_pt(tmp_path, "direct", stride=stride)
    _refused(direct, "bad tensor stride")


def test_expanded_shape_rewritten_past_the_cap_is_refused(tmp_path):
    evil = _ones_pt(tmp_path, after_tensor=_build({"shape": (1_500_000_000,), "stride": (0,)}))
    _refused(evil, "pickle BUILD on a PtTensor")
    direct = _ones_pt(tmp_path, "direct", shape=(1_500_000_000,), stride=(0,))
    _refused(direct, "expanded tensor of 1500000000 elements over a storage of 1536")


def test_dtype_set_to_a_torch_dtype_object_is_refused(tmp_path):
    evil = _ones_pt(tmp_path, after_tensor=_build({"dtype": b"ctorch\nfloat16\n"}))
    _refused(evil, "pickle BUILD on a PtTensor")


def test_slot_state_on_an_allow_listed_function_changes_nothing(tmp_path):
    defaults = torch_pt._rebuild_tensor_v2.__defaults__
    # BUILD (None, {"__defaults__": (True, None, None)}) on the function, then the call
    slot_state = b"N" + _dict({"__defaults__": (True,)}) + b"\x86b"
    function = b"ctorch._utils\n_rebuild_tensor_v2\n" + slot_state
    evil = _archive(tmp_path / "evil.pt", _tensor_pickle((4,), (1,), numel=4, function=function),
                    {"0": ONES[:4].tobytes()})
    _refused(evil, "pickle BUILD on a _AllowedCall")
    # a __dict__ state on the OrderedDict class of the allow-list, likewise
    cls_state = b"\x80\x02ccollections\nOrderedDict\n" + _build({"x": 1}) + b"."
    _refused(_archive(tmp_path / "cls.pt", cls_state, {}), "pickle BUILD on a _AllowedCall")
    assert torch_pt._rebuild_tensor_v2.__defaults__ == defaults
    assert all(not vars(f) for f in (torch_pt._rebuild_tensor_v2, torch_pt._tensor, torch_pt._npu_format))
    assert open_pt(DATA / "param.pt").requires_grad is True      # later files: as before
    assert open_pt(DATA / "fp32.pt").requires_grad is False


def test_state_dict_build_state_is_dropped_and_the_result_is_plain(tmp_path):
    """torch pickles a state dict's ``_metadata`` as BUILD on the OrderedDict: kept loading, but
    no attribute lands on the dict (``keys`` there would shadow the method ``dict()`` calls)."""
    sd = open_pt(DATA / "state_dict.pt")
    assert type(sd) is OrderedDict and vars(sd) == {} and list(sd) == ["weight", "bias"]
    pickled = (b"\x80\x02ccollections\nOrderedDict\n)R" + b"(" + _str("w")
               + _tensor_pickle((4,), (1,), numel=4)[2:-1] + b"u"
               + _build({"keys": b"ctorch._utils\n_rebuild_tensor\n", "_metadata": 1}) + b".")
    obj = open_pt(_archive(tmp_path / "sd.pt", pickled, {"0": np.arange(4, dtype="<f4").tobytes()}))
    assert type(obj) is OrderedDict and vars(obj) == {} and list(dict(obj)) == ["w"]
    assert obj["w"].load().tolist() == [0.0, 1.0, 2.0, 3.0]


@pytest.mark.parametrize("key", ["../other", "0/../../x", "", "..", "a\x1b]0;x\x07"])
def test_storage_key_must_name_a_member_of_data(tmp_path, key):
    path = _archive(tmp_path / "k.pt", _tensor_pickle((4,), (1,), numel=4, key=key), {"0": ONES[:4].tobytes()})
    text = _refused(path, "does not name a member of data/")
    assert "\x1b" not in text


@pytest.mark.parametrize("opcodes,name", [
    (b"\x80\x02ccollections\nOrderedDict\n)\x81.", "NEWOBJ"),
    (b"\x80\x04ccollections\nOrderedDict\n)}\x92.", "NEWOBJ_EX"),
    (b"\x80\x02(ccollections\nOrderedDict\no.", "OBJ"),
    (b"\x80\x02\x82\x01.", "EXT1"),
])
def test_opcodes_torch_never_writes_are_refused_before_unpickling(tmp_path, opcodes, name):
    _refused(_archive(tmp_path / "o.pt", opcodes, {}), f"pickle opcode {name}")


def test_a_container_holding_itself_is_refused(tmp_path):
    # a list appended to itself (memo GET): nothing could print or compare it
    _refused(_archive(tmp_path / "c.pt", b"\x80\x02]q\x00h\x00a.", {}), "contains itself")


def test_a_tensor_cannot_be_made_or_loaded_outside_its_storage(tmp_path):
    t = open_pt(_ones_pt(tmp_path))
    for stride in ((-700, 200, 1), (768, 256, -1)):
        with pytest.raises(ValueError, match="bad tensor stride"):
            dataclasses.replace(t, stride=stride)
    with pytest.raises(ValueError, match="exceeds its storage"):
        dataclasses.replace(t, offset=1)
    # fields forced past the frozen dataclass: load() checks again before reading a byte
    object.__setattr__(t, "stride", (-700, 200, 1))
    with pytest.raises(FormatError, match="bad tensor stride"):
        t.load()


# --- the same tricks through the commands, in a child (a crash must not take the test runner) ------

@pytest.mark.skipif(not (FRAMEWORK_SAMPLE / "target_bf16").is_dir(), reason="framework sample not present")
@pytest.mark.parametrize("command", ["pt Functional.softmax.0.forward.output.0", "vc", "vcs"])
def test_crafted_strides_in_a_dump_are_one_line_in_pt_vc_vcs(tmp_path, command):
    target, golden = tmp_path / "target", tmp_path / "golden"
    shutil.copytree(FRAMEWORK_SAMPLE / "target_bf16", target)
    planted = target / "step0/rank0/dump_tensor_data/Functional.softmax.0.forward.output.0.pt"
    shape, numel = (2, 4, 8, 8), 512
    pickled = _tensor_pickle(shape, (256, 64, 8, 1), numel=numel, after_tensor=_build(
        {"stride": (-7 * 2**26, 64, 8, 1)}), key="0").replace(b"FloatStorage", b"BFloat16Storage")
    _archive(planted, pickled, {"0": np.zeros(numel, "<u2").tobytes()})
    env = dict(os.environ, PYTHONPATH=str(Path(precision_shell.__file__).parent.parent))
    done = subprocess.run([sys.executable, "-m", "precision_shell", str(target), "--golden",
                           str(FRAMEWORK_SAMPLE / "golden_fp32"), "-o", str(tmp_path / "out"), "-c", command],
                          capture_output=True, text=True, env=env, timeout=120)
    text = done.stderr + done.stdout
    assert done.returncode not in (-11, 139) and "Traceback" not in text and "internal error" not in text
    named = [line for line in text.splitlines() if str(planted) in line]
    assert len(named) == 1 and "pickle BUILD on a PtTensor" in named[0], text


# --- hypothesis: any BUILD state on any object the pickle holds --------------------------------------

_FIELDS = ["path", "member", "dtype", "numel", "offset", "shape", "stride", "storage", "requires_grad",
           "__defaults__", "__dict__", "keys", "name", "function", "code"]
_VALUES = st.one_of(st.integers(-2**63, 2**63), st.text(max_size=8), st.booleans(),
                    st.tuples(st.integers(-2**40, 2**40)), st.lists(st.integers(-10**9, 10**9), max_size=4).map(tuple))


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(where=st.sampled_from(["storage", "tensor", "function", "hooks"]),
       state=st.dictionaries(st.sampled_from(_FIELDS), _VALUES, min_size=1, max_size=3),
       slot=st.booleans())
def test_any_build_state_is_refused_or_harmless(tmp_path, where, state, slot):
    build = (b"N" + _dict(state) + b"\x86b") if slot else _build(state)
    function = b"ctorch._utils\n_rebuild_tensor_v2\n" + (build if where == "function" else b"")
    pickled = _tensor_pickle((4,), (1,), numel=4, function=function,
                             after_storage=build if where == "storage" else b"",
                             after_tensor=build if where == "tensor" else b"")
    if where == "hooks":   # BUILD on the fresh OrderedDict of backward hooks
        pickled = pickled.replace(b"OrderedDict\n)R", b"OrderedDict\n)R" + build)
    path = _archive(tmp_path / "h.pt", pickled, {"0": np.arange(4, dtype="<f4").tobytes()})
    defaults = torch_pt._rebuild_tensor_v2.__defaults__
    try:
        values = load_pt_tensor(path)
    except FormatError as e:
        assert str(e).startswith(str(path)) and "\n" not in str(e)
    else:   # only the hooks' dict takes state (and drops it): the values are the storage's
        assert where == "hooks" and not slot and values.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert torch_pt._rebuild_tensor_v2.__defaults__ == defaults



def _tricks() -> list[bytes]:
    """The pickles of the tricks above, for the byte-flipping property below."""
    return [_tensor_pickle((4,), (1,), numel=4, after_storage=_build({"path": "/etc/passwd"})),
            _tensor_pickle((4,), (1,), numel=4, after_tensor=_build({"stride": (-700,)})),
            _tensor_pickle((4,), (1,), numel=4, after_tensor=_build({"shape": (1_500_000_000,), "stride": (0,)})),
            _tensor_pickle((4,), (1,), numel=4, after_tensor=_build({"dtype": b"ctorch\nfloat16\n"})),
            _tensor_pickle((4,), (1,), numel=4, function=b"ctorch._utils\n_rebuild_tensor_v2\nN"
                           + _dict({"__defaults__": (True,)}) + b"\x86b"),
            _tensor_pickle((4,), (-7 * 2**26,), numel=4)]


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(trick=st.integers(0, 5), edits=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)),
                                              min_size=0, max_size=4))
def test_flipped_bytes_of_the_tricks_give_storage_values_or_one_line(tmp_path, trick, edits):
    data = bytearray(_tricks()[trick])
    for pos, value in edits:
        data[pos % len(data)] = value
    path = _archive(tmp_path / "f.pt", bytes(data), {"0": np.arange(4, dtype="<f4").tobytes(),
                                                     "1": np.full(4, 9.0, "<f4").tobytes()})
    defaults = torch_pt._rebuild_tensor_v2.__defaults__
    try:
        obj = open_pt(path)
        tensors = [t for t in (obj.values() if isinstance(obj, dict) else [obj]) if isinstance(t, PtTensor)]
        values = [t.load() for t in tensors]
    except FormatError as e:
        assert str(e).startswith(f"{path}: ") and "\n" not in str(e)
    else:   # whatever loaded came from the archive's own storages
        for v in values:
            assert set(np.unique(v.astype(np.float64)).tolist()) <= {0.0, 1.0, 2.0, 3.0, 9.0} or v.size == 0 \
                or v.dtype != np.float32
    assert torch_pt._rebuild_tensor_v2.__defaults__ == defaults
