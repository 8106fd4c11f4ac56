"""pshell's own PyTorch capture on the framework sample's transformer block (attention,
LayerNorm, GELU, residuals, cross-entropy): fp32 and bf16-autocast on CPU, read back with pshell's
torch-free msprobe reader and checked against what torch itself computes."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the capture needs torch (pip install '.[capture]')")

from precision_shell.capture import capture  # noqa: E402
from precision_shell.formats.msprobe.dump import load_leaf, read_msprobe_dump  # noqa: E402
from precision_shell.formats.msprobe.layout import parse_entry_name  # noqa: E402
from precision_shell.formats.torch_pt import load_pt_tensor  # noqa: E402

FRAMEWORK = Path(__file__).resolve().parents[2] / "sample_data" / "framework"


def _sample_model_module():
    spec = importlib.util.spec_from_file_location("framework_sample_model", FRAMEWORK / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


M = _sample_model_module()


def _step(out: Path, autocast=None, mode: str = "tensor"):
    """One seeded training step of the sample block under the capture, as model.py makes it."""
    torch.manual_seed(M.SEED)
    torch.set_num_threads(1)
    model = M.Block()
    tokens = torch.randint(0, M.VOCAB, (M.BATCH, M.SEQ))
    targets = torch.randint(0, M.VOCAB, (M.BATCH, M.SEQ))
    with capture(out, model=model, mode=mode, autocast=autocast) as cap:
        loss = model(tokens, targets)
        loss.backward()
    return {"model": model, "tokens": tokens, "targets": targets, "loss": loss.detach(),
            "rank_dir": Path(cap.written[0])}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("capture")
    return {"fp32": _step(root / "fp32"), "bf16": _step(root / "bf16", ("cpu", torch.bfloat16)),
            "stats": _step(root / "stats", mode="statistics"), "root": root}


def _meta(run) -> dict:
    return json.loads((run["rank_dir"] / "pshell_meta.json").read_text())


def _entries(run) -> dict:
    dump = read_msprobe_dump(run["rank_dir"])
    assert dump.warnings == []
    return {e.name: e for e in dump.ranks[0].entries}


def _leaf(entries, name: str, path: str):
    return next(leaf for leaf in entries[name].leaves if leaf.path == path)


# --- layout -----------------------------------------------------------------------------------

def test_files_are_in_msprobes_layout(runs):
    rank_dir = runs["fp32"]["rank_dir"]
    assert rank_dir.relative_to(runs["root"]).parts == ("fp32", "step0", "rank0")
    for name in ("dump.json", "stack.json", "construct.json", "pshell_meta.json"):
        assert (rank_dir / name).is_file()
    dump = json.loads((rank_dir / "dump.json").read_text())
    assert (dump["task"], dump["level"], dump["framework"]) == ("tensor", "mix", "pytorch")
    stack = json.loads((rank_dir / "stack.json").read_text())
    grouped = [name for names, _ in stack.values() for name in names]
    assert "Functional.linear.0.forward" in grouped
    names, frames = next(v for v in stack.values() if "Functional.softmax.0.forward" in v[0])
    assert any("model.py" in f and "F.softmax(scores" in f for f in frames)


def test_names_and_order_equal_msprobes_dump_of_the_same_step(runs):
    golden = json.loads((FRAMEWORK / "golden_fp32/step0/rank0/dump.json").read_text())["data"]
    ours = json.loads((runs["fp32"]["rank_dir"] / "dump.json").read_text())["data"]
    assert list(ours) == list(golden)
    construct = json.loads((runs["fp32"]["rank_dir"] / "construct.json").read_text())
    msprobe_construct = json.loads((FRAMEWORK / "golden_fp32/step0/rank0/construct.json").read_text())
    differing = {k for k in construct.keys() | msprobe_construct.keys()
                 if construct.get(k) != msprobe_construct.get(k)}
    # msprobe leaves the embedding's API backward (written after its module's) without a parent
    assert differing == {"Functional.embedding.0.backward"}


def test_capture_golden_pairs_with_msprobe_dump_for_forward_api_entries(runs):
    """msprobe's pairing key: (op without counter, direction) renumbered in dump order."""
    def keys(path):
        seen, out = {}, set()
        for e in read_msprobe_dump(path).ranks[0].entries:
            if e.scope == "api" and e.kind == "forward":
                op = (e.prefix, e.op)
                out.add((op, seen.setdefault(op, 0)))
                seen[op] += 1
        return out
    msprobe = keys(FRAMEWORK / "golden_fp32")
    ours = keys(runs["fp32"]["rank_dir"])
    assert len(msprobe & ours) / len(msprobe) >= 0.95


# --- values -----------------------------------------------------------------------------------

