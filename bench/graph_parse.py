"""Benchmark: parse a 20k-op GE graph text (~50 MB) with the fast parser vs text_format.

    python bench/graph_parse.py [--ops 20000] [--ref-ops 2000] [--repeat 3]

The graph is realistic in shape and size per op (~2.5 KB: fused-op attrs, kernel names, input
and output descs with origin attrs), built as ModelDef messages for one block of layers, printed
once with text_format (GE's layout: one field per line, 2-space indent) and replicated with
renamed layers. text_format is timed on a --ref-ops subset and extrapolated linearly (it is
linear in size), since a full run would take minutes.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from google.protobuf import text_format  # noqa: E402

from precision_shell.formats.graph.text import parse_graph_text, parse_graph_text_reference  # noqa: E402
from precision_shell.formats.protoload import ge_ir_pb  # noqa: E402
from precision_shell.model.op_graph import OpGraph  # noqa: E402
from common import median_time as _median_time  # noqa: E402

_LAYER = "@LAYER@"  # placeholder replaced per block copy; only ever appears inside quoted names
_TYPES = ["MatMulV2", "Add", "LayerNorm", "Cast", "TransData", "Mul", "GeluV2", "BatchMatMul",
          "SoftmaxV2", "Reshape", "ReduceMeanD", "RealDiv"]


_SHAPES = [([8, 8, 16, 16], "FRACTAL_NZ", [128, 128]), ([32, 1, 8, 8, 16], "NC1HWC0", [32, 8, 8, 16]),
           ([4096], "ND", [4096]), ([16, 4, 16, 16], "FRACTAL_NZ", [64, 256])]
_OFFSET = 987650000  # sentinel: '98765' is replaced per block copy so memory offsets stay unique


def _desc(pb, desc, name, shape_kind, origin_name=None, index=0):
    shape, layout, origin_shape = _SHAPES[shape_kind]
    desc.name, desc.dtype, desc.layout = name, pb.DataType.Value("DT_FLOAT16"), layout
    desc.shape.dim.extend(shape)
    desc.attr["origin_format"].s = b"ND" if len(origin_shape) != 4 else b"NHWC"
    desc.attr["origin_shape"].list.i.extend(origin_shape)
    desc.attr["origin_shape"].list.val_type = 2
    if origin_name:
        desc.attr["_datadump_origin_name"].s = origin_name.encode()
        desc.attr["_datadump_origin_output_index"].i = index
    desc.has_out_attr, desc.size, desc.real_dim_cnt = True, 2 * 4096 + 32, len(shape)


def _block(pb, n_ops: int):
    """One block of n_ops chained ops named '@LAYER@/...' (first op reads the previous block)."""
    graph = pb.GraphDef()
    for i in range(n_ops):
        op = graph.op.add()
        name = f"{_LAYER}/sub_{i % 7}/op_{i}"
        op.name, op.type, op.id, op.stream_id = name, _TYPES[i % len(_TYPES)], i, i % 2
        if i:
            op.input.append(f"{_LAYER}/sub_{(i - 1) % 7}/op_{i - 1}:0")
        op.input.append(f"{_LAYER}/sub_{(i - 3) % 7}/op_{i - 3}:0" if i > 3 else "")
        if i % 5 == 0 and i > 5:
            op.input.append(f"{_LAYER}/sub_{(i - 5) % 7}/op_{i - 5}:-1")
        originals = [f"{_LAYER}/tf/{name.rsplit('/', 1)[-1]}_{k}" for k in range(1 + (i % 3 == 0))]
        attrs = op.attr
        attrs["_datadump_original_op_names"].list.s.extend(s.encode() for s in originals)
        attrs["_datadump_original_op_names"].list.val_type = 1
        attrs["_ge_attr_op_kernel_lib_name"].s = b"AIcoreEngine"
        attrs[f"{name}_kernelname"].s = f"te_{op.type.lower()}_{_LAYER}_{i}_a1b2c3d4e5".encode()
        attrs["tvm_blockdim"].i = 1 + i % 32
        attrs["_is_unknown_shape"].b = False
        attrs["_input_name_key"].list.s.extend([b"x1", b"x2"])
        attrs["_input_name_value"].list.i.extend([0, 1])
        if len(originals) > 1:
            attrs["pass_name"].list.s.append(b"MatMulBiasAddFusionPass")
        op.input_name.extend(["x1", "x2"])
        op.input_i.extend([_OFFSET + 1024 * i, _OFFSET + 1024 * i + 512])
        op.output_i.append(_OFFSET + 1024 * i + 768)
        for k in range(2):
            _desc(pb, op.input_desc.add(), f"x{k + 1}", (i + k) % len(_SHAPES))
        _desc(pb, op.output_desc.add(), "y", i % len(_SHAPES), originals[0], 0)
    return graph


def make_graph_text(path: Path, n_ops: int, block: int = 200) -> int:
    """Write a GE-style ModelDef text with n_ops ops (a multiple of ``block``); returns bytes."""
    pb = ge_ir_pb()
    body = text_format.MessageToString(_block(pb, block), indent=2)
    ops_text = body[: body.index("  attr {")] if "\n  attr {" in body else body  # ops only
    with path.open("w") as out:
        out.write('name: "ge_default_bench"\nversion: 1\ngraph {\n  name: "ge_default_bench_1"\n')
        for layer in range(n_ops // block):
            out.write(ops_text.replace(_LAYER, f"model/layer_{layer}").replace(
                str(_OFFSET // 10000), str(10000 + layer)))
        out.write('  attr {\n    key: "_session_graph_id"\n    value {\n      s: "0_1"\n    }\n  }\n}\n')
    return path.stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=20000)
    parser.add_argument("--ref-ops", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        big, small = Path(tmp, "ge_proto_00000001_Build.txt"), Path(tmp, "ge_proto_00000002_Build.txt")
        size = make_graph_text(big, args.ops)
        small_size = make_graph_text(small, args.ref_ops)
        fast = _median_time(lambda: parse_graph_text(big), args.repeat)
        model = parse_graph_text(big)
        assert sum(len(g.op) for g in model.graph) == args.ops
        fast_small = _median_time(lambda: parse_graph_text(small), args.repeat)
        ref_small = _median_time(lambda: parse_graph_text_reference(small), args.repeat)
        assert parse_graph_text(small) == parse_graph_text_reference(small)
        mb, small_mb = size / 1e6, small_size / 1e6
        print(f"{args.ops} ops, {mb:.1f} MB: parse_graph_text median of {args.repeat}: "
              f"{fast:.2f} s ({mb / fast:.1f} MB/s)")
        print(f"{args.ref_ops} ops, {small_mb:.1f} MB: parse_graph_text {fast_small:.3f} s "
              f"({small_mb / fast_small:.1f} MB/s); text_format reference {ref_small:.2f} s "
              f"({small_mb / ref_small:.2f} MB/s); equal messages: yes")
        print(f"reference extrapolated to {args.ops} ops: {ref_small * size / small_size:.1f} s "
              f"-> speed-up x{ref_small * size / small_size / fast:.1f}")
        build = _median_time(lambda: OpGraph.from_models([(str(big), model)]), args.repeat)
        print(f"OpGraph.from_models on the {args.ops}-op model: {build:.2f} s")


if __name__ == "__main__":
    main()
