"""``pshell TARGET --golden GOLDEN`` on the committed msprobe sample (sample_data/framework), in
batch mode through the CLI: the framework room's commands against the sample's truth.json, the
.pt contents and msprobe's own compare CSVs."""

from __future__ import annotations

import csv
import json
import math
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest

from conftest import json_docs, run_cli
from framework_dumps import sample
from precision_shell.formats.torch_pt import load_pt_tensor

TRUTH = json.loads((Path(__file__).parents[2] / "sample_data" / "framework" / "truth.json").read_text())
LOSS, OVERFLOW = TRUTH["precision_loss"], TRUTH["overflow"]


def run(capsys, tmp_path, target: str, golden: str | None, *commands: str, fmt: str = "json"):
    argv = [sample() / target] + (["--golden", sample() / golden] if golden else [])
    argv += ["-o", tmp_path / "out", "--format", fmt]
    for c in commands:
        argv += ["-c", c]
    return run_cli(capsys, *argv)


def entries_of(run_name: str) -> dict:
    return json.loads((sample() / TRUTH["runs"][run_name]["rank_dir"] / "dump.json").read_text())["data"]


def tensor_file(run_name: str, data_name: str) -> Path:
    return sample() / TRUTH["runs"][run_name]["rank_dir"] / "dump_tensor_data" / data_name


def msprobe_csv(mode: str) -> tuple[list[str], list[dict]]:
    with open(sample() / TRUTH["compare"][mode]["csv"], newline="") as f:
        rows = list(csv.DictReader(f))
    return list(rows[0]), rows


# --- vcs / ac against the designed truth -----------------------------------------------------------

def test_vcs_names_the_designed_root_first_and_its_downstream_propagated(capsys, tmp_path):
    rc, out, err = run(capsys, tmp_path, "target_bf16", "golden_fp32", f"vcs -c {LOSS['cosine_threshold']} -l 0")
    assert rc == 0, err
    (rows,) = json_docs(out)
    firsts = [r for r in rows if r["first"]]
    assert [r["op"] for r in firsts] == [LOSS["root"]] and firsts[0]["role"] == "root"
    assert firsts[0]["modules"] == LOSS["root_enclosing_modules"]
    assert abs(firsts[0]["cosine"] - LOSS["root_output_cosine"]) < 1e-6
    propagated = [r["op"] for r in rows if r["role"] == "propagated"]
    assert propagated == LOSS["propagated_forward"]
    assert {r["op"] for r in rows if r["role"] == "root"} == {o for o in LOSS["roots"] if o.endswith("forward.0")
                                                             or o.endswith(".forward")}
    # its downstream along the dataflow graph is exactly what it propagated to
    assert set(LOSS["propagated_forward"]) <= set(firsts[0]["downstream"])
    assert all(r["kind"] == "forward" for r in rows)


def test_vcs_backward_adds_the_backward_roots_and_propagated(capsys, tmp_path):
    rc, out, err = run(capsys, tmp_path, "target_bf16", "golden_fp32", "vc", "vcs -c 0.98 --backward -l 0",
                       "vcs -c 0.98 -l 0")
    assert rc == 0, err
    vc, rows, forward = json_docs(out)
    assert (vc["failing_ops"], vc["failing_forward"]) == (len(rows), len(forward))
    data = [r for r in rows if r["kind"] != "parameters_grad"]
    assert [r["op"] for r in data if r["role"] == "root"] == LOSS["roots"]
    assert [r["op"] for r in data if r["role"] == "propagated"] == \
        LOSS["propagated_forward"] + LOSS["propagated_backward"]
    assert [r["op"] for r in rows if r["kind"] == "parameters_grad"] == LOSS["failing_parameters_grad"]
    # no inputs recorded: "every input passes" would be vacuous, so a gradient is never a root
    assert {r["role"] for r in rows if r["kind"] == "parameters_grad"} == {"param_grad"}
    assert [r["op"] for r in rows if r["first"]] == [LOSS["root"]]


