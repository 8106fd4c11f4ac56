"""read_compare_csv / write_compare_csv: vendor layouts located by header, and round trips."""

from __future__ import annotations

import csv
import math
import random

import pytest

from precision_shell.errors import FormatError
from precision_shell.formats.compare_csv import (DEFAULT_METRICS, CompareRow, read_compare_csv,
                                                 rows_equal, write_compare_csv)

NEW_LAYOUT = """\
Index,OpType,NPUDump,DataType,Address,GroundTruth,DataType,TensorIndex,Shape,CosineSimilarity,MaxAbsoluteError,AccumulatedRelativeError,RelativeEuclideanDistance,KullbackLeiblerDivergence,StandardDeviation,MeanAbsoluteError,RootMeanSquareError,MaxRelativeError,MeanRelativeError,CompareFailReason
0,Conv2D,conv1/fused,float16,0x12c0000,"conv1/Conv2D,conv1/BiasAdd",float32,conv1/fused:input:0,"[1,3,8,8]",0.999998,0.001953,0.120000,0.000812,0.000001,"(0.125;1.002),(0.125;1.002)",0.000311,0.000412,0.031250,0.000218,
0,Conv2D,conv1/fused,float32,0x12c1000,"conv1/Conv2D,conv1/BiasAdd",float32,conv1/fused:output:0,[80],0.930949,2.000000,0.000000,0.392232,2.434700,"(0.000;0.000),(1.000;2.000)",0.500000,1.000000,0.000000,0.000000,
1,Add,add_ovf,float16,NaN,add_ovf,float32,add_ovf:output:0,"[2,2]",nan,inf,inf,inf,nan,"(inf;nan),(1.500;0.500)",inf,inf,inf,inf,
2,Data,data_1,NaN,NaN,*,NaN,NaN,NaN,NaN,NaN,NaN,NaN,NaN,NaN,NaN,NaN,NaN,NaN,There is no dump file for my output operator
"""