def test_every_pt_loads_with_torch_pt_and_equals_torchs_own_load(runs):
    tensor_dir = runs["bf16"]["rank_dir"] / "dump_tensor_data"
    files = sorted(tensor_dir.iterdir())
    assert len(files) > 200
    for f in files:
        ours = load_pt_tensor(f)
        theirs = torch.load(f, weights_only=True)
        assert theirs.device.type == "cpu"
        np.testing.assert_array_equal(ours.astype(np.float64), theirs.double().numpy(), err_msg=f.name)


def test_module_outputs_equal_the_module_rerun_by_torch_on_the_dumped_inputs(runs):
    run = runs["fp32"]
    entries = _entries(run)
    modules = dict(run["model"].named_modules())
    checked = 0
    for name, entry in entries.items():
        parsed = parse_entry_name(name)
        if parsed.scope != "module" or parsed.kind != "forward":
            continue
        fqn = parsed.op.rpartition(".")[0]
        args = [torch.from_numpy(load_leaf(leaf).copy()) for leaf in entry.leaves
                if leaf.path.startswith("input.")]
        with torch.no_grad():
            expected = modules[fqn](*args)
        np.testing.assert_array_equal(load_leaf(_leaf(entries, name, "output.0")), expected.numpy())
        checked += 1
    assert checked == len(modules) - 1     # every submodule; the root is not an entry
    loss = load_leaf(_leaf(entries, "Functional.cross_entropy.0.forward", "output.0"))
    assert float(loss) == float(run["loss"])


def test_parameter_gradients_equal_param_grad(runs):
    run = runs["fp32"]
    entries = _entries(run)
    for fqn, param in run["model"].named_parameters():
        module_fqn, _, pname = fqn.rpartition(".")
        cls = type(run["model"].get_submodule(module_fqn)).__name__
        leaf = _leaf(entries, f"Module.{module_fqn}.{cls}.parameters_grad.0", pname)
        np.testing.assert_array_equal(load_leaf(leaf), param.grad.numpy())


def test_statistics_are_float32_of_the_tensor_and_equal_across_modes(runs):
    entries, stats = _entries(runs["bf16"]), _entries(runs["stats"])
    leaf = _leaf(entries, "Functional.linear.0.forward", "output.0")
    assert leaf.dtype == "bfloat16"
    values = load_leaf(leaf).astype(np.float32)
    assert leaf.norm == pytest.approx(float(np.linalg.norm(values)), rel=1e-6)
    assert (leaf.max, leaf.min) == (float(values.max()), float(values.min()))
    fp32_leaf = _leaf(_entries(runs["fp32"]), "Functional.linear.0.forward", "output.0")
    stats_leaf = _leaf(stats, "Functional.linear.0.forward", "output.0")
    assert (stats_leaf.max, stats_leaf.norm, stats_leaf.file) == (fp32_leaf.max, fp32_leaf.norm, None)
    assert json.loads((runs["stats"]["rank_dir"] / "dump.json").read_text())["dump_data_dir"] is None
    assert not (runs["stats"]["rank_dir"] / "dump_tensor_data").exists()


def test_bf16_autocast_is_recorded_and_shows_the_designed_softmax_loss(runs):
    meta = _meta(runs["bf16"])
    assert meta["capture"]["autocast"] == {"device": "cpu", "dtype": "torch.bfloat16"}
    assert meta["capture"]["torch"] == torch.__version__ and meta["partial"] is False
    golden, target = _entries(runs["fp32"]), _entries(runs["bf16"])

    def cosine(name, path):
        a = load_leaf(_leaf(golden, name, path)).astype(np.float64).ravel()
        b = load_leaf(_leaf(target, name, path)).astype(np.float64).ravel()
        return a @ b / np.linalg.norm(a) / np.linalg.norm(b)
    assert cosine("Functional.softmax.0.forward", "input.0") > 0.9999
    assert cosine("Functional.softmax.0.forward", "output.0") < 0.98


# --- dataflow edges ---------------------------------------------------------------------------

def test_edges_follow_the_models_dataflow(runs):
    meta = _meta(runs["fp32"])
    expected = {
        "Functional.layer_norm.0.forward.input.0": "Functional.embedding.0.forward.output.0",
        "Functional.linear.0.forward.input.0": "Functional.layer_norm.0.forward.output.0",
        "Tensor.split.0.forward.input.0": "Functional.linear.0.forward.output.0",
        "Tensor.reshape.2.forward.input.0": "Tensor.split.0.forward.output.2",
        "Torch.matmul.0.forward.input.0": "Tensor.transpose.0.forward.output.0",
        "Torch.matmul.0.forward.input.1": "Tensor.transpose.3.forward.output.0",
        "Functional.softmax.0.forward.input.0": "Tensor.__add__.0.forward.output.0",
        # the residual: the embedding and the attention block's projection (through the
        # module's backward tap, which must keep the producer)
        "Tensor.__add__.1.forward.input.0": "Functional.embedding.0.forward.output.0",
        "Tensor.__add__.1.forward.input.1": "Functional.linear.1.forward.output.0",
        "Functional.cross_entropy.0.forward.input.0": "Tensor.reshape.4.forward.output.0",
    }
    assert {k: meta["edges"][k] for k in expected} == expected
    assert meta["parameter_inputs"]["Functional.linear.0.forward.input.1"] == "attn.qkv.weight"
    assert meta["parameter_inputs"]["Functional.layer_norm.2.forward.input.3"] == "ln_f.bias"
    # tokens and targets were made before the capture
    assert sorted(meta["external_inputs"]) == [
        "Functional.embedding.0.forward.input.0", "Module.embed.Embedding.forward.0.input.0",
        "Tensor.reshape.5.forward.input.0"]