def test_ac_names_the_designed_overflow_producer_first(capsys, tmp_path):
    rc, out, err = run(capsys, tmp_path, "overflow_fp16", None, "ac -l 0")
    assert rc == 0, err
    (rows,) = json_docs(out)
    assert rows[0]["op"] == OVERFLOW["producer"] and rows[0]["first"] and rows[0]["role"] == "producer"
    assert [r["op"] for r in rows if r["role"] == "producer"] == OVERFLOW["producers"]
    data = [r for r in rows if r["kind"] != "parameters_grad"]
    assert [r["op"] for r in data if r["role"] == "propagated"] == OVERFLOW["propagated"]
    assert [r["op"] for r in rows if r["kind"] == "parameters_grad"] == OVERFLOW["nonfinite_parameters_grad"]
    # the counts come from the values: the producer's inf count is the file's
    producer = entries_of("overflow_fp16")[OVERFLOW["producer"]]["output"][0]
    values = load_pt_tensor(tensor_file("overflow_fp16", producer["data_name"])).astype(np.float64)
    (out0,) = [c for c in rows[0]["outputs"] if c["bad"]]
    assert (out0["pos_inf"], out0["nan"]) == (int(np.isposinf(values).sum()), int(np.isnan(values).sum()))
    assert out0["pos_inf"] > 0


def test_ac_judges_from_statistics_when_only_statistics_were_dumped(capsys, tmp_path):
    rc, out, err = run(capsys, tmp_path, "stats_target_bf16", None, "ac -l 0")
    assert rc == 0, err
    assert json_docs(out) == [[]]     # the bf16 run does not overflow
    rc, out, err = run(capsys, tmp_path, "stats_target_bf16", None, "ac", fmt="table")
    assert "(0 tensors judged from their values, " in out


# --- info / ls / ni --------------------------------------------------------------------------------

def test_info_reports_framework_and_entry_count(capsys, tmp_path):
    rc, out, err = run(capsys, tmp_path, "target_bf16", "golden_fp32", "info")
    assert rc == 0, err
    (doc,) = json_docs(out)
    entries = entries_of("target_bf16")
    assert doc["framework"] == "pytorch" and doc["task"] == "tensor" and doc["level"] == "mix"
    assert doc["ops"] == len(entries) == TRUTH["runs"]["target_bf16"]["entries"]
    assert doc["steps"] == [0] and doc["ranks"] == ["rank0"]
    assert doc["golden_ops"] == len(entries_of("golden_fp32"))
    assert doc["output_dir"] == str(tmp_path / "out")


def test_ls_filters_by_module_and_type_and_ni_shows_edges(capsys, tmp_path):
    rc, out, err = run(capsys, tmp_path, "target_bf16", "golden_fp32", "ls -m attn -l 0",
                       "ls -t softmax", f"ni {LOSS['root']}", f"li {LOSS['propagated_forward'][0]}",
                       f"lo {LOSS['root']}")
    assert rc == 0, err
    in_attn, softmax, node, inputs, outputs = json_docs(out)
    assert LOSS["root"] in [r["op"] for r in inputs] and outputs == node["consumers"]
    construct = json.loads((sample() / TRUTH["runs"]["target_bf16"]["rank_dir"] / "construct.json").read_text())

    def inside(name, module="attn"):
        parent = construct.get(name)
        while parent:
            if module in parent:
                return True
            parent = construct.get(parent)
        return False

    assert [r["op"] for r in in_attn] == [n for n in entries_of("target_bf16") if inside(n)]
    assert [r["op"] for r in softmax] == [n for n in entries_of("target_bf16") if ".softmax." in n]
    assert node["modules"] == LOSS["root_enclosing_modules"]
    assert [p["op"] for p in node["producers"]] == ["Tensor.__add__.0.forward"]
    assert {p["edge"] for p in node["producers"] + node["consumers"]} == {"inferred"}
    assert "Torch.matmul.1.forward" in [c["op"] for c in node["consumers"]]
    leaf = entries_of("target_bf16")[LOSS["root"]]["output"][0]
    (out0,) = [t for t in node["tensors"] if t["tensor"].endswith(":output:0")]
    assert (out0["dtype"], out0["shape"], out0["max"]) == (leaf["dtype"], leaf["shape"], leaf["Max"])


# --- pt / cp ---------------------------------------------------------------------------------------

