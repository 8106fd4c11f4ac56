"""Bad MindSpore graph-mode dumps (issue 26): each problem is one line naming the file or folder
and the reason, and the rest opens and analyses. Each test damages a copy of the committed sample
under tmp_path (the sample itself is never touched)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from conftest import json_docs, run_cli

SAMPLE = Path(__file__).parents[2] / "sample_data" / "mindspore_graph"
TRUTH = json.loads((SAMPLE / "manifest.json").read_text())["iterations"]["0"]
SOFTMAX = TRUTH["precision"]["first_root"]


def copy(tmp_path: Path, name: str) -> Path:
    dest = tmp_path / name
    shutil.copytree(SAMPLE / name, dest)
    return dest


def pshell(capsys, tmp_path, target: Path, golden: Path | None, *commands: str):
    argv = [target] + (["--golden", golden] if golden else []) + ["-o", tmp_path / "out", "--format", "json"]
    for c in commands:
        argv += ["-c", c]
    return run_cli(capsys, *argv)


def lines_naming(err: str, text: str) -> list[str]:
    return [line for line in err.splitlines() if text in line]


def test_no_execution_order_orders_by_timestamps_said_once(capsys, tmp_path):
    target = copy(tmp_path, "target_fp16")
    shutil.rmtree(target / "rank_0" / "execution_order")
    rc, out, err = pshell(capsys, tmp_path, target, SAMPLE / "golden_fp32", "vcs -l 0")
    said = lines_naming(err, "execution_order")
    assert len(said) == 1 and "timestamps" in said[0]     # once for both iterations
    (rows,) = json_docs(out)
    assert [r["op"] for r in rows if r["first"]] == [SOFTMAX]
    assert [r["op"] for r in rows if r["role"] == "propagated"] == TRUTH["precision"]["propagated"]
    assert rc == 1         # the start-up problem is reported in the exit code, the work still done


def test_no_graphs_means_no_edges_said_once_and_the_rest_opens(capsys, tmp_path):
    target = copy(tmp_path, "overflow_fp16")
    shutil.rmtree(target / "rank_0" / "graphs")
    rc, out, err = pshell(capsys, tmp_path, target, None, "ac -l 0", "li Softmax-op0")
    said = lines_naming(err, "graphs")
    assert len(said) == 1 and "no dataflow edges" in said[0]
    ac, li = json_docs(out)
    assert [r["op"] for r in ac if r["first"]] == [TRUTH["overflow"]["first_producer"]]
    assert li == []     # no graph, no edges; the kernel itself is still found


def test_file_names_that_match_no_graph_op_are_one_line_and_kept(capsys, tmp_path):
    target = copy(tmp_path, "target_fp16")
    folder = target / "rank_0" / "Block" / "0" / "0"
    src = next(folder.glob("Softmax.*.output.0.*.npy"))
    odd = folder / src.name.replace("Softmax.Default_", "Softmax.Elsewhere_").replace("Softmax-op0", "Softmax-op9")
    shutil.copy(src, odd)
    (folder / "notes.txt").write_text("not a dump file")
    rc, out, err = pshell(capsys, tmp_path, target, SAMPLE / "golden_fp32", "ls -n Elsewhere", "vcs -l 0")
    assert len(lines_naming(err, "match no execution-order op")) == 1
    assert len(lines_naming(err, "not named as kernel dumps")) == 1
    ls, vcs = json_docs(out)
    # the extra Softmax of the same type was paired with no graph name (all were taken by name)
    assert [r["op"] for r in ls] == [odd.name.split(".")[1]]
    assert [r["op"] for r in vcs if r["first"]] == [SOFTMAX]


def test_a_truncated_npy_is_one_line_and_the_compare_goes_on(capsys, tmp_path):
    target = copy(tmp_path, "target_fp16")
    folder = target / "rank_0" / "Block" / "0" / "0"
    victim = next(folder.glob("BiasAdd.*fc2-Dense_BiasAdd-op0.*.output.0.*.npy"))
    victim.write_bytes(victim.read_bytes()[:100])
    rc, out, err = pshell(capsys, tmp_path, target, SAMPLE / "golden_fp32", "vc")
    assert len(lines_naming(err, victim.name)) == 1
    (doc,) = json_docs(out)
    assert rc == 0 and doc["compared"] > 0
    # everything else compared: the root still fails
    rc, out, err = pshell(capsys, tmp_path, target, SAMPLE / "golden_fp32", "vcs -l 0")
    (rows,) = json_docs(out)
    assert [r["op"] for r in rows if r["first"]] == [SOFTMAX]


def test_mixed_iterations_are_one_line(capsys, tmp_path):
    target = copy(tmp_path, "target_fp16")
    golden = copy(tmp_path, "golden_fp32")
    shutil.rmtree(golden / "rank_0" / "Block" / "0" / "1")
    (target / "rank_0" / "Block" / "0" / "latest").mkdir()
    rc, out, err = pshell(capsys, tmp_path, target, golden, "use --step 1", "vcs")
    assert len(lines_naming(err, "not an iteration folder")) == 1
    said = lines_naming(err, "no iteration for")
    assert len(said) == 1 and "rank_0 iteration 1" in said[0]
    assert "no golden rank for step 1" in err        # vcs on the unpaired iteration: one line
    rc, out, err = pshell(capsys, tmp_path, target, golden, "vcs -l 0")
    (rows,) = json_docs(out)
    assert [r["op"] for r in rows if r["first"]] == [SOFTMAX]


def test_several_graphs_per_rank_open_the_main_one_said_once(capsys, tmp_path):
    target = copy(tmp_path, "overflow_fp16")
    other = target / "rank_0" / "Block" / "7" / "0"
    other.mkdir(parents=True)
    src = next((target / "rank_0" / "Block" / "0" / "0").glob("Parameter.fc1_bias.*"))
    shutil.copy(src, other / src.name)
    rc, out, err = pshell(capsys, tmp_path, target, None, "info", "ac -l 0")
    said = lines_naming(err, "2 graphs")
    assert len(said) == 1 and "graph 0 opened" in said[0] and "graph 7 not" in said[0]
    info, ac = json_docs(out)
    assert info["target"]["graphs"] == [0]
    assert [r["op"] for r in ac if r["first"]] == [TRUTH["overflow"]["first_producer"]]


def test_a_pb_of_another_kind_in_graphs_is_one_line(capsys, tmp_path):
    target = copy(tmp_path, "overflow_fp16")
    pb = target / "rank_0" / "graphs" / "ms_output_trace_code_graph_0.pb"
    pb.write_bytes(b"\x0a\x03abc" * 10)       # a protobuf, but no ANF graph
    rc, out, err = pshell(capsys, tmp_path, target, None, "ac -l 0")
    said = lines_naming(err, pb.name)
    assert len(said) == 1 and "not a MindSpore ANF IR graph" in said[0]
    (rows,) = json_docs(out)
    assert [r["op"] for r in rows if r["first"]] == [TRUTH["overflow"]["first_producer"]]


def test_names_from_files_are_printed_with_control_characters_escaped(capsys, tmp_path):
    target = copy(tmp_path, "overflow_fp16")
    folder = target / "rank_0" / "Block" / "0" / "0"
    (folder / "evil\nname\x1b[31m.npy").write_bytes(b"x")
    rc, out, err = pshell(capsys, tmp_path, target, None, "info")
    (line,) = lines_naming(err, "not named as kernel dumps")
    assert "\x1b" not in err and "\\n" in line


def test_the_sample_is_untouched_by_a_session(capsys, tmp_path):
    before = {p: p.stat().st_mtime_ns for p in SAMPLE.rglob("*") if p.is_file()}
    pshell(capsys, tmp_path, SAMPLE / "target_fp16", SAMPLE / "golden_fp32", "vc", "vcs", "export vcs")
    assert {p: p.stat().st_mtime_ns for p in SAMPLE.rglob("*") if p.is_file()} == before
    assert np.load(next((SAMPLE / "target_fp16/rank_0/Block/0/0").glob("Softmax.*output.0*"))).dtype == np.float16


def test_cann_binary_kernel_dumps_in_the_same_folders_are_read(capsys, tmp_path):
    """On Ascend without ``file_format: npy`` a kernel is one CANN binary dump holding all its
    tensors: the Softmax's three .npy files rewritten as one such file give the same verdict."""
    from precision_shell.formats.dtypes import DT_FLOAT16, DT_INT64, FORMAT_ND
    from precision_shell.formats.dump_file import DumpTensor, write_dump

    target = copy(tmp_path, "target_fp16")
    folder = target / "rank_0" / "Block" / "0" / "0"
    files = sorted(folder.glob("Softmax.*.npy"))
    arrays = {p.name.split(".")[5] + "." + p.name.split(".")[6]: np.load(p) for p in files}
    head = files[0].name.split(".")
    for p in files:
        p.unlink()
    write_dump(folder / ".".join(head[:5]), SOFTMAX,
               [DumpTensor(arrays["input.0"], DT_FLOAT16, FORMAT_ND), DumpTensor(arrays["input.1"], DT_INT64, FORMAT_ND)],
               [DumpTensor(arrays["output.0"], DT_FLOAT16, FORMAT_ND)])
    rc, out, err = pshell(capsys, tmp_path, target, SAMPLE / "golden_fp32", "vcs -l 0", "pt Softmax-op0:0",
                          "ni Softmax-op0")
    assert rc == 0, err
    vcs, pt, ni = json_docs(out)
    first = next(r for r in vcs if r["first"])
    assert first["op"] == SOFTMAX
    assert abs(first["cosine"] - TRUTH["precision"]["cosines"][f"{SOFTMAX}:output.0"]) < 1e-6
    assert pt["stats"]["max"] == float(arrays["output.0"].max())
    assert [s["value"] for s in ni["scalar_inputs"]] == [[-1]]       # the axis: still a graph constant


def test_an_execution_order_naming_none_of_the_files_is_ignored_in_one_line(capsys, tmp_path):
    target = copy(tmp_path, "overflow_fp16")
    csv_path = target / "rank_0" / "execution_order" / "ms_execution_order_graph_0.csv"
    csv_path.write_bytes(b'NodeExecutionOrder-FullNameWithScope\nDefault/Other-op0\n\xff\x00,"open\n')
    rc, out, err = pshell(capsys, tmp_path, target, None, "ac -l 0")
    said = lines_naming(err, csv_path.name)
    assert len(said) == 1 and "names none of" in said[0]
    (rows,) = json_docs(out)        # named from the graph, ordered by the files' timestamps
    assert [r["op"] for r in rows if r["first"]] == [TRUTH["overflow"]["first_producer"]]
