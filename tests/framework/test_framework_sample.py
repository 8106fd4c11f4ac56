"""The committed framework sample (sample_data/framework, real msprobe 26.2.0 output) agrees with
its truth.json and with msprobe's own compare results; needs neither torch nor msprobe."""

from __future__ import annotations

import csv
import importlib.util
import json
import math
import re
import zipfile
from pathlib import Path

import pytest

SAMPLE = Path(__file__).resolve().parents[2] / "sample_data" / "framework"
TRUTH = json.loads((SAMPLE / "truth.json").read_text())
TENSOR_RUNS = [n for n, r in TRUTH["runs"].items() if r["task"] == "tensor"]
SUMMARY_RUNS = [n for n, r in TRUTH["runs"].items() if r["task"] == "statistics"]
THRESHOLD = TRUTH["precision_loss"]["cosine_threshold"]

# the sample's own torch-free dump.json walker (the generator uses the same one)
_spec = importlib.util.spec_from_file_location("fw_dump_entries", SAMPLE / "dump_entries.py")
walk = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(walk)


def rank_dir(run: str) -> Path:
    return SAMPLE / TRUTH["runs"][run]["rank_dir"]


def dump(run: str) -> dict:
    return walk.load_dump(rank_dir(run))


def all_leaves(entry: dict) -> list[dict]:
    return walk.tensor_leaves(entry)


def compare_rows(mode: str) -> dict[str, dict]:
    with open(SAMPLE / TRUTH["compare"][mode]["csv"], newline="") as f:
        return {row["NPU Name"]: row for row in csv.DictReader(f)}


def is_float_tensor(row: dict) -> bool:
    return row["NPU Dtype"].startswith(("torch.float", "torch.bfloat"))  # not "<class 'float'>"


def has_cosine(row: dict) -> bool:
    return is_float_tensor(row) and row["NPU Tensor Shape"] != "[]"  # msprobe: 0-d unsupported


def rows_of(rows: dict[str, dict], entry: str, side: str) -> list[dict]:
    """CSV rows with a Cosine of an entry's tensors on one side ('input' covers parameters)."""
    sides = ("input", "parameters") if side == "input" else (side,)
    return [r for n, r in rows.items()
            if any(n.startswith(f"{entry}.{s}.") for s in sides) and has_cosine(r)]


@pytest.mark.parametrize("run", list(TRUTH["runs"]))
def test_every_run_parses_with_the_recorded_task_and_entries(run):
    facts, d = TRUTH["runs"][run], dump(run)
    assert (d["task"], d["level"], d["framework"]) == (facts["task"], "mix", "pytorch")
    assert len(d["data"]) == facts["entries"] > 50
    dtypes = {leaf["dtype"] for e in d["data"].values() for leaf in all_leaves(e)}
    assert facts["dtype"] in dtypes and "torch.int64" in dtypes  # tokens and targets stay int
    other_floats = {t for t in dtypes if "float" in t} - {facts["dtype"]}
    assert not other_floats, other_floats
    assert set(json.loads((rank_dir(run) / "construct.json").read_text())) <= set(d["data"])
    stack = json.loads((rank_dir(run) / "stack.json").read_text())
    assert "0" in stack and all(len(group) == 2 for group in stack.values())  # new grouped format


@pytest.mark.parametrize("run", TENSOR_RUNS)
def test_every_listed_tensor_file_exists_and_is_a_torch_zip(run):
    d, folder = dump(run), rank_dir(run) / "dump_tensor_data"
    names = [leaf["data_name"] for e in d["data"].values() for leaf in all_leaves(e)]
    assert len(names) == len(set(names)) == TRUTH["runs"][run]["tensor_files"]
    assert sorted(names) == sorted(p.name for p in folder.iterdir())
    for name in names:
        with zipfile.ZipFile(folder / name) as z:  # torch.save's archive: <stem>/data.pkl + data/0
            members = z.namelist()
        assert any(m.endswith("/data.pkl") for m in members), name
        assert any(m.endswith("/data/0") for m in members), name


@pytest.mark.parametrize("run", SUMMARY_RUNS)
def test_summary_runs_have_no_files_and_md5_only_in_md5_mode(run):
    d = dump(run)
    assert d["dump_data_dir"] is None and not (rank_dir(run) / "dump_tensor_data").exists()
    leaves = [leaf for e in d["data"].values() for leaf in all_leaves(e)]
    md5_mode = TRUTH["runs"][run]["summary_mode"] == "md5"
    assert all(("data_name" not in leaf) for leaf in leaves)
    assert all(bool(re.fullmatch(r"[0-9a-f]{8}", leaf.get("md5", ""))) == md5_mode
               for leaf in leaves)


def test_all_runs_have_the_same_entries_in_the_same_order():
    names = [list(dump(run)["data"]) for run in TRUTH["runs"]]
    assert all(n == names[0] for n in names)


