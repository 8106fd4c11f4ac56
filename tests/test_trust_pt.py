"""Issue 22 (part A): a crafted ``.pt`` cannot steer the unpickler. Each trick of the issue is
crafted here from a few pickle opcodes: BUILD writing into a storage or tensor after its checks
(path, strides, shape, dtype), slot state on an allow-listed function, and the same geometry
given straight to the rebuild call. Each is one refusal naming the file; nothing outside the
storage is read; the child-process runs show no crash (a segfault is exit -11 / 139)."""

from __future__ import annotations

import csv
import dataclasses
import json
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
from precision_shell.config import Config, load_config
from precision_shell.errors import FormatError
from precision_shell.formats.golden_npy import read_npy_header
from precision_shell.formats.msprobe_dump import read_rank_dump
from precision_shell.formats.msprobe_layout import find_rank_dirs
from precision_shell.formats import torch_pt
from precision_shell.formats.torch_pt import PtTensor, load_pt_tensor, open_pt
from tests.conftest import run_cli

DATA = Path(__file__).parent / "data" / "torch_pt"
FRAMEWORK_SAMPLE = Path(__file__).resolve().parent.parent / "sample_data" / "framework"

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

# --- NaN/Inf statistics in dump.json are values --------------------------------------------------

def _tensor_leaves(node, found):
    """Every dict holding a "Max" in a dump.json entry, in document order."""
    if isinstance(node, dict):
        if "Max" in node:
            found.append(node)
        for v in node.values():
            _tensor_leaves(v, found)
    elif isinstance(node, list):
        for v in node:
            _tensor_leaves(v, found)
    return found


def _int_leaves(node, found):
    """The tensor leaves of an integer dtype in a dump.json ``data`` tree, in document order."""
    if isinstance(node, dict):
        if str(node.get("dtype", "")).startswith("torch.int"):
            found.append(node)
        else:
            for v in node.values():
                _int_leaves(v, found)
    elif isinstance(node, list):
        for v in node:
            _int_leaves(v, found)
    return found


@pytest.mark.skipif(not (FRAMEWORK_SAMPLE / "target_bf16").is_dir(), reason="framework sample not present")
@pytest.mark.parametrize("target,golden,key", [("stats_target_bf16", "stats_golden_fp32", "NPU max"),
                                               ("target_bf16", "golden_fp32", "NPU max")])
def test_nan_and_inf_statistics_on_integer_leaves_compare(tmp_path, capsys, target, golden, key):
    """NaN/-Infinity/Infinity and a 400-digit integer as Max/Min/Mean/Norm of integer leaves
    (json's NaN literals): framework vc (and vcs on tensors) compare the pair; the cells say so."""
    work = tmp_path / target
    shutil.copytree(FRAMEWORK_SAMPLE / target, work)
    dump = next(work.glob("step0/*/dump.json"))
    doc = json.loads(dump.read_text())
    leaves = _int_leaves(doc["data"], [])
    assert len(leaves) >= 2
    leaves[0].update(Max=float("nan"), Min=float("-inf"), Mean=float("inf"), Norm=float("nan"))
    leaves[1].update(Max=10**400, Min=-10**400)
    dump.write_text(json.dumps(doc))       # writes the NaN / Infinity literals msprobe writes
    assert "NaN" in dump.read_text() and "-Infinity" in dump.read_text()
    out_dir = tmp_path / "out"
    rc, out, err = run_cli(capsys, work, "--golden", FRAMEWORK_SAMPLE / golden, "-o", out_dir,
                           "-c", "vc" if target.startswith("stats") else "vc; vcs")
    assert "internal error" not in out + err and "Traceback" not in out + err
    rows = list(csv.DictReader(next(out_dir.glob("compare_result_*.csv")).open()))
    assert len(rows) > 200      # every other row still there
    # the cells as msprobe writes them (its CSV pads some with a space)
    cells = [(r[key].strip().lower(), r["NPU min"].strip()) for r in rows]
    assert cells.count(("nan", "-inf")) == 1
    assert cells.count(("inf", "-inf")) >= 1      # the 400-digit integers


# --- partial reads keep the rest -------------------------------------------------------------------