def test_pshells_framework_model_reads_the_edges_as_exact(runs):
    from precision_shell.model.framework_run import FrameworkRun
    run = FrameworkRun(read_msprobe_dump(runs["bf16"]["rank_dir"]).ranks[0])
    assert run.warnings == []
    assert len(run.edges) == len(_meta(runs["bf16"])["edges"]) and all(e.exact for e in run.edges)
    assert [e.src_op for e in run.producers("Functional.softmax.0.forward")] == ["Tensor.__add__.0.forward"]


def test_every_edge_joins_equal_tensors(runs):
    """Each input leaf holds the very tensor its producer output: same file contents."""
    run = runs["bf16"]
    entries, meta = _entries(run), _meta(run)
    params = dict(run["model"].named_parameters())
    leaves = {f"{e.name}.{leaf.path}": leaf for e in entries.values() for leaf in e.leaves}
    for target, source in meta["edges"].items():
        np.testing.assert_array_equal(load_leaf(leaves[target]), load_leaf(leaves[source]),
                                      err_msg=f"{target} <- {source}")
    for target, name in meta["parameter_inputs"].items():
        np.testing.assert_array_equal(load_leaf(leaves[target]), params[name].detach().numpy())
    forward_inputs = {k for k, leaf in leaves.items() if ".forward" in k and ".input." in k
                      and leaf.is_tensor}
    linked = set(meta["edges"]) | set(meta["parameter_inputs"]) | set(meta["external_inputs"])
    assert linked == forward_inputs and len(meta["edges"]) > 40


# --- msprobe's own compare ----------------------------------------------------------------------

def _msprobe() -> str | None:
    found = os.environ.get("MSPROBE") or shutil.which("msprobe")
    return found if found and os.access(found, os.X_OK) else None


@pytest.mark.skipif(_msprobe() is None, reason="msprobe (mindstudio-probe) not installed; "
                    "set MSPROBE=/path/to/msprobe to run")
def test_msprobe_compare_accepts_a_capture_pair(runs, tmp_path):
    out = tmp_path / "cmp"
    out.mkdir()
    subprocess.run([_msprobe(), "compare", "-tp", str(runs["bf16"]["rank_dir"].parent),
                    "-gp", str(runs["fp32"]["rank_dir"].parent), "-o", str(out)],
                   check=True, capture_output=True, cwd=tmp_path)
    import csv
    [result] = list(out.glob("compare_result_rank0_*.csv"))
    rows = {r["NPU Name"]: r for r in csv.DictReader(result.open())}
    assert all(r["Bench Name"] == name for name, r in rows.items())
    assert float(rows["Functional.softmax.0.forward.output.0"]["Cosine"]) < 0.98


def test_autocast_run_has_the_same_dataflow_graph_as_fp32(runs):
    """The API level sits above autocast: the bf16 run's calls and edges are the fp32 run's."""
    keys = ("edges", "parameter_inputs", "external_inputs")
    fp32, bf16 = ({k: _meta(runs[r])[k] for k in keys} for r in ("fp32", "bf16"))
    assert bf16 == fp32 and len(fp32["edges"]) > 40


def test_first_divergence_of_the_capture_pair_is_the_designed_softmax(runs):
    """pshell's framework compare and root-cause walk over the capture's exact edges name the
    designed root (framework sample README: the +300 logit shift rounds in bf16)."""
    from precision_shell.analysis.compare.msprobe.engine import compare_pairs
    from precision_shell.analysis.compare.msprobe.pairing import pair_dumps
    from precision_shell.analysis.root_cause.run import find_framework_suspects
    from precision_shell.model.framework_run import FrameworkRun
    target = read_msprobe_dump(runs["bf16"]["rank_dir"]).ranks[0]
    golden = read_msprobe_dump(runs["fp32"]["rank_dir"]).ranks[0]
    truth = json.loads((FRAMEWORK / "truth.json").read_text())["precision_loss"]
    results = list(compare_pairs(pair_dumps(target, golden), "tensor"))
    suspects = find_framework_suspects(FrameworkRun(target), results, truth["cosine_threshold"])
    first = [s for s in suspects if s.first]
    assert [s.op for s in first] == [truth["root"]] == ["Functional.softmax.0.forward"]
    assert {"Torch.matmul.1.forward", "Functional.linear.1.forward"} <= set(first[0].downstream)