def test_pt_and_cp_values_equal_the_pt_files(capsys, tmp_path):
    name = "Functional.linear.1.forward"
    t_leaf = entries_of("target_bf16")[name]["output"][0]
    g_leaf = entries_of("golden_fp32")[name]["output"][0]
    target = load_pt_tensor(tensor_file("target_bf16", t_leaf["data_name"])).astype(np.float32)
    golden = load_pt_tensor(tensor_file("golden_fp32", g_leaf["data_name"]))
    rc, out, err = run(capsys, tmp_path, "target_bf16", "golden_fp32", f"pt {name}:output:0 -a",
                       f"pt golden:{name}:output:0[1, :3]", f"cp {name}:output:0 golden:{name}:output:0")
    assert rc == 0, err
    pt_t, pt_g, cp = json_docs(out)
    np.testing.assert_array_equal(np.array(pt_t["values"], dtype=np.float32), target)
    assert pt_t["dtype"] == "bfloat16" and pt_t["logical_shape"] == t_leaf["shape"]
    np.testing.assert_array_equal(np.array(pt_g["values"], dtype=np.float32), golden[1, :3])
    x, y = target.astype(np.float64).ravel(), golden.astype(np.float64).ravel()
    cosine = x @ y / (np.linalg.norm(x) * np.linalg.norm(y))
    assert abs(cp["cosine"] - cosine) < 1e-6
    assert abs(cp["max_abs_error"] - np.abs(x - y).max()) < 1e-6


# --- vc: msprobe's CSV, three modes ---------------------------------------------------------------

def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def test_vc_csv_has_msprobes_columns_and_metrics(capsys, tmp_path):
    rc, out, err = run(capsys, tmp_path, "target_bf16", "golden_fp32", "vc")
    assert rc == 0, err
    (doc,) = json_docs(out)
    columns, theirs = msprobe_csv("tensor")
    with open(doc["csv"], newline="") as f:
        ours = list(csv.DictReader(f))
    assert list(ours[0]) == columns and len(ours) == len(theirs) == doc["tensors"]
    assert Path(doc["csv"]).parent == tmp_path / "out"
    checked = 0
    for a, b in zip(ours, theirs):
        assert a["NPU Name"] == b["NPU Name"] and a["Bench Name"] == b["Bench Name"]
        for col in ("Cosine", "EucDist", "MaxAbsErr", "MaxRelativeErr", "One Thousandth Err Ratio",
                    "Five Thousandths Err Ratio"):
            x, y = _number(a[col]), _number(b[col])
            if y is None or math.isnan(y):
                assert a[col].strip() == b[col].strip(), (a["NPU Name"], col)
            else:
                assert abs(x - y) <= 1e-6, (a["NPU Name"], col, x, y)
                checked += 1
    assert checked > 500


@pytest.mark.parametrize("mode,target,golden", [("statistics", "stats_target_bf16", "stats_golden_fp32"),
                                                ("md5", "md5_target_bf16", "md5_golden_fp32")])
def test_statistics_and_md5_pairs_load_and_compare(capsys, tmp_path, mode, target, golden):
    rc, out, err = run(capsys, tmp_path, target, golden, "vc")
    assert rc == 0, err
    (doc,) = json_docs(out)
    columns, theirs = msprobe_csv(mode)
    assert doc["mode"] == mode and doc["tensors"] == len(theirs) == TRUTH["compare"][mode]["rows"]
    with open(doc["csv"], newline="") as f:
        ours = list(csv.DictReader(f))
    assert list(ours[0]) == columns
    if mode == "md5":
        assert doc["different"] == sum(r["NPU MD5"] != r["BENCH MD5"] for r in theirs) > 0
        assert [r["Result"] for r in ours] == [r["Result"] for r in theirs]
    else:
        for a, b in zip(ours, theirs):
            assert [a[c] for c in ("Max diff", "NPU max", "Bench max")] == \
                [b[c] for c in ("Max diff", "NPU max", "Bench max")]


def test_vcs_on_an_md5_pair_says_why_in_one_line(capsys, tmp_path):
    rc, out, err = run(capsys, tmp_path, "md5_target_bf16", "md5_golden_fp32", "vcs")
    assert rc == 1 and err.count("\n") == 1 and "md5 only" in err


# --- stepping, export, graph-only commands ----------------------------------------------------------

def test_next_export_keep_fp32_and_graph_only_commands(capsys, tmp_path):
    rc, out, err = run(capsys, tmp_path, "target_bf16", "golden_fp32", "vcs", "next", "goto 2",
                       "export suspects --format keep-fp32", "fusion", fmt="table")
    assert rc == 1      # fusion
    assert "[1/" in out and LOSS["root"] in out.split("[1/")[1].splitlines()[0]
    assert err.strip() == "error: fusion: graph-mode only; not available on framework dumps"
    names = (tmp_path / "out" / "suspects_keep_fp32.txt").read_text().splitlines()
    assert names[0] == "Functional.softmax" and "Module.attn.SelfAttention" in names


