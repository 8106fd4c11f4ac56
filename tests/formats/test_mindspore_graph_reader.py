"""The MindSpore graph-mode reader (formats/mindspore_graph) on the committed sample and on names
made here: file names read from both ends, the ANF graph from our own proto against the .ir text
MindSpore wrote beside it, the execution order, the renumbering quirk."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import numpy as np

from precision_shell.formats.mindspore_graph.anf_graph import load_anf_graph, read_ir_sources
from precision_shell.formats.mindspore_graph.dump import read_execution_order, read_iteration
from precision_shell.formats.mindspore_graph.layout import find_iterations, is_mindspore_graph_dump
from precision_shell.formats.mindspore_graph.names import mangled, numpy_dtype_name, parse_file_name

SAMPLE = Path(__file__).parents[2] / "sample_data" / "mindspore_graph"
RANK = SAMPLE / "target_fp16" / "rank_0"
GRAPH = RANK / "graphs" / "ms_output_trace_code_graph_0"


def test_file_names_are_read_from_both_ends():
    f = parse_file_name("Mul.Expand__Muls_Mul-op1.3.2.1795747192543243.output.0.DefaultFormat.Float16.npy")
    assert (f.op_type, f.op_name, f.task, f.stream, f.io, f.slot, f.format, f.dtype) == (
        "Mul", "Expand__Muls_Mul-op1", 3, 2, "output", 0, "DefaultFormat", "Float16")
    assert f.timestamp == 1795747192543243 and f.is_npy
    dotted = parse_file_name("Add.Default_net.v2_Add-op0.0.0.17.input.1.NCHW.BFloat16.npy")
    assert dotted.op_name == "Default_net.v2_Add-op0" and numpy_dtype_name(dotted.dtype) == "bfloat16"
    cann = parse_file_name("Conv2D.Default_conv1-Conv2d_Conv2D-op5.3.2.1700000000")
    assert (cann.op_name, cann.io, cann.is_npy) == ("Default_conv1-Conv2d_Conv2D-op5", None, False)
    for bad in ("notes.txt", "Mul.x.0.0.ts.output.0.F.Float16.npy", "Mul.x.0.0.1.sideways.0.F.Float16.npy",
                "1Mul.x.0.0.1.output.0.F.Float16.npy", "Mul.0.0.1.output.0.F.Float16.npy"):
        assert parse_file_name(bad) is None, bad


def test_every_sample_file_parses_and_its_dtype_is_the_arrays():
    folder = RANK / "Block" / "0" / "0"
    for path in folder.iterdir():
        f = parse_file_name(path.name)
        assert f is not None, path.name
        assert numpy_dtype_name(f.dtype) == np.load(path).dtype.name


def test_the_pb_holds_the_ir_texts_kernels_and_operands():
    graph = load_anf_graph(GRAPH.with_suffix(".pb"), GRAPH.with_suffix(".ir"))
    text = GRAPH.with_suffix(".ir").read_text()
    full_names = [n for n in re.findall(r"# Fullname with scope: \((.*)\)", text)
                  if "/Return-op" not in n]      # the .pb gives the graph's output instead
    assert sorted(graph.by_full_name) == sorted(full_names)
    params = re.findall(r"^%para\d+_(\S+): <", text, re.M)
    assert sorted(graph.parameters) == sorted(params)
    # operands of fc1's MatMul in the .ir: the input parameter, a Load of fc1.weight, two flags
    matmul = next(n for n in full_names if n.endswith("fc1-Dense/MatMul-op0"))
    sources = graph.data_inputs(matmul)
    assert [(s.kind, s.ref) for s in sources[:2]] == [("parameter", "inputs0"), ("parameter", "fc1.weight")]
    assert [graph.consts[s.ref].value for s in sources[2:]] == [False, True]
    # without the .ir, the .pb's own trace gives a forward kernel the same frames (the .ir adds
    # the forward node's candidates to a backward kernel's: it is read when present)
    pb_only = load_anf_graph(GRAPH.with_suffix(".pb"))
    ir = read_ir_sources(GRAPH.with_suffix(".ir"))
    order = read_execution_order(str(RANK / "execution_order" / "ms_execution_order_graph_0.csv"))
    forward = [n for n in order[:next(i for i, n in enumerate(order) if n.startswith("Gradients/"))]
               if n.startswith("Default/")]
    assert len(forward) > 8
    for name in forward:
        assert pb_only.source(name) == ir[name] != [], name


def test_execution_order_and_the_renumbered_casts():
    order = read_execution_order(str(RANK / "execution_order" / "ms_execution_order_graph_0.csv"))
    rows = [r[0] for r in csv.reader((RANK / "execution_order" / "ms_execution_order_graph_0.csv").open())]
    assert order == rows[1:]
    warnings: list[str] = []
    (it, _) = find_iterations(RANK.parent, warnings)
    dump = read_iteration(it)
    assert [k.full_name for k in dump.kernels] == order and dump.not_run == [] and warnings == []
    by_mangled = {mangled(n) for n in order}
    for k in dump.kernels:
        on_disk = {f.op_name for f in k.files}
        assert len(on_disk) == 1
        assert (k.matched == "name") == (on_disk == {mangled(k.full_name)})
        if k.matched == "renumbered":
            # same scope and type, another number; and no execution-order name spells it
            assert on_disk.pop().rsplit("-op", 1)[0] == mangled(k.full_name).rsplit("-op", 1)[0]
    assert sum(k.matched == "renumbered" for k in dump.kernels) == len(
        {f.name.split(".")[1] for f in Path(it.path).iterdir() if not f.name.startswith("Parameter.")} - by_mangled)


def test_the_tree_is_found_from_any_level():
    warnings: list[str] = []
    assert is_mindspore_graph_dump(SAMPLE / "target_fp16") and not is_mindspore_graph_dump(SAMPLE)
    assert not is_mindspore_graph_dump(SAMPLE.parent / "framework" / "golden_fp32")
    for level in (SAMPLE / "target_fp16", RANK, RANK / "Block", RANK / "Block" / "0"):
        assert [it.iteration for it in find_iterations(level, warnings)] == [0, 1]
    assert [it.iteration for it in find_iterations(RANK / "Block" / "0" / "1", warnings)] == [1]
    assert warnings == []
