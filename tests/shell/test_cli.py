"""Batch mode end to end on generated workspaces: info, decode, scripts, exit codes, bad input."""

from __future__ import annotations

import io
import shutil
import sys

import numpy as np
import pytest
from google.protobuf import text_format

from precision_shell.formats.protoload import ge_ir_pb
from precision_shell.samples.network import run_network
from tests.conftest import json_docs, run_cli


def _graph_op_count(ws) -> int:
    """Independent count: the reference protobuf text parser over the Build graph file."""
    path = next((ws / "precision_data" / "npu" / "debug_0" / "graph").glob("ge_proto_*_Build.txt"))
    model = text_format.Parse(path.read_text(), ge_ir_pb().ModelDef(), allow_unknown_field=True)
    return sum(len(g.op) for g in model.graph)


def test_info_json_keys_and_counts(sample_ws, capsys):
    ws, manifest = sample_ws
    rc, out, err = run_cli(capsys, ws, "-c", "info", "--format", "json")
    assert rc == 0, err
    (doc,) = json_docs(out)
    for key in ("graphs", "ops", "npu_dump_files", "golden_tensors", "overflow_records",
                "devices", "steps", "missing"):
        assert key in doc
    assert doc["ops"] == _graph_op_count(ws)
    assert doc["graphs"][0]["name"] == manifest["graph_name"]
    fused = [op for op in manifest["ops"] if len(op["original_ops"]) > 1 or op["passes"]]
    assert doc["graphs"][0]["fused_ops"] == len(fused)
    assert doc["npu_dump_files"] == len([op for op in manifest["ops"] if op.get("dump_file")])
    assert doc["golden_tensors"] == len(list((ws / "precision_data/tf/dump").glob("*.npy")))
    assert doc["overflow_records"] == 1
    assert doc["devices"] == ["0"] and doc["missing"] == []


def test_info_text_summary(sample_ws, capsys):
    ws, manifest = sample_ws
    rc, out, _ = run_cli(capsys, ws, "-c", "info")
    assert rc == 0
    assert out.startswith("precision-shell ")
    assert manifest["graph_name"] in out and "dump files" in out and "golden" in out


def test_decode_writes_the_generators_logical_arrays(sample_ws, capsys, tmp_path):
    ws, manifest = sample_ws
    net = run_network(seed=0)
    formats_seen, dtypes_seen = set(), set()
    for op in net.ops:
        entry = next((o for o in manifest["ops"] if o["name"] == op.name), None)
        if entry is None or not entry.get("dump_file"):
            continue
        out_dir = tmp_path / op.name.replace("/", "_")
        rc, out, err = run_cli(capsys, ws, "-c", f"dc {op.name} -o {out_dir}")
        assert rc == 0, err
        dump_name = (ws / entry["dump_file"]).name
        for kind, tensors in (("input", [i.tensor for i in op.inputs]), ("output", op.outputs)):
            for i, tensor in enumerate(tensors):
                got = np.load(out_dir / f"{dump_name}.{kind}.{i}.npy")
                want = np.asarray(tensor.npu)
                if want.dtype.name == "bfloat16":
                    want = want.astype(np.float32)
                assert got.dtype == want.dtype, (op.name, kind, i)
                np.testing.assert_array_equal(got, want.reshape(got.shape))
                assert got.shape == tuple(tensor.npu.shape)
                formats_seen.add(tensor.format)
                dtypes_seen.add(str(tensor.npu.dtype))
    assert {"NC1HWC0", "FRACTAL_Z", "FRACTAL_NZ"} <= formats_seen
    assert {"float16", "float32", "bfloat16"} <= dtypes_seen


def test_decode_device_layout_keeps_device_shape(sample_ws, capsys, tmp_path):
    ws, manifest = sample_ws
    op = next(o for o in manifest["ops"] if o.get("dump_file") and
              any(t["format"] == "NC1HWC0" for t in o["outputs"]))
    rc, out, err = run_cli(capsys, ws, "-c", f"dc {op['name']} -f device -o {tmp_path}", "--format", "json")
    assert rc == 0, err
    rows = json_docs(out)[0]
    out0 = next(r for r in rows if r["tensor"] == "output:0")
    assert tuple(out0["shape"]) == tuple(op["outputs"][0]["device_shape"])