def test_designed_root_and_its_downstream_exist_in_both_runs():
    loss = TRUTH["precision_loss"]
    for run in (loss["golden"], loss["target"]):
        data = dump(run)["data"]
        for name in [loss["root"], *loss["propagated_forward"], *loss["root_enclosing_modules"]]:
            assert name in data, (run, name)
    assert dump(loss["target"])["data"][loss["root"]]["output"][0]["dtype"] == "torch.bfloat16"
    assert loss["roots"][0] == loss["root"]
    parents = json.loads((rank_dir(loss["target"]) / "construct.json").read_text())
    assert parents[loss["root"]] == loss["root_enclosing_modules"][0]


def test_msprobe_tensor_compare_confirms_the_truth():
    """msprobe's own Cosine column: the designed root's inputs pass and its output fails, every
    propagated entry has a failing input and output, and every entry's minimum matches truth."""
    loss, rows = TRUTH["precision_loss"], compare_rows("tensor")
    assert len(rows) == TRUTH["compare"]["tensor"]["rows"]
    cos = lambda rs: min(float(r["Cosine"]) for r in rs)  # noqa: E731
    assert cos(rows_of(rows, loss["root"], "input")) >= THRESHOLD
    assert cos(rows_of(rows, loss["root"], "output")) < THRESHOLD
    for name in loss["propagated_forward"]:
        assert cos(rows_of(rows, name, "input")) < THRESHOLD
        assert cos(rows_of(rows, name, "output")) < THRESHOLD
    compared = 0
    for name, facts in loss["entries"].items():
        if facts["kind"] == "parameters_grad":
            continue
        for side in ("input", "output"):
            ours, theirs = facts[f"min_{side}_cosine"], rows_of(rows, name, side)
            assert (ours is None) == (not theirs), (name, side)
            if theirs:
                assert cos(theirs) == pytest.approx(ours, abs=1e-6), (name, side)
                compared += 1
    assert compared > 100
    for row in rows.values():  # Data_name names the two files, which exist
        if is_float_tensor(row):
            target_file, golden_file = json.loads(row["Data_name"].replace("'", '"'))
            assert (rank_dir(loss["target"]) / "dump_tensor_data" / target_file).is_file()
            assert (rank_dir(loss["golden"]) / "dump_tensor_data" / golden_file).is_file()


def test_summary_compares_name_the_same_tensors_and_match_their_dumps():
    tensor_rows = compare_rows("tensor")
    stats, md5 = compare_rows("statistics"), compare_rows("md5")
    assert list(stats) == list(md5) == list(tensor_rows)
    target = dump(TRUTH["compare"]["statistics"]["target"])["data"]
    root_out = target[TRUTH["precision_loss"]["root"]]["output"][0]
    row = stats[TRUTH["precision_loss"]["root"] + ".output.0"]
    assert float(row["NPU max"]) == root_out["Max"] and float(row["NPU l2norm"]) == root_out["Norm"]
    md5_target = dump(TRUTH["compare"]["md5"]["target"])["data"]
    md5_golden = dump(TRUTH["compare"]["md5"]["golden"])["data"]
    row = md5[TRUTH["precision_loss"]["root"] + ".output.0"]
    assert row["NPU MD5"] == md5_target[TRUTH["precision_loss"]["root"]]["output"][0]["md5"]
    assert row["BENCH MD5"] == md5_golden[TRUTH["precision_loss"]["root"]]["output"][0]["md5"]
    assert row["NPU MD5"] != row["BENCH MD5"] and row["Result"] == "error"


def _nonfinite(leaves: list[dict]) -> bool:
    return any(isinstance(leaf.get(k), float) and not math.isfinite(leaf[k])
               for leaf in leaves for k in ("Max", "Min", "Mean", "Norm"))


def test_designed_overflow_is_the_first_nonfinite_output_in_the_fp16_run():
    over = TRUTH["overflow"]
    data = dump(over["run"])["data"]
    first = next(n for n, e in data.items() if _nonfinite(walk.entry_sides(n, e)[1]))
    assert first == over["producer"] == over["producers"][0]
    inputs, outputs = walk.entry_sides(first, data[first])
    assert not _nonfinite(inputs) and outputs[0]["Max"] == math.inf
    assert outputs[0]["dtype"] == "torch.float16"
    for name in over["propagated"]:
        assert _nonfinite(walk.entry_sides(name, data[name])[0]), name
    anomaly = json.loads((SAMPLE / over["msprobe_overflow_check"]["json"]).read_text())
    assert anomaly["rank_0"][0]["op_name"] == over["producer"]
    for run in (TRUTH["precision_loss"]["golden"], TRUTH["precision_loss"]["target"]):
        assert not any(_nonfinite(all_leaves(e)) for e in dump(run)["data"].values()), run
