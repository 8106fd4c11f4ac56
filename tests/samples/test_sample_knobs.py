"""The sample generator's compiler knobs (--fusion-switch, --keep-fp32), checked on the files it
writes: graph, dumps (decoded independently), fusion report, manifest."""

from __future__ import annotations

import json

import numpy as np

from precision_shell.samples.__main__ import main as generate
from precision_shell.samples.network import KEEP_FP32_OVERFLOW_FIX, LAYERNORM_PARTS, PASS_LAYERNORM
from tests.samples.test_samples import read_dump

F16, F32 = 2, 1        # dump data_type codes


def make(tmp_path, name: str, *, switch: dict | None = None, keep: list[str] | None = None, capsys=None):
    args = [str(tmp_path / name)]
    if switch is not None:
        (tmp_path / f"{name}.json").write_text(json.dumps(switch), encoding="utf-8")
        args += ["--fusion-switch", str(tmp_path / f"{name}.json")]
    if keep is not None:
        (tmp_path / f"{name}.txt").write_text("\n".join(keep) + "\n", encoding="utf-8")
        args += ["--keep-fp32", str(tmp_path / f"{name}.txt")]
    assert generate(args) == 0
    ws = tmp_path / name
    return ws, json.loads((ws / "pshell_sample_manifest.json").read_text(encoding="utf-8"))


def ops_by_name(manifest: dict) -> dict:
    return {op["name"]: op for op in manifest["ops"]}


def fusion_passes(ws) -> set[str]:
    doc = json.loads((ws / "precision_data/fusion/fusion_result.json").read_text(encoding="utf-8"))
    return set(doc["graph_fusion"]) | set(doc["ub_fusion"])


def test_a_pass_switched_off_leaves_its_ops_unfused(tmp_path):
    ws, m = make(tmp_path, "ln_off", switch={"Switch": {"GraphFusion": {PASS_LAYERNORM: "off"}}})
    ops = ops_by_name(m)
    assert "ln1/add_1/LayerNorm" not in ops and m["lossy"] is None
    for name in LAYERNORM_PARTS:               # every framework op of the subgraph runs on its own
        assert ops[name]["original_ops"] == [name] and ops[name]["passes"] == []
        assert name in (ws / m["paths"]["graph_file"]).read_text(encoding="utf-8")
    assert PASS_LAYERNORM not in m["passes"] and PASS_LAYERNORM not in fusion_passes(ws)
    assert m["options"]["fusion_off"] == [PASS_LAYERNORM]
    # the unfused mean is an fp16 op: its dumped output is the fp16-rounded mean of its dumped input
    _, tensors = read_dump(ws / ops["ln1/moments/mean"]["dump_file"])
    (entry_in, x, _), (entry_out, mean, _) = tensors["input"][0], tensors["output"][0]
    assert entry_in.data_type == F16 and entry_out.data_type == F16
    x = x.reshape(tuple(entry_in.original_shape.dim)) if entry_in.original_shape.dim else x
    expected = x.astype(np.float64).mean(axis=-1, keepdims=True).astype(np.float32).astype(np.float16)
    assert np.array_equal(mean.reshape(expected.shape), expected)
    # and the root is gone: every output matches its golden again
    assert all(o["cosine"] is None or o["cosine"] > 0.98 for op in m["ops"] for o in op["outputs"]
               if op["stream_id"] == 0)


def test_a_pass_in_the_wrong_section_is_ignored_and_all_switches_a_section(tmp_path):
    _, m = make(tmp_path, "wrong", switch={"Switch": {"UBFusion": {PASS_LAYERNORM: "off"}}})
    assert ops_by_name(m)["ln1/add_1/LayerNorm"]["passes"] == [PASS_LAYERNORM]
    ws, m = make(tmp_path, "ub_all", switch={"Switch": {"GraphFusion": {}, "UBFusion": {"ALL": "off"}}})
    conv = ops_by_name(m)["conv1/Conv2D"]
    assert conv["passes"] == ["AABiasaddConvFusion"] and conv["original_ops"] == ["conv1/Conv2D", "conv1/BiasAdd"]
    assert ops_by_name(m)["conv1/Relu"]["original_ops"] == ["conv1/Relu"]
    assert not fusion_passes(ws) & {"TbeCommonRules0FusionPass", "TbeEltwiseFusionPass"}


def test_kept_ops_compute_and_dump_in_fp32_and_both_are_needed(tmp_path):
    mul, div = KEEP_FP32_OVERFLOW_FIX
    ws, m = make(tmp_path, "mul", keep=[mul])
    ops = ops_by_name(m)
    _, tensors = read_dump(ws / ops[mul]["dump_file"])
    assert [t[0].data_type for t in tensors["input"] + tensors["output"]] == [F32, F32, F32]
    product = tensors["input"][0][1].astype(np.float64) * tensors["input"][1][1].astype(np.float64)
    out = tensors["output"][0][1]
    assert np.isfinite(out).all() and np.allclose(out, product, rtol=1e-6)
    # RealDiv (fp16) reads it through a GE Cast, where the overflow now happens
    cast_source = ops[div]["inputs"][0]["source"].rsplit(":", 1)[0]
    assert ops[cast_source]["type"] == "Cast" and m["overflow"]["op"] == cast_source
    _, m = make(tmp_path, "div", keep=[div])
    assert m["overflow"]["op"] == mul
    ws, m = make(tmp_path, "both", keep=list(KEEP_FP32_OVERFLOW_FIX))
    assert m["overflow"] is None and m["compiler_knobs"]["keep_fp32"] == sorted(KEEP_FP32_OVERFLOW_FIX)
    assert all(o["finite"] for op in m["ops"] for o in op["outputs"])


def test_bad_knob_files_exit_2_with_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"Switch": {"GraphFusion": {"X": "maybe"}}}', encoding="utf-8")
    assert generate([str(tmp_path / "w"), "--fusion-switch", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad.json" in err and "maybe" in err
    assert not (tmp_path / "w").exists()
    (tmp_path / "k.txt").write_text("no/such/op\n", encoding="utf-8")
    assert generate([str(tmp_path / "w2"), "--keep-fp32", str(tmp_path / "k.txt")]) == 0
    assert "--keep-fp32: no op named no/such/op" in capsys.readouterr().err