def test_commands_from_script_and_stdin(sample_ws, capsys, tmp_path, monkeypatch):
    ws, _ = sample_ws
    script = tmp_path / "s.txt"
    script.write_text("# comment\ninfo --format json\nhelp\n")
    rc, out, err = run_cli(capsys, ws, "-f", script)
    assert rc == 0, err
    assert "decode" in out and "graphs" in out
    monkeypatch.setattr(sys, "stdin", io.StringIO("use --device 0; quit; info\n"))
    rc, out, err = run_cli(capsys, ws)
    assert rc == 0, err
    assert "active:" in out and "precision-shell" not in out  # quit stopped before info


def test_redirect_writes_plain_file(sample_ws, capsys, tmp_path):
    ws, _ = sample_ws
    target = tmp_path / "help.txt"
    rc, out, err = run_cli(capsys, ws, "-c", f"help > {target}")
    assert rc == 0, err
    assert out == "" and "decode" in target.read_text() and "\x1b[" not in target.read_text()


def test_exit_codes_usage_and_failure(sample_ws, capsys):
    ws, _ = sample_ws
    rc, _, err = run_cli(capsys, ws, "-c", "info --bogus")
    assert rc == 2 and err.startswith("error: info: unrecognized arguments")
    rc, _, err = run_cli(capsys, ws, "-c", "dc no/such/op")
    assert rc == 1 and "no op matches 'no/such/op'" in err
    rc, _, err = run_cli(capsys, ws, "-c", "nosuchcmd")
    assert rc == 2 and "unknown command" in err


def test_wrong_workspace_path(capsys, tmp_path):
    rc, _, err = run_cli(capsys, tmp_path / "nope", "-c", "info")
    assert rc == 1 and err.strip() == f"error: {tmp_path / 'nope'}: workspace does not exist"


def test_refuses_to_write_into_dump_folders(sample_ws, capsys):
    ws, manifest = sample_ws
    dump_dir = (ws / manifest["ops"][0]["dump_file"]).parent if manifest["ops"][0].get("dump_file") \
        else next((ws / o["dump_file"]).parent for o in manifest["ops"] if o.get("dump_file"))
    before = sorted(p.name for p in dump_dir.iterdir())
    op = next(o for o in manifest["ops"] if o.get("dump_file"))
    rc, _, err = run_cli(capsys, ws, "-c", f"dc {op['name']} -o {dump_dir}")
    assert rc == 1 and "refusing to write inside the input folder" in err
    assert sorted(p.name for p in dump_dir.iterdir()) == before


def _copy(ws, tmp_path):
    dst = tmp_path / "ws"
    shutil.copytree(ws / "precision_data", dst / "precision_data")
    return dst


def test_corrupt_graph_reports_one_line_and_keeps_the_rest(sample_ws, capsys, tmp_path):
    ws = _copy(sample_ws[0], tmp_path)
    graph = next((ws / "precision_data/npu/debug_0/graph").glob("ge_proto_*_Build.txt"))
    graph.write_text(graph.read_text()[:5000] + "\n  op { name: \"x\" type: }\n")
    rc, out, err = run_cli(capsys, ws, "-c", "info", "--format", "json")
    assert rc == 1
    (line,) = [l for l in err.splitlines() if l.startswith("error:")]
    assert str(graph) in line
    doc = json_docs(out)[0]
    assert doc["ops"] == 0 and doc["npu_dump_files"] > 0 and doc["golden_tensors"] > 0


def test_truncated_dump_is_a_clear_error(sample_ws, capsys, tmp_path):
    ws = _copy(sample_ws[0], tmp_path)
    op = next(o for o in sample_ws[1]["ops"] if o.get("dump_file"))
    dump = ws / op["dump_file"]
    dump.write_bytes(dump.read_bytes()[:40])
    rc, out, err = run_cli(capsys, ws, "-c", f"dc {op['name']} -o {tmp_path / 'o'}")
    assert rc == 1
    assert err.startswith(f"error: {dump}: ") and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("part,missing_word", [("tf", "golden"), ("fusion", "fusion"), ("overflow", "overflow")])