def test_writes_stay_out_of_the_dump_trees(capsys, tmp_path):
    inside = sample() / "target_bf16" / "pshell_out"
    rc, out, err = run_cli(capsys, sample() / "target_bf16", "--golden", sample() / "golden_fp32",
                           "-o", inside, "-c", "vc")
    assert rc == 1 and "refusing to write inside the input folder" in err
    assert not inside.exists()


def test_use_selects_step_and_rank(capsys, tmp_path):
    root = tmp_path / "dump"
    for step in ("step0", "step1"):
        (root / step).mkdir(parents=True)
        (root / step / "rank0").symlink_to(sample() / TRUTH["runs"]["target_bf16"]["rank_dir"])
    rc, out, err = run_cli(capsys, root, "-o", tmp_path / "out", "--format", "json",
                           "-c", "use --step 1; info; use --step 7")
    assert rc == 1 and "no dump for step 7" in err
    used, doc = json_docs(out)
    assert used["active"]["step"] == 1 and doc["active"]["step"] == 1 and doc["steps"] == [0, 1]


# --- bad input ----------------------------------------------------------------------------------

def _copy(run_name: str, tmp_path: Path) -> Path:
    dst = tmp_path / run_name
    shutil.copytree(sample() / run_name, dst)
    return dst / TRUTH["runs"][run_name]["rank_dir"].split("/", 1)[1]


def test_missing_dump_json_is_one_line_and_the_files_still_load(capsys, tmp_path):
    rank = _copy("target_bf16", tmp_path)
    (rank / "dump.json").unlink()
    rc, out, err = run_cli(capsys, rank, "--golden", sample() / "golden_fp32", "-o", tmp_path / "out",
                           "--format", "json", "-c", "info", "-c", "vc")
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and str(rank / "dump.json") in errors[0] and "missing" in errors[0]
    info, vc = json_docs(out)
    assert info["tensor_files"] == TRUTH["runs"]["target_bf16"]["tensor_files"]
    assert vc["compared"] > 200


def test_pt_with_a_disallowed_global_is_one_line_and_the_rest_compares(capsys, tmp_path):
    rank = _copy("target_bf16", tmp_path)
    name = "Functional.softmax.0.forward.output.0.pt"
    marker = tmp_path / "pwned"
    evil = rank / "dump_tensor_data" / name
    code = f"touch {marker}".encode()
    with zipfile.ZipFile(evil, "w") as z:
        z.writestr("evil/data.pkl", b"\x80\x02cos\nsystem\nX" + len(code).to_bytes(4, "little") + code + b"\x85R.")
        z.writestr("evil/byteorder", "little")
    rc, out, err = run_cli(capsys, rank, "--golden", sample() / "golden_fp32", "-o", tmp_path / "out",
                           "--format", "json", "-c", "vc", "-c", f"pt {LOSS['root']}:output:0")
    assert not marker.exists()
    (vc,) = json_docs(out)
    assert vc["problems"] == [f"{evil}: disallowed pickle global os.system"] or \
        (len(vc["problems"]) == 1 and str(evil) in vc["problems"][0] and "os.system" in vc["problems"][0])
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and str(evil) in errors[0] and "disallowed pickle global" in errors[0]
    clean = run(capsys, tmp_path / "clean", "target_bf16", "golden_fp32", "vc")
    assert vc["compared"] == json_docs(clean[1])[0]["compared"] - 1


def test_repl_on_a_framework_pair(tmp_path):
    from tests.shell.test_repl import drive, make_opts

    from precision_shell.model.framework_session import FrameworkSession

    session = FrameworkSession.open(sample() / "target_bf16", golden=sample() / "golden_fp32",
                                    output=tmp_path / "out")
    rc, out, err, hung = drive(session, "vcs\rnext\rhelp dc\rdc x\r\x04", make_opts(tmp_path))
    assert (rc, hung) == (0, False)
    assert "pytorch dump" in out.splitlines()[0]          # the banner is the framework `info`
    assert f"{LOSS['root']}" in out and "first divergence" in out and "[1/" in out
    assert "internal error" not in err
    assert err.count("graph-mode only") == 2