@pytest.mark.skipif(not (FRAMEWORK_SAMPLE / "target_bf16").is_dir(), reason="framework sample not present")
def test_bad_dump_json_entries_are_skipped_one_line_each_and_the_rest_loads(tmp_path):
    """A copy of the sample dump.json with, among its entries, one nested 5,000 deep, one with a
    5,000-digit number, one holding a byte that is not UTF-8, one with a syntax error, and the
    first entry given again (changed) at the end."""
    rank_dir = tmp_path / "step0" / "rank0"
    shutil.copytree(FRAMEWORK_SAMPLE / "target_bf16" / "step0" / "rank0", rank_dir)
    doc = json.loads((rank_dir / "dump.json").read_text())
    entries = list(doc["data"].items())
    parts = [json.dumps(name) + ": " + json.dumps(body) for name, body in entries]
    bad = {3: ': {"output": ' + "[" * 5000 + "]" * 5000 + "}",
           7: ': {"output": [{"type": "int", "value": ' + "9" * 5000 + "}]}",
           11: ': {"output": [{"type": "str", "value": "@BYTE@"}]}',
           15: ': {"output": [1.2.3]}'}
    for i, body in bad.items():
        parts[i] = json.dumps(entries[i][0]) + body
    first_name, first_body = entries[0]
    again = json.loads(json.dumps(first_body))
    tensors = _tensor_leaves(again, [])
    tensors[0]["Max"] = 12345.5           # tells the second copy from the first
    parts.append(json.dumps(first_name) + ": " + json.dumps(again))
    header = {k: v for k, v in doc.items() if k != "data"}
    text = json.dumps(header)[:-1] + ', "data": {' + ", ".join(parts) + "}}"
    (rank_dir / "dump.json").write_bytes(text.encode().replace(b"@BYTE@", b"caf\xe9"))

    rank = read_rank_dump(find_rank_dirs(rank_dir)[0])
    want = [name for i, (name, _) in enumerate(entries) if i not in bad]
    loaded = [e.name for e in rank.entries]
    assert loaded[:len(want)] == want          # in order, nothing after a bad one lost
    # then the skipped entries' tensor files, recovered from their names (with a line each)
    assert set(loaded[len(want):]) <= {entries[i][0] for i in bad}
    assert max(x.max for x in rank.entries[0].leaves if x.max is not None) == 12345.5   # the last copy kept
    json_path = rank_dir / "dump.json"
    lines = [w for w in rank.warnings if w.startswith(f"{json_path}: ")]
    reasons = {3: "nests too deeply", 7: "a number of more than 4300 digits", 11: "not UTF-8 text",
               15: "invalid JSON"}
    for i, reason in reasons.items():
        named = [w for w in lines if f"entry {entries[i][0]}:" in w]
        assert len(named) == 1 and reason in named[0], (i, lines)
    dup = [w for w in lines if "duplicate" in w]
    assert dup == [f"{json_path}: 1 duplicate entries (the last of each kept, as json.load keeps it): {first_name}"]
    assert len(lines) == 5


def test_unparseable_dump_names_are_said_once_with_a_count(ws_copy, capsys):
    folder = next(p.parent for p in (ws_copy / "precision_data" / "npu").rglob("*.*.*.*") if p.is_file()
                  and p.parent.name == "0")
    dump = next(p for p in folder.iterdir() if p.is_file())
    for odd in ("Conv2D.conv1.12x.1706193202306372", "Add.a.b"):
        shutil.copy(dump, folder / odd)
    (folder / f"{dump.name}.output.0.npy").write_bytes(b"")    # a decoded sibling: not a dump, no word
    for command in ("info", "vc"):      # info's panel lists it; vc's run says it once on stderr
        rc, out, err = run_cli(capsys, ws_copy, "-c", command)
        named = [line.strip() for line in (out + err).splitlines() if str(folder) in line]
        assert len(named) == 1 and named[0].endswith(
            f"{folder}: 2 file names not in the dump name form type.name.task[.stream].timestamp, "
            f"skipped (e.g. 'Add.a.b')"), (command, out, err)


