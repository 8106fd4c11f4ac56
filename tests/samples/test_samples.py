"""The sample-data generator: determinism, the committed sample, and that the planted findings
(the lossy LayerNorm root, the fp16 overflow) really are in the files.

Dump files are read here with a few lines of independent code (8-byte length, DumpData header,
raw segments) and device layouts are undone with the formulas of formats.md §7, so these tests
do not lean on the readers they are meant to feed.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import struct
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from google.protobuf import text_format

from precision_shell.formats.protoload import dump_data_pb, ge_ir_pb
from precision_shell.samples import device_layouts, graph_builder, tower as tw
from precision_shell.samples.__main__ import main
from precision_shell.samples.fusion_report import fusion_result_text
from precision_shell.samples.manifest import MANIFEST_NAME
from precision_shell.samples.network import run_network
from precision_shell.samples.writer import SampleOptions, write_workspace

REPO = Path(__file__).resolve().parents[2]
NP_DTYPES = {1: np.float32, 2: np.float16, 4: np.uint8, 7: np.int32, 27: ml_dtypes.bfloat16}
FORMATS = {0: "NCHW", 2: "ND", 3: "NC1HWC0", 4: "FRACTAL_Z", 29: "FRACTAL_NZ"}
DUMP5 = re.compile(r"^([A-Za-z0-9_-]+)\.([A-Za-z0-9_-]+)\.(\d+)\.(\d+)\.(\d{16})$")


# ---- independent readers ---------------------------------------------------------------------

def read_dump(path):
    """(DumpData header, {"input": [(entry, device array, raw bytes)], "output": [...]})."""
    blob = Path(path).read_bytes()
    (hlen,) = struct.unpack_from("<Q", blob)
    msg = dump_data_pb().DumpData.FromString(blob[8:8 + hlen])
    offset, out = 8 + hlen, {}
    for kind, entries in (("input", msg.input), ("output", msg.output)):
        out[kind] = []
        for t in entries:
            raw = blob[offset:offset + t.size]
            offset += t.size
            arr = np.frombuffer(raw, NP_DTYPES[t.data_type]).reshape(tuple(t.shape.dim))
            out[kind].append((t, arr, raw))
    assert offset == len(blob), "header sizes must account for every byte"
    return msg, out


def to_logical(arr, fmt, shape):
    """formats.md §7 restore rules, written out plainly."""
    shape = tuple(shape)
    if fmt in ("ND", "NCHW"):
        return arr.reshape(shape)
    if fmt == "NC1HWC0":
        n, c, h, w = shape
        return arr.transpose(0, 1, 4, 2, 3).reshape(n, -1, h, w)[:, :c]
    if fmt == "FRACTAL_Z":
        n, c, h, w = shape
        c1 = arr.shape[0] // (h * w)
        full = arr.reshape(c1, h, w, *arr.shape[1:]).transpose(3, 4, 0, 5, 1, 2)
        return full.reshape(arr.shape[1] * arr.shape[2], c1 * arr.shape[3], h, w)[:n, :c]
    if fmt == "FRACTAL_NZ":
        *batch, rows, cols = shape
        c1, n1, n0, c0 = arr.shape[-4:]
        flat = arr.reshape(math.prod(batch), c1, n1, n0, c0).transpose(0, 2, 3, 1, 4)
        return flat.reshape(math.prod(batch), n1 * n0, c1 * c0)[:, :rows, :cols].reshape(shape)
    raise AssertionError(fmt)


def plain_cosine(a, b) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def tree_digest(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and "precision_data/temp/" not in p.as_posix()}


# ---- fixtures --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    out = tmp_path_factory.mktemp("ws")
    manifest = write_workspace(out, SampleOptions())
    return out, manifest


@pytest.fixture(scope="module")
def run():
    return run_network(0)


# ---- determinism and the committed sample ----------------------------------------------------

def test_two_generations_are_byte_identical(ws, tmp_path):
    write_workspace(tmp_path, SampleOptions())
    first, second = tree_digest(ws[0]), tree_digest(tmp_path)
    assert len(first) > 60 and first == second


def test_committed_sample_equals_fresh_generation(ws):
    committed = REPO / "sample_data" / "convnet"
    assert (committed / MANIFEST_NAME).is_file(), "run: python -m precision_shell.samples sample_data/convnet"
    assert tree_digest(committed) == tree_digest(ws[0])


def test_other_seed_changes_data_and_times(tmp_path):
    manifest = write_workspace(tmp_path, SampleOptions(seed=3))
    assert manifest["graph_name"] != "ge_default_20240125153322_1"
    assert manifest["lossy"]["cosine"] < 0.98 and manifest["overflow"]["pos_inf"] > 0


# ---- manifest <-> files ----------------------------------------------------------------------

def test_manifest_matches_dump_files(ws):
    out, m = ws
    dump_dir = out / m["paths"]["npu_dump_dir"]
    listed = {Path(e["dump_file"]).name for e in m["ops"]}
    assert listed == {p.name for p in dump_dir.iterdir()}
    assert m["totals"]["npu_dump_files"] == len(listed)
    assert m["totals"]["npu_dump_bytes"] == sum(p.stat().st_size for p in dump_dir.iterdir())
    last_ts = 0
    for order, e in enumerate(m["ops"]):
        op_type, name, task, stream, ts = DUMP5.match(Path(e["dump_file"]).name).groups()
        assert (op_type, name) == (e["type"], e["name"].replace("/", "_").replace(".", "_"))
        assert (int(task), int(stream), int(ts), e["order"]) == (e["task_id"], e["stream_id"], e["timestamp"], order)
        assert int(ts) > last_ts
        last_ts = int(ts)
        header, tensors = read_dump(out / e["dump_file"])
        assert header.op_name == e["name"] and header.dump_time == e["timestamp"]
        for kind in ("input", "output"):
            assert len(tensors[kind]) == len(e[kind + "s"])
            for (t, arr, _), want in zip(tensors[kind], e[kind + "s"]):
                assert FORMATS[t.format] == want["format"] and list(arr.shape) == want["device_shape"]
                assert list(t.original_shape.dim) == want["logical_shape"]
                assert np.dtype(NP_DTYPES[t.data_type]).name == want["dtype"]
        for (t, _, _), want in zip(tensors["output"], e["outputs"]):
            origin = f"{t.original_op.name}:{t.original_op.output_index}" if t.HasField("original_op") else None
            assert origin == want["origin"]


def test_manifest_matches_golden_files(ws, run):
    out, m = ws
    golden_dir = out / m["paths"]["golden_dir"]
    assert set(m["golden_files"].values()) == {p.relative_to(out).as_posix() for p in golden_dir.iterdir()}
    assert set(m["golden_files"]) == {f"{f.name}:{i}" for f in run.framework.values() for i in range(len(f.outputs))}
    for ref, rel in m["golden_files"].items():
        assert re.fullmatch(r"[A-Za-z0-9_-]+\.\d+\.\d{16}\.npy", Path(rel).name)
        np.testing.assert_array_equal(np.load(out / rel), run.golden(ref))
    fused_away = {"conv1/BiasAdd:0", "ln1/moments/SquaredDifference:0", "fc2/MatMul:0", "input/Data:0"}
    assert fused_away <= set(m["golden_files"])


def test_decoded_dumps_equal_generator_arrays(ws, run):
    out, m = ws
    for e in m["ops"]:
        op = run.op(e["name"])
        _, tensors = read_dump(out / e["dump_file"])
        pairs = [(i.tensor, d) for i, d in zip(op.inputs, tensors["input"])] + list(zip(op.outputs, tensors["output"]))
        for tensor, (_, arr, _) in pairs:
            logical = to_logical(arr, tensor.format, tensor.logical_shape)
            assert logical.dtype == tensor.npu.dtype and logical.shape == tensor.logical_shape
            assert np.ascontiguousarray(logical).tobytes() == np.ascontiguousarray(tensor.npu).tobytes()


def test_padding_is_zero_and_layouts_exercise_it(run):
    conv = run.op("conv1/Conv2D")
    weight = conv.inputs[1].tensor.device()
    assert weight.shape == (9, 1, 16, 16)                       # Cout 8 -> 16, Cin 3 -> 16
    w = weight.reshape(1, 3, 3, 1, 16, 16)
    assert not w[..., 8:, :].any() and not w[..., :, 3:].any()
    act = conv.outputs[0].device()
    assert act.shape == (2, 1, 16, 16, 16) and not act[..., 8:].any() and act[..., :8].any()
    fc1 = run.op("fc1/MatMul").outputs[0]
    assert fc1.device_shape == (2, 1, 16, 16) and not fc1.device()[1, :, :, 8:].any()   # 24 cols -> 32


@pytest.mark.parametrize("shape, fmt", [((3, 5, 2, 7), "NC1HWC0"), ((17, 20, 3, 2), "FRACTAL_Z"),
                                        ((2, 3, 19, 33), "FRACTAL_NZ"), ((5, 16), "FRACTAL_NZ")])
def test_device_layouts_round_trip(shape, fmt):
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float16)
    dev = device_layouts.to_device(x, fmt)
    assert dev.shape == device_layouts.device_shape(shape, fmt) and dev.flags.c_contiguous
    np.testing.assert_array_equal(to_logical(dev, fmt, shape), x)
    assert np.count_nonzero(dev) == np.count_nonzero(x)         # every padded slot is zero


def test_inputs_are_bit_identical_to_producer_outputs(ws):
    out, m = ws
    by_name = {e["name"]: e for e in m["ops"]}
    checked = 0
    for e in m["ops"]:
        _, tensors = read_dump(out / e["dump_file"])
        for i, inp in enumerate(e["inputs"]):
            producer, index = inp["source"].rsplit(":", 1)
            if producer in by_name:
                _, prod = read_dump(out / by_name[producer]["dump_file"])
                assert tensors["input"][i][2] == prod["output"][int(index)][2]
                checked += 1
    assert checked >= 20


# ---- the planted findings --------------------------------------------------------------------

def test_fp16_overflow_really_happens(ws):
    out, m = ws
    ov = m["overflow"]
    _, tensors = read_dump(out / ov["dump_file"])
    (_, a, _), (_, scale, _) = tensors["input"]
    with np.errstate(over="ignore"):
        recomputed = np.multiply(a, scale)                    # numpy's own fp16 multiply
    exact = a.astype(np.float64) * scale.astype(np.float64)
    assert np.isposinf(recomputed).sum() == ov["pos_inf"] > 0
    assert np.array_equal(np.isinf(recomputed), exact > 65504) and np.isfinite(a).all()
    assert tensors["output"][0][2] == recomputed.tobytes()
    golden = np.load(out / m["golden_files"]["loss_scale/Mul:0"])
    assert np.isfinite(golden).all() and golden.max() > 65504
    for name in ov["downstream_non_finite"]:
        entry = next(e for e in m["ops"] if e["name"] == name)
        _, down = read_dump(out / entry["dump_file"])
        assert not np.isfinite(down["output"][0][1].astype(np.float32)).all()
    assert ov["downstream_non_finite"] == ["loss_scale/RealDiv", "aux/Mean", "aux/Sub"]


def test_overflow_dir_and_opdebug_record(ws):
    out, m = ws
    ov = m["overflow"]
    files = sorted(p.name for p in (out / m["paths"]["overflow_dump_dir"]).iterdir())
    assert files == sorted([Path(ov["overflow_dump_file"]).name, Path(ov["opdebug_file"]).name])
    name = Path(ov["opdebug_file"]).name
    assert name.startswith("Opdebug.Node_OpDebug.") and int(name.split(".")[2]) != ov["task_id"]
    header, tensors = read_dump(out / ov["opdebug_file"])
    record = tensors["output"][0][2]
    assert header.op_name == "Node_OpDebug" and len(record) == 2048
    model_id, stream_id, task_id = struct.unpack_from("<3Q", record, 256)        # AI Core info block
    status = struct.unpack_from("<Q", record, 1040)[0]
    assert (stream_id, task_id, status) == (ov["stream_id"], ov["task_id"], 0x20) and model_id == 1
    assert struct.unpack_from("<Q", record, 512)[0] == struct.unpack_from("<Q", record, 768)[0] == 0
    _, same_op = read_dump(out / ov["overflow_dump_file"])
    _, normal = read_dump(out / ov["dump_file"])
    assert same_op["output"][0][2] == normal["output"][0][2]


def test_new_opdebug_layout_option(tmp_path):
    m = write_workspace(tmp_path, SampleOptions(opdebug_layout="new"))
    _, tensors = read_dump(tmp_path / m["overflow"]["opdebug_file"])
    record = tensors["output"][0][2]
    magic, version, valid, acc, _, data_len = struct.unpack_from("<6I", record)
    fields = struct.unpack_from("<11Q", record, 24)
    assert (magic, version, valid, acc, data_len) == (0x5A5A5A5A, 0, 1, 0, 88)
    assert (fields[1], fields[2], fields[10]) == (m["overflow"]["stream_id"], m["overflow"]["task_id"], 0x20)


def test_lossy_root_is_below_threshold_while_inputs_match(ws, run):
    out, m = ws
    lossy = m["lossy"]
    entry = next(e for e in m["ops"] if e["name"] == lossy["op"])
    _, tensors = read_dump(out / entry["dump_file"])
    y = to_logical(tensors["output"][0][1], "ND", entry["outputs"][0]["logical_shape"])
    cos = plain_cosine(y, np.load(out / m["golden_files"][entry["outputs"][0]["golden"]]))
    assert 0.3 <= cos < 0.9 and cos == pytest.approx(lossy["cosine"], abs=1e-5)
    for (t, arr, _), inp in zip(tensors["input"], entry["inputs"]):
        golden = np.load(out / m["golden_files"][inp["golden"]])
        assert plain_cosine(to_logical(arr, FORMATS[t.format], inp["logical_shape"]), golden) >= 0.999
    # the error is the kernel's: an fp32 LayerNorm of the very same fp16 input is fine
    x = run.op(lossy["op"]).inputs[0].tensor.npu.astype(np.float64)
    gamma, beta = (run.golden(r).astype(np.float64) for r in ("ln1/gamma:0", "ln1/beta:0"))
    exact = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-3) * gamma + beta
    assert plain_cosine(exact, run.golden("ln1/add_1:0")) > 0.999


def test_propagation_and_clean_ops(ws):
    out, m = ws
    below = m["lossy"]["downstream_below_threshold"]
    assert {"act1/LeakyRelu", "fc2/MatMul"} <= set(below)
    contaminated = set(below) | set(m["overflow"]["downstream_non_finite"]) | {m["lossy"]["op"], m["overflow"]["op"]}
    for e in m["ops"]:
        _, tensors = read_dump(out / e["dump_file"])
        for (t, arr, _), want in zip(tensors["output"], e["outputs"]):
            if want["golden"] is None or (e["name"] in contaminated and e["name"] not in below):
                continue
            cos = plain_cosine(to_logical(arr, want["format"], want["logical_shape"]),
                               np.load(out / m["golden_files"][want["golden"]]))
            if e["name"] in below and want is e["outputs"][0]:
                assert cos < 0.98
            elif e["name"] not in contaminated:
                assert cos >= 0.99, e["name"]


# ---- graph and fusion report -----------------------------------------------------------------

def test_build_graph_text(ws, run):
    out, m = ws
    text = (out / m["paths"]["graph_file"]).read_text()
    model = text_format.Parse(text, ge_ir_pb().ModelDef())
    expected = graph_builder.model_def(m["graph_name"], run.ops, ["input/Data:0"],
                                       ["probs/Softmax:0", "aux/Sub:0"], m["session_graph_id"])
    assert text == text_format.MessageToString(expected)           # the streamed text is GE's
    ops = model.graph[0].op
    assert [op.id for op in ops] == list(range(len(ops)))
    executed = [op.name for op in ops if op.type not in ("Data", "Const", "NetOutput")]
    assert executed == [e["name"] for e in m["ops"]]
    conv = next(op for op in ops if op.name == "conv1/Conv2D")
    assert list(conv.attr["_datadump_original_op_names"].list.s) == [b"conv1/Conv2D", b"conv1/BiasAdd", b"conv1/Relu"]
    assert conv.input_desc[1].layout == "FRACTAL_Z" and list(conv.input_desc[1].attr["origin_shape"].list.i) == [8, 3, 3, 3]
    assert conv.output_desc[0].attr["_datadump_origin_name"].s == b"conv1/Relu"
    trans = next(op for op in ops if op.type == "TransData")
    assert len(trans.attr["_datadump_original_op_names"].list.s) == 0
    assert 'list {\n          val_type: VT_LIST_STRING\n        }' in text
    assert any(op.output_desc and op.output_desc[0].dtype == ge_ir_pb().DataType.Value("DT_BF16") for op in ops)
    stage = out / m["paths"]["stage_graph_file"]
    assert stage.name == "ge_proto_00000000_PreRunBegin.txt" and "conv1/BiasAdd" in stage.read_text()


def test_tower_block_text_matches_text_format():
    t = tw.Tower(0, tw.TowerPlan(4, tw.FILES_SHAPE))
    template = None
    for graph_id, (op, _, block) in enumerate(t.executed_ops(trans_start=10), start=40):
        op.graph_id = graph_id
        if block is None:
            continue
        template = template or tw.BlockText(op)
        assert template.render(block, op.inputs[0].source.rsplit(":", 1)[0], graph_id) == graph_builder.op_text(op)


def test_small_tensor_tower_text_matches_text_format_in_every_layout():
    """--small-tensors: outputs rotate through three device layouts; one template per (input,
    output) layout pair still prints what text_format prints."""
    t = tw.Tower(0, tw.TowerPlan(7, tw.SMALL_SHAPE, tw.SMALL_FORMATS))
    templates, seen = {}, []
    for graph_id, (op, _, block) in enumerate(t.executed_ops(trans_start=10), start=40):
        op.graph_id = graph_id
        if block is None:
            continue
        key = (op.inputs[0].tensor.format, op.outputs[0].format)
        seen.append(op.outputs[0].format)
        templates.setdefault(key, tw.BlockText(op))
        assert templates[key].render(block, op.inputs[0].source.rsplit(":", 1)[0], graph_id) == graph_builder.op_text(op)
    assert set(seen) == {"NC1HWC0", "FRACTAL_Z", "FRACTAL_NZ"} and len(templates) == 4


def _json_objects(text: str) -> list[dict]:
    dec, pos, objs = json.JSONDecoder(), 0, []
    while pos < len(text):
        obj, pos = dec.raw_decode(text, pos)
        objs.extend(obj if isinstance(obj, list) else [obj])
    if len(objs) == 1 and "graph_fusion" not in objs[0]:                      # shape 4
        objs = [{**v, "session_and_graph_id": k.removeprefix("session_and_graph_id_")} for k, v in objs[0].items()]
    return objs


@pytest.mark.parametrize("shape", [1, 2, 3, 4])
def test_fusion_result_shapes(ws, shape):
    out, m = ws
    text = (out / m["paths"]["fusion_file"]).read_text() if shape == 1 else \
        fusion_result_text(shape, m["passes"], m["session_graph_id"], 4)
    objs = _json_objects(text)
    assert len(objs) == (1 if shape == 1 else 2) and objs[-1]["session_and_graph_id"] == "0_1"
    assert (shape == 2) == ("}{" in text) and (shape == 3) == text.startswith("[")
    effective = {}
    for kind in ("graph_fusion", "ub_fusion"):
        for name, c in objs[-1][kind].items():
            assert isinstance(c["match_times"], str) and int(c["match_times"]) >= int(c["effect_times"])
            if int(c["effect_times"]):
                effective[name] = int(c["effect_times"])
    assert effective == {name: len(ops) for name, ops in m["passes"].items()}
    assert "TbeCommonRules0FusionPass" in objs[-1]["ub_fusion"]


# ---- options and large mode ------------------------------------------------------------------

@pytest.mark.parametrize("fields", [4, 9])
def test_name_field_options(tmp_path, fields):
    m = write_workspace(tmp_path, SampleOptions(name_fields=fields))
    for e in m["ops"]:
        parts = Path(e["dump_file"]).name.split(".")
        assert len(parts) == fields and int(parts[2]) == e["task_id"]
        assert int(parts[3 if fields == 4 else 4]) == e["timestamp"]


def test_files_mode(tmp_path):
    m = write_workspace(tmp_path, SampleOptions(files=60))
    dumps = list((tmp_path / m["paths"]["npu_dump_dir"]).iterdir())
    assert len(dumps) == m["totals"]["npu_dump_files"] == 60
    model = text_format.Parse((tmp_path / m["paths"]["graph_file"]).read_text(), ge_ir_pb().ModelDef())
    names = [op.name for op in model.graph[0].op]
    assert names[-1] == "Node_Output" and model.graph[0].output[-1] == f"{tw.last_block_name(tw.plan_for_files(60, 23))}:0"
    assert m["lossy"]["op"] in names and m["overflow"]["op"] in names
    last = m["ops"][-1]
    _, tensors = read_dump(tmp_path / last["dump_file"])
    y = to_logical(tensors["output"][0][1], "NC1HWC0", tw.FILES_SHAPE)
    assert plain_cosine(y, np.load(tmp_path / m["golden_files"][f"bert/layer_{last['tower_block']}/add:0"])) > 0.99


def test_scale_mode_size(tmp_path):
    m = write_workspace(tmp_path, SampleOptions(scale_mb=12))
    block = tw.TowerPlan(1, tw.SCALE_SHAPE).block_dump_bytes
    assert abs(m["totals"]["npu_dump_bytes"] - 12e6) < block
    assert m["passes"]["MulAddFusionPass"] == [e["name"] for e in m["ops"] if e["type"] == "FusedMulAdd"]


def test_cli_refuses_to_overwrite(tmp_path, capsys):
    assert main([str(tmp_path), "--fusion-shape", "2"]) == 0
    assert "}{" in (tmp_path / "precision_data/fusion/fusion_result.json").read_text()
    assert main([str(tmp_path)]) == 2 and "--force" in capsys.readouterr().err
    assert main([str(tmp_path), "--force"]) == 0
    assert "}{" not in (tmp_path / "precision_data/fusion/fusion_result.json").read_text()