def test_mapping_file_rewrites_the_pairing_and_a_bad_one_is_one_line(capsys, tmp_path):
    row = f"{LOSS['root']}.output.0"
    mapping = tmp_path / "data_mapping.yaml"
    mapping.write_text(f"{row}: {LOSS['root']}.input.0\n")
    rc, out, err = run_cli(capsys, sample() / "target_bf16", "--golden", sample() / "golden_fp32",
                           "--mapping", mapping, "-o", tmp_path / "out", "--format", "json", "-c", "vc")
    assert rc == 0, err
    (doc,) = json_docs(out)
    assert doc["pairing"] == "mapping"
    with open(doc["csv"], newline="") as f:
        (mapped,) = [r for r in csv.DictReader(f) if r["NPU Name"] == row]
    assert mapped["Bench Name"] == f"{LOSS['root']}.input.0"
    rc, out, err = run_cli(capsys, sample() / "target_bf16", "--golden", sample() / "golden_fp32",
                           "--mapping", mapping, "-o", tmp_path / "out",
                           "-c", f"vc; export compare --format csv -o {mapping}")
    assert rc == 1 and "refusing to write over the input file" in err and "data_mapping" in err
    mapping.write_text("a: [b, c]\n")
    rc, out, err = run_cli(capsys, sample() / "target_bf16", "--golden", sample() / "golden_fp32",
                           "--mapping", mapping, "-o", tmp_path / "out", "--format", "json", "-c", "info")
    assert rc == 1 and err.count("\n") == 1 and str(mapping) in err
    assert json_docs(out)[0]["ops"] == TRUTH["runs"]["target_bf16"]["entries"]


def test_vc_fuzzy_pairs_by_names_without_call_numbers(capsys, tmp_path):
    rc, out, err = run(capsys, tmp_path, "target_bf16", "golden_fp32", "vc --fuzzy")
    assert rc == 0, err
    (doc,) = json_docs(out)
    assert doc["pairing"] == "fuzzy" and doc["paired"] == TRUTH["compare"]["tensor"]["rows"]
    with open(doc["csv"], newline="") as f:
        rows = list(csv.DictReader(f))
    # the same script on both sides: dump order aligns each row with its own name
    assert [r["Bench Name"] for r in rows] == [r["NPU Name"] for r in rows]


def _two_ranks(tmp_path: Path, run_name: str) -> Path:
    """A dump root with step0/rank0 and step0/rank1, both copies of a sample run's rank folder."""
    root = tmp_path / run_name
    for rank in ("rank0", "rank1"):
        shutil.copytree(sample() / TRUTH["runs"][run_name]["rank_dir"], root / "step0" / rank)
    return root


def test_vcs_ranks_all_on_a_multi_rank_dump(capsys, tmp_path):
    target, golden = _two_ranks(tmp_path, "target_bf16"), _two_ranks(tmp_path, "golden_fp32")
    rc, out, err = run_cli(capsys, target, "--golden", golden, "-o", tmp_path / "out", "--format", "json",
                           "-c", "vcs -c 0.98 --ranks all", "-c", "vc --ranks 1", "-c", "vcs --ranks 7")
    assert rc == 1 and err.strip().splitlines() == [
        f"error: no rank 7 in {target} (ranks: rank0, rank1; see `info`)"]
    per_rank, vc = json_docs(out)
    assert [(r["rank"], r["step"], r["first_divergence"], r["odd"]) for r in per_rank] == [
        ("rank0", 0, LOSS["root"], False), ("rank1", 0, LOSS["root"], False)]
    roots = [r for r in LOSS["roots"] if r.endswith("forward") or ".forward." in r]
    assert [r["roots"] for r in per_rank] == [roots, roots]     # names, not a count (§15)
    assert [(s["rank"], s["step"], s["mode"]) for s in vc["sets"]] == [("rank1", 0, "tensor")]
    with open(tmp_path / "out" / "compare_result_merged.csv", newline="") as f:
        merged = list(csv.reader(f))
    with open(tmp_path / "out" / "compare_result_rank1.csv", newline="") as f:
        single = list(csv.reader(f))
    # the merged CSV of the last command: rank1's rows, each behind its Rank and Step
    assert merged[0] == ["Rank", "Step"] + single[0] and merged[1:] == [["rank1", "0"] + row for row in single[1:]]
