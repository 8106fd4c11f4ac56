"""qstat (issue 27): each recipe's numbers equal an independent numpy computation written here
from the recipe's definition (nearest value by brute force over the element format's values,
OCP MX v1.0 §6.3 scale rule, NVIDIA's NVFP4 two-level scales), and the explained share."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from precision_shell.formats.dump_file import DumpTensor, write_dump
from precision_shell.samples.naming import dump_file_name
from tests.conftest import json_docs, run_cli
from tests.formats.test_lowbit_formats import _expected_table

ELEMENT = {"fp8-e4m3": "float8_e4m3fn", "fp8-e5m2": "float8_e5m2", "mxfp8-e4m3": "float8_e4m3fn",
           "mxfp8-e5m2": "float8_e5m2", "mxfp4": "float4_e2m1", "nvfp4": "float4_e2m1", "hif8": "hifloat8"}


def _nearest(x: np.ndarray, element: str) -> tuple[np.ndarray, np.ndarray]:
    """Brute force: the closest finite value of the format (ties: even code, or away for
    HiFloat8), clamped to the largest; returns (values, saturated)."""
    table = _expected_table(element).astype(np.float64)
    codes = np.flatnonzero(np.isfinite(table))
    vals = table[codes]
    top = np.abs(vals).max()
    clipped = np.clip(x, -top, top)
    dist = np.abs(clipped[:, None] - vals[None, :])
    best = dist.min(axis=1, keepdims=True)
    cand = dist == best
    out = np.empty(x.size)
    for i in range(x.size):
        options = codes[cand[i]]
        values = table[options]
        if element == "hifloat8":
            pick = values[np.argmax(np.abs(values))]
        else:
            even = options[options % 2 == 0]
            pick = table[even[0]] if even.size else values[0]
        out[i] = pick
    return out, np.abs(x) > top


def _independent(x: np.ndarray, recipe: str, scale_rule: int = 0) -> dict:
    """qstat's numbers for a 2-D x, blocks along the last axis (``scale_rule`` 1: MX FP8 scales
    2^ceil(log2(amax / max)), aclnnDynamicMxQuant's scale_alg=1)."""
    element = ELEMENT[recipe]
    top = float(np.abs(_expected_table(element)[np.isfinite(_expected_table(element))]).max())
    rows, cols = x.shape
    if recipe in ("fp8-e4m3", "fp8-e5m2", "hif8"):
        block = cols * rows
        b = x.reshape(1, -1)
    else:
        block = 16 if recipe == "nvfp4" else 32
        n = -(-cols // block)
        pad = np.zeros((rows, n * block))
        pad[:, :cols] = x
        b = pad.reshape(-1, block)
    amax = np.abs(b).max(axis=1)
    if recipe.startswith("fp8"):
        scale = amax / top
    elif recipe.startswith("mx") and scale_rule == 1:
        scale = 2.0 ** np.ceil(np.log2(amax / top))
    elif recipe.startswith("mx"):
        emax = {"float8_e4m3fn": 8, "float8_e5m2": 15, "float4_e2m1": 2}[element]
        scale = 2.0 ** (np.floor(np.log2(amax)) - emax)
    elif recipe == "nvfp4":
        s_enc = 448.0 * 6.0 / amax.max()
        s_e4m3, _ = _nearest(amax / 6.0 * s_enc, "float8_e4m3fn")
        scale = s_e4m3 / s_enc
    else:
        scale = np.ones(1)
    with np.errstate(divide="ignore", invalid="ignore"):
        scaled = np.where(scale[:, None] > 0, b / scale[:, None], 0.0)
    q, sat = _nearest(scaled.reshape(-1), element)
    deq = (q.reshape(b.shape) * scale[:, None])
    if b.shape[0] > 1:
        deq = deq.reshape(rows, -1)[:, :cols]
        sat = sat.reshape(rows, -1)[:, :cols]
    deq, sat = deq.reshape(x.shape), sat.reshape(x.shape)
    nz = x != 0
    err = deq - x
    live = amax > 0
    return {"underflow": int(np.count_nonzero(nz & (deq == 0))), "saturated": int(np.count_nonzero(sat)),
            "rel_l2": math.sqrt(np.sum(err ** 2)) / math.sqrt(np.sum(x ** 2)), "mse": float(np.mean(err ** 2)),
            "scale_min": float(scale[live].min()), "scale_max": float(scale[live].max()), "deq": deq}


@pytest.fixture(scope="module")
def tensor_ws(tmp_path_factory):
    root = tmp_path_factory.mktemp("qstat_ws")
    (root / "dump").mkdir()
    rng = np.random.default_rng(3)
    # rows of very different magnitudes, a few tiny values: every recipe underflows somewhere
    x = (rng.standard_normal((12, 72)) * np.exp2(rng.integers(-14, 10, (12, 1)))).astype(np.float32)
    x[0, :5] = [3e-9, -1e-7, 0.0, 2e-6, 5e-12]
    np.save(root / "x.npy", x)
    write_dump(root / "dump" / dump_file_name("MatMul", "mm", 1, 0, 1700000000000001, 5), "mm",
               [DumpTensor(x, 1, 2)], [DumpTensor(x[:, :8].copy(), 1, 2)])
    return root, x.astype(np.float64)


@pytest.mark.parametrize("recipe", list(ELEMENT))
def test_numbers_equal_an_independent_computation(tensor_ws, capsys, recipe, tmp_path):
    root, x = tensor_ws
    rc, out, err = run_cli(capsys, root, "-o", tmp_path, "-c", f"qstat {root / 'x.npy'} --recipe {recipe}",
                           "--format", "json")
    assert rc == 0, err
    doc = json_docs(out)[0]
    want = _independent(x, recipe)
    assert doc["recipe"] == recipe and doc["count"] == x.size and doc["nonzero"] == int(np.count_nonzero(x))
    assert (doc["underflow"], doc["saturated"]) == (want["underflow"], want["saturated"])
    for key in ("rel_l2", "mse", "scale_min", "scale_max"):
        assert doc[key] == pytest.approx(want[key], rel=1e-12), key
    assert doc["underflow_pct"] == pytest.approx(100 * want["underflow"] / np.count_nonzero(x))
    assert doc["underflow"] > 0 or recipe in ("hif8", "fp8-e5m2", "mxfp8-e5m2")


@pytest.mark.parametrize("recipe", ["mxfp8-e4m3", "mxfp8-e5m2"])
def test_scale_rule_1_rounds_the_exponent_up(tensor_ws, capsys, recipe, tmp_path):
    root, x = tensor_ws
    rc, out, err = run_cli(capsys, root, "-o", tmp_path, "-c",
                           f"qstat {root / 'x.npy'} --recipe {recipe} --scale-rule 1", "--format", "json")
    assert rc == 0, err
    doc = json_docs(out)[0]
    want, rule0 = _independent(x, recipe, scale_rule=1), _independent(x, recipe)
    assert doc["scale_rule"] == 1 and (doc["underflow"], doc["saturated"]) == (want["underflow"], 0)
    for key in ("rel_l2", "mse", "scale_min", "scale_max"):
        assert doc[key] == pytest.approx(want[key], rel=1e-12), key
    assert doc["scale_max"] >= rule0["scale_max"]      # never a smaller scale than rule 0's
    rc, out, err = run_cli(capsys, root, "-o", tmp_path, "-c", f"qstat {root / 'x.npy'} --recipe {recipe} --scale-rule 1")
    assert "scale rule 1" in out


def test_scale_rule_1_at_exact_powers_of_two():
    """amax / max_elem exactly 2^k gives scale 2^k (not 2^(k+1)); just above it, 2^(k+1)."""
    from precision_shell.analysis.quant import quantize

    block = np.zeros((2, 32))
    block[0, 0], block[1, 0] = 448.0 / 8, np.nextafter(448.0 / 8, np.inf)
    q = quantize(block, "mxfp8-e4m3", scale_rule=1)
    assert q.scales.reshape(-1).tolist() == [0.125, 0.25]
    assert q.values[0, 0] == 56.0 and not q.saturated.any()


def test_worst_blocks_are_the_widest_with_their_index(tensor_ws, capsys, tmp_path):
    root, x = tensor_ws
    rc, out, err = run_cli(capsys, root, "-o", tmp_path, "-c", f"qstat {root / 'x.npy'} --recipe mxfp4 --top 3",
                           "--format", "json")
    doc = json_docs(out)[0]
    ranges = {}
    for r in range(x.shape[0]):
        for k in range(-(-x.shape[1] // 32)):
            a = np.abs(x[r, 32 * k:32 * k + 32])
            ranges[(r, k)] = math.log2(a.max() / a[a > 0].min())
    worst = sorted(ranges, key=lambda key: -ranges[key])[:3]
    assert [tuple(b["index"]) for b in doc["worst_blocks"]] == worst
    assert [b["binades"] for b in doc["worst_blocks"]] == pytest.approx([ranges[w] for w in worst])
    rc, out, err = run_cli(capsys, root, "-o", tmp_path, "-c", f"qstat {root / 'x.npy'} --recipe mxfp4 --top 3")
    assert rc == 0 and f"{worst[0][0]},{worst[0][1]}" in out and "underflow" in out


def test_block_and_axis_options(tensor_ws, capsys, tmp_path):
    root, x = tensor_ws
    rc, out, err = run_cli(capsys, root, "-o", tmp_path, "-c",
                           f"qstat {root / 'x.npy'} --recipe mxfp8-e4m3 --axis 0 --block 4", "--format", "json")
    assert rc == 0, err
    doc = json_docs(out)[0]
    blocks = x.T.reshape(x.shape[1], -1, 4)
    amax = np.abs(blocks).max(axis=-1)
    assert doc["blocks"] == amax.size and doc["block"] == 4 and doc["axis"] == 0
    scale = 2.0 ** (np.floor(np.log2(amax)) - 8)
    assert doc["scale_min"] == scale.min() and doc["scale_max"] == scale.max()


def test_explained_share_of_a_dumped_quantized_tensor(tensor_ws, capsys, tmp_path):
    root, x = tensor_ws
    want = _independent(x, "mxfp8-e4m3")
    npu = want["deq"].astype(np.float32)
    npu[0, 10] *= 1.5          # one element the recipe does not explain
    np.save(tmp_path / "npu.npy", npu)
    rc, out, err = run_cli(capsys, root, "-o", tmp_path / "o", "-c",
                           f"qstat {tmp_path / 'npu.npy'} --recipe mxfp8-e4m3 --golden {root / 'x.npy'}",
                           "--format", "json")
    assert rc == 0, err
    e = json_docs(out)[0]["explained"]
    observed = math.sqrt(np.sum((npu - x) ** 2)) / math.sqrt(np.sum(x ** 2))
    assert e["observed_rel_l2"] == pytest.approx(observed, rel=1e-12)
    assert e["recipe_rel_l2"] == pytest.approx(want["rel_l2"], rel=1e-12)
    assert e["explained"] == pytest.approx(want["rel_l2"] / observed, rel=1e-12)
    assert e["equal_fraction"] == pytest.approx((x.size - 1) / x.size)


def test_bad_requests_are_one_line(tensor_ws, capsys, tmp_path):
    root, _ = tensor_ws
    for command, words in ((f"qstat {root / 'x.npy'} --recipe fp3", "invalid choice"),
                           (f"qstat {root / 'x.npy'} --recipe mxfp4 --block 0", "--block"),
                           (f"qstat {root / 'x.npy'} --recipe mxfp4 --axis 5", "--axis 5"),
                           (f"qstat mm:0 --recipe mxfp4 --golden {root / 'x.npy'}", "shape"),
                           (f"qstat {root / 'x.npy'} --recipe mxfp4 --scale-rule 1", "MX FP8"),
                           (f"qstat {root / 'x.npy'} --recipe mxfp8-e4m3 --scale-rule 2", "invalid choice")):
        rc, out, err = run_cli(capsys, root, "-o", tmp_path, "-c", command)
        assert rc != 0 and words in err and len(err.strip().splitlines()) == 1, (command, err)


def test_ml_dtypes_agrees_on_the_fp8_recipe(tensor_ws):
    """The per-tensor FP8 cast cross-checked with ml_dtypes (from float32: no double rounding)."""
    from precision_shell.analysis.quant import quantize

    _, x = tensor_ws
    q = quantize(x, "fp8-e4m3")
    scale = float(q.scales.reshape(-1)[0])
    scaled = x / scale
    assert np.all(np.abs(scaled) <= 448)
    ref = scaled.astype(np.float32).astype(ml_dtypes.float8_e4m3fn).astype(np.float64) * scale
    exact32 = scaled.astype(np.float32).astype(np.float64) == scaled
    assert np.array_equal(q.values[exact32], ref[exact32])