def write_text(tmp_path, text, name="result_20240125153144.csv"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_read_new_layout(tmp_path):
    rows = read_compare_csv(write_text(tmp_path, NEW_LAYOUT))
    assert [r.index for r in rows] == [0, 0, 1, 2]
    first, second, overflow, missing = rows
    assert (first.op_type, first.npu_op, first.golden_ops) == ("Conv2D", "conv1/fused",
                                                               ["conv1/Conv2D", "conv1/BiasAdd"])
    assert (first.tensor, first.kind, first.tensor_index, first.shape) == (
        "conv1/fused:input:0", "input", 0, (1, 3, 8, 8))
    assert list(first.metrics) == [m for m in DEFAULT_METRICS if m != "StandardDeviation"]
    assert first.metrics["CosineSimilarity"] == 0.999998 and first.metrics["MeanRelativeError"] == 0.000218
    assert first.std == "(0.125;1.002),(0.125;1.002)"
    assert first.extra == {"NPUDataType": "float16", "NPUAddress": "0x12c0000", "GroundTruthDataType": "float32"}
    assert (second.kind, second.shape, second.metrics["RelativeEuclideanDistance"]) == ("output", (80,), 0.392232)
    assert math.isnan(overflow.metrics["CosineSimilarity"]) and overflow.metrics["MaxAbsoluteError"] == math.inf
    assert (missing.golden_ops, missing.tensor, missing.kind, missing.tensor_index, missing.shape) == (
        [], "NaN", "", -1, None)
    assert all(math.isnan(v) for v in missing.metrics.values())
    assert missing.fail_reason == "There is no dump file for my output operator"


def test_read_old_layout_and_optional_columns(tmp_path):
    old = ("Index,LeftOp,RightOp,TensorIndex,CosineSimilarity,MaxAbsoluteError,AccumulatedRelativeError,"
           "RelativeEuclideanDistance,KullbackLeiblerDivergence,StandardDeviation\n"
           "3,relu:0,relu,relu:output:0,0.970000,0.5,1.25,0.1,0.002,\"(0.1;0.2),(0.1;0.3)\"\n")
    (row,) = read_compare_csv(write_text(tmp_path, old))
    assert (row.index, row.op_type, row.npu_op, row.golden_ops, row.kind, row.tensor_index) == (
        3, "", "relu:0", ["relu"], "output", 0)
    assert row.metrics == {"CosineSimilarity": 0.97, "MaxAbsoluteError": 0.5,
                           "AccumulatedRelativeError": 1.25, "RelativeEuclideanDistance": 0.1,
                           "KullbackLeiblerDivergence": 0.002}
    assert row.std == "(0.1;0.2),(0.1;0.3)" and row.shape is None and row.fail_reason == ""
    full = ("Index,OpSequence,OpType,NPUDump,DataType,Address,GroundTruth,DataType,Address,TensorIndex,"
            "Shape,OverFlow,CosineSimilarity,MyCustomAlg,CompareFailReason\n"
            "5,12,MatMul,mm,float16,0x1,mm_tf,float32,0x2,mm:output:1,\"[4, 4]\",YES,0.5,,reason\n")
    (row,) = read_compare_csv(write_text(tmp_path, full))
    assert row.extra == {"OpSequence": "12", "NPUDataType": "float16", "NPUAddress": "0x1",
                         "GroundTruthDataType": "float32", "GroundTruthAddress": "0x2", "OverFlow": "YES"}
    assert row.metrics == {"CosineSimilarity": 0.5, "MyCustomAlg": None}
    assert (row.tensor_index, row.shape, row.std) == (1, (4, 4), None)


def random_rows(seed, count=40):
    rnd = random.Random(seed)
    rows = []
    for index in range(count):
        op = f"net/layer_{index}/op{'ä' if index % 7 == 0 else ''}"
        for kind in ("input", "output"):
            metrics = {m: rnd.choice([round(rnd.uniform(-5, 5), 6), math.nan, math.inf, -math.inf])
                       for m in DEFAULT_METRICS if m != "StandardDeviation"}
            rows.append(CompareRow(
                index=index, op_type=rnd.choice(["Add", "Conv2D", "MatMulV2"]), npu_op=op,
                golden_ops=rnd.choice([[], [op], [f"{op}_a", f"{op}_b"]]), tensor=f"{op}:{kind}:{index % 3}",
                kind=kind, tensor_index=index % 3,
                shape=rnd.choice([None, (), (index + 1,), (1, 3, 8, index + 2)]), metrics=metrics,
                std=rnd.choice([None, "(0.125;1.002),(0.130;0.998)"]),
                fail_reason=rnd.choice(["", "shape mismatch, cannot compare", 'quote " inside']),
                extra={"NPUDataType": "float16", "NPUAddress": "NaN", "GroundTruthDataType": "float32"}))
    return rows


@pytest.mark.parametrize("options", [{}, {"golden_address": True, "op_sequence": True, "overflow": True},
                                     {"npu_address": False}])
def test_round_trip(tmp_path, options):
    rows = random_rows(len(options))
    for row in rows:
        row.extra.update({"GroundTruthAddress": "0x9", "OpSequence": "3", "OverFlow": "NO"})
        if not options.get("golden_address"):
            del row.extra["GroundTruthAddress"]
        if not options.get("op_sequence"):
            del row.extra["OpSequence"], row.extra["OverFlow"]
        if options.get("npu_address") is False:
            del row.extra["NPUAddress"]
    path = tmp_path / "out.csv"
    write_compare_csv(path, rows, **options)
    back = read_compare_csv(path)
    assert len(back) == len(rows)
    for original, copy in zip(rows, back):
        assert rows_equal(original, copy), (original, copy)


def test_written_layout_is_the_vendor_one(tmp_path):
    rows = random_rows(3, count=2)
    rows[0].metrics["CosineSimilarity"] = 0.12345678
    rows[0].metrics["MaxAbsoluteError"] = None
    rows[0].metrics["MeanAbsoluteError"] = math.nan
    path = tmp_path / "out.csv"
    write_compare_csv(path, rows)
    header, first = list(csv.reader(path.open(newline="")))[:2]
    assert header == ["Index", "OpType", "NPUDump", "DataType", "Address", "GroundTruth", "DataType",
                      "TensorIndex", "Shape", *DEFAULT_METRICS, "CompareFailReason"]
    cell = dict(zip(header, first))  # later duplicate names win; fine for the checks below
    assert cell["CosineSimilarity"] == "0.123457" and cell["MaxAbsoluteError"] == "NaN"  # None
    assert cell["MeanAbsoluteError"] == "nan"
    assert cell["GroundTruth"] == (",".join(rows[0].golden_ops) or "*")
    assert cell["Shape"] == ("NaN" if rows[0].shape is None else "[" + ",".join(map(str, rows[0].shape)) + "]")
    assert " " not in cell["Shape"]


@pytest.mark.parametrize("text,words", [
    ("", "empty"),
    ("a,b,c\n1,2,3\n", "no Index/TensorIndex"),
    ("Index,TensorIndex,CosineSimilarity\n1,op:output:0\n", "line 2: 2 cells"),
    ("Index,TensorIndex,CosineSimilarity\nx,op:output:0,1.0\n", "line 2: Index 'x'"),
    ("Index,TensorIndex,StandardDeviation\n1,op:output:0,(1;2),(3;4)\n", "line 2: 4 cells"),
])
def test_bad_csv(tmp_path, text, words):
    path = write_text(tmp_path, text)
    with pytest.raises(FormatError) as err:
        read_compare_csv(path)
    assert str(err.value).startswith(str(path)) and words in str(err.value)


def test_unreadable(tmp_path):
    with pytest.raises(FormatError, match="cannot read"):
        read_compare_csv(tmp_path / "absent.csv")
    binary = tmp_path / "b.csv"
    binary.write_bytes(b"Index,TensorIndex\n\xff\xfe,\x00\n")
    with pytest.raises(FormatError):
        read_compare_csv(binary)
    with pytest.raises(FormatError, match="cannot write"):
        write_compare_csv(tmp_path / "no" / "dir.csv", [])