@pytest.fixture
def ws_copy(sample_ws, tmp_path) -> Path:
    src, _ = sample_ws
    root = tmp_path / "ws"
    shutil.copytree(src / "precision_data", root / "precision_data", ignore=shutil.ignore_patterns("temp"))
    return root


def test_config_problems_are_one_warning_each_never_fatal(tmp_path, ws_copy, capsys):
    path = tmp_path / "c.ini"
    path.write_text("[pshell]\nlimit = 3\nthreshold = 0.9\nthis line is junk\nlimit = 7\n"
                    "[pshel]\npager = off\n[pshell]\nthreshold = 2\n", encoding="utf-8")
    cfg = load_config(path)
    # the good lines count, the last of a key: limit 7; threshold's last value (2) is bad: default
    assert (cfg.limit, cfg.threshold, cfg.pager) == (7, Config().threshold, True)
    want = [f"{path}: line 4: not 'key = value' ('this line is junk'), skipped",
            f"{path}: line 5: [pshell] limit given again (line 2); the last one counts",
            f"{path}: line 8: section [pshell] given again (line 1); read as one section",
            f"{path}: line 9: [pshell] threshold given again (line 3); the last one counts",
            f"{path}: section [pshel] is not read (sections: [pshell], [profiles])"]
    assert cfg.warnings[:5] == want and len(cfg.warnings) == 6
    assert "threshold" in cfg.warnings[5] and "'2'" in cfg.warnings[5]
    # batch: the same lines on stderr, and the run goes on (a duplicate key used to abort it)
    rc, out, err = run_cli(capsys, ws_copy, "--config", path, "-c", "info")
    assert rc == 0 and [line for line in err.splitlines() if str(path) in line] == [f"warning: {w}" for w in cfg.warnings]


@pytest.mark.parametrize("array,kind", [(np.array(["ab", "c"]), "string"), (np.array([b"x"]), "bytes"),
                                        (np.zeros(2, [("a", "<f4"), ("b", "<i2")]), "structured"),
                                        (np.zeros(2, "datetime64[s]"), "datetime")])
def test_a_non_numeric_golden_npy_is_named(tmp_path, ws_copy, capsys, array, kind):
    golden = sorted((ws_copy / "precision_data" / "tf" / "dump").glob("*.npy"))[0]
    with pytest.raises(FormatError) as exc:
        np.save(tmp_path / "g.npy", array)
        read_npy_header(tmp_path / "g.npy")
    assert str(exc.value).startswith(f"{tmp_path / 'g.npy'}: holds {kind} values")
    values = np.load(golden)
    np.save(golden, np.resize(array, values.shape))
    rc, out, err = run_cli(capsys, ws_copy, "-c", "vc")
    assert any(str(golden) in line and f"holds {kind} values" in line for line in (out + err).splitlines())


# --- the default output folder is not followed out of the workspace ---------------------------------

def test_a_planted_output_folder_link_is_refused_unless_given_with_o(tmp_path, ws_copy, capsys):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (ws_copy / "precision_data" / "temp").mkdir()
    link = ws_copy / "precision_data" / "temp" / "pshell"
    link.symlink_to(elsewhere)
    rc, out, err = run_cli(capsys, ws_copy, "-c", "vc")
    named = [line for line in (out + err).splitlines() if str(link) in line]
    assert named[0] == (f"warning: {link}: a symbolic link to {elsewhere}, outside the workspace; "
                        f"pshell does not write there unless given with -o DIR")
    assert len(named) == 2 and named[1].startswith("error: ") and "refusing to write through" in named[1]
    assert rc != 0 and list(elsewhere.iterdir()) == []
    # given with -o, the same folder is the user's choice
    rc, out, err = run_cli(capsys, ws_copy, "-o", link, "-c", "vc")
    assert rc in (0, 1) and "refusing" not in err and list(elsewhere.glob("compare/result_*.csv"))
    # a link that stays inside precision_data is followed as before
    link.unlink()
    inside = ws_copy / "precision_data" / "temp" / "mine"
    inside.mkdir()
    link.symlink_to(inside)
    rc, out, err = run_cli(capsys, ws_copy, "-c", "vc")
    assert "refusing" not in err and list(inside.glob("compare/result_*.csv"))