def test_missing_parts_are_listed(sample_ws, capsys, tmp_path, part, missing_word):
    ws = _copy(sample_ws[0], tmp_path)
    shutil.rmtree(ws / "precision_data" / part)
    rc, out, err = run_cli(capsys, ws, "-c", "info", "--format", "json")
    assert rc == 0, err
    assert any(m.startswith(missing_word) for m in json_docs(out)[0]["missing"])


def test_raw_dump_folder_and_overrides(sample_ws, capsys):
    ws, manifest = sample_ws
    dump_dir = next((ws / o["dump_file"]).parent for o in manifest["ops"] if o.get("dump_file"))
    graph = next((ws / "precision_data/npu/debug_0/graph").glob("*_Build.txt"))
    rc, out, err = run_cli(capsys, dump_dir, "--graph", graph, "--golden", ws / "precision_data/tf/dump",
                           "-c", "info", "--format", "json", "-o", ws / "out")
    assert rc == 0, err
    doc = json_docs(out)[0]
    assert doc["npu_dump_files"] == len([o for o in manifest["ops"] if o.get("dump_file")])
    assert doc["golden_tensors"] > 0 and doc["ops"] > 0


def test_graph_input_naming_a_missing_op_is_one_line_and_the_edge_is_dropped(sample_ws, capsys, tmp_path):
    ws = _copy(sample_ws[0], tmp_path)
    graph = next((ws / "precision_data/npu/debug_0/graph").glob("ge_proto_*_Build.txt"))
    text = graph.read_text()
    first_input = text.index('    input: "') + len('    input: "')  # an op's input, not the graph's
    graph.write_text(text[:first_input] + "no_such_producer" + text[text.index(":", first_input):])
    rc, out, err = run_cli(capsys, ws, "-c", "info", "--format", "json")
    assert rc == 1
    errors = [l for l in err.splitlines() if l.startswith("error:")]
    assert len(errors) == 1 and str(graph) in errors[0] and "no_such_producer" in errors[0]
    assert json_docs(out)[0]["ops"] == _graph_op_count(ws)


def test_raw_dump_folder_as_current_folder_writes_beside_it(sample_ws, capsys, tmp_path, monkeypatch):
    ws, manifest = sample_ws
    raw = tmp_path / "raw"
    src = next((ws / o["dump_file"]).parent for o in manifest["ops"] if o.get("dump_file"))
    shutil.copytree(src, raw)
    before = sorted(p.name for p in raw.iterdir())
    op = next(o for o in manifest["ops"] if o.get("dump_file"))
    monkeypatch.chdir(raw)
    rc, out, err = run_cli(capsys, ".", "-c", f"dc {(raw / (ws / op['dump_file']).name)}", "--format", "json")
    assert rc == 0, err
    written = json_docs(out)[0][0]["file"]
    assert written.startswith(str(tmp_path / "raw_pshell"))
    assert sorted(p.name for p in raw.iterdir()) == before


def test_start_up_imports_neither_numpy_nor_networkx(tmp_path):
    """A prompt needs neither: they load with the first command that reads tensors or walks the
    whole graph (numpy alone costs ~0.1-0.2 s of every start)."""
    code = ("import sys\n"
            "import precision_shell.cli\n"
            "from precision_shell.model.session import Session\n"
            "s = Session.open(sys.argv[1], output=sys.argv[2])\n"
            "assert s.graph is not None and s.load_errors == [], s.load_errors\n"
            "print(len(s.graph.ops), s.dumps.op_file_count, s.dumps.total_bytes, len(s.golden))\n"
            "print(sorted(m for m in ('numpy', 'networkx') if m in sys.modules))\n")
    import subprocess
    from pathlib import Path

    sample = Path(__file__).resolve().parents[2] / "sample_data" / "convnet"
    out = subprocess.run([sys.executable, "-c", code, str(sample), str(tmp_path / "out")],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    ops, dumps, nbytes, golden = map(int, out[0].split())
    assert ops > 30 and dumps > 10 and nbytes > 0 and golden > 10
    assert out[1] == "[]"
