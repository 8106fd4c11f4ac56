"""Large-workspace mode: a tower of fused blocks appended to the sample network, op by op.

For benchmarks (`--scale MB` for a ~MB-sized NPU dump, `--files N` for ~N dump files) the
generator adds a second input and a chain of ``FusedMulAdd`` blocks (MulAddFusionPass fuses
``mul`` + ``add``; FE only applies it inside ``bert`` scopes, hence the names). Blocks are
computed and yielded one at a time, so memory stays at a few tensors whatever the size.
Each block: y = x * scale + shift, with scale = -1 per channel so values stay bounded over
any number of blocks; fp16 rounding accumulates slowly (cosine stays >= 0.99).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from . import kernels as K
from .device_layouts import device_shape
from .graph_builder import kernel_name, op_text
from .records import FrameworkOp, NpuInput, NpuOp, NpuTensor

CHANNELS = 13               # not a multiple of 16: NC1HWC0 padding on every block
SCALE_SHAPE = (4, CHANNELS, 112, 112)
FILES_SHAPE = (1, CHANNELS, 4, 4)
# --small-tensors: many ~0.35 MB fp16 dumps (real networks have thousands of small ops); N = 16
# keeps FRACTAL_Z unpadded on N, 26 x 26 pads FRACTAL_NZ's rows and columns to 32
SMALL_SHAPE = (16, CHANNELS, 26, 26)
SMALL_FORMATS = ("NC1HWC0", "FRACTAL_Z", "FRACTAL_NZ")   # block k's output: SMALL_FORMATS[k % 3]
PASS_MUL_ADD = "MulAddFusionPass"
DATA_NAME = "input/Data_1"


@dataclass(frozen=True)
class TowerPlan:
    blocks: int
    shape: tuple[int, int, int, int]      # logical NCHW of every block tensor
    formats: tuple[str, ...] = ("NC1HWC0",)   # block k's output format: formats[k % len(formats)]

    @property
    def block_dump_bytes(self) -> int:
        """Mean dump bytes of a block (its input and output in their formats, scale and shift)."""
        laid = [_fp16_bytes(self.shape, fmt) for fmt in self.formats]
        return round(2 * sum(laid) / len(laid)) + 2 * _fp16_bytes((1, CHANNELS, 1, 1), "NC1HWC0")

    def output_format(self, k: int) -> str:
        return self.formats[k % len(self.formats)]


def _fp16_bytes(shape, fmt: str) -> int:
    return 2 * math.prod(device_shape(shape, fmt))


def _nc1hwc0_bytes(shape) -> int:
    return _fp16_bytes(shape, "NC1HWC0")


def plan_for_scale(megabytes: float, base_bytes: int, small_tensors: bool = False) -> TowerPlan:
    """Enough blocks for ~``megabytes`` MB (1e6 bytes) of NPU dump in total; ``small_tensors``:
    ~0.35 MB blocks whose outputs rotate through NC1HWC0, FRACTAL_Z and FRACTAL_NZ."""
    shape, formats = (SMALL_SHAPE, SMALL_FORMATS) if small_tensors else (SCALE_SHAPE, ("NC1HWC0",))
    n, c, h, w = shape
    prefix = n * c * h * w * (4 + 2 + 2) + _nc1hwc0_bytes(shape)   # Cast and TransData dumps
    plan = TowerPlan(1, shape, formats)
    left = megabytes * 1e6 - base_bytes - prefix
    return TowerPlan(max(1, round(left / plan.block_dump_bytes)), shape, formats)


def plan_for_files(files: int, base_files: int) -> TowerPlan:
    """Enough blocks for ~``files`` NPU dump files in total (tiny tensors)."""
    return TowerPlan(max(1, files - base_files - 2), FILES_SHAPE)


def last_block_name(plan: TowerPlan) -> str:
    return _block_name(plan.blocks - 1)


def _block_name(k: int) -> str:
    return f"bert/layer_{k}/mul/FusedMulAdd"


class Tower:
    """The tower's static ops (input, constants) and a generator of its executed ops."""

    def __init__(self, seed: int, plan: TowerPlan):
        rng = np.random.default_rng([seed, 1])
        self.plan = plan
        x = rng.standard_normal(plan.shape).astype(K.F32)
        scale = np.full((1, CHANNELS, 1, 1), -1.0, K.F32)
        shift = (0.5 * rng.standard_normal((1, CHANNELS, 1, 1))).astype(K.F32)
        self.static_framework = [FrameworkOp(DATA_NAME, "Placeholder", [], [x]),
                                 FrameworkOp("bert/scale", "Const", [], [scale]),
                                 FrameworkOp("bert/shift", "Const", [], [shift])]
        local = "DNN_VM_GE_LOCAL_OP_STORE"
        self.data = NpuOp(DATA_NAME, "Data", [], [NpuTensor(x, "NCHW", "NCHW", f"{DATA_NAME}:0", x)],
                          attrs={"index": 1}, executed=False, engine=local)
        self.scale = NpuOp("bert/scale", "Const", [], [NpuTensor(scale.astype(K.F16), "NC1HWC0", "NCHW",
                                                                 "bert/scale:0", scale)], executed=False, engine=local)
        self.shift = NpuOp("bert/shift", "Const", [], [NpuTensor(shift.astype(K.F16), "NC1HWC0", "NCHW",
                                                                 "bert/shift:0", shift)], executed=False, engine=local)
        self.static_ops = [self.data, self.scale, self.shift]
        self.output: NpuTensor | None = None   # the last block's output, once iterated

    def executed_ops(self, trans_start: int) -> Iterator[tuple[NpuOp, list[FrameworkOp], int | None]]:
        """(NPU op, framework ops whose goldens it introduces, block index), in execution order."""
        x = self.data.outputs[0]
        cast_name, trans_name = f"trans_Cast_{trans_start}", f"trans_TransData_{trans_start + 1}"
        x16 = NpuTensor(x.npu.astype(K.F16), "NCHW", "NCHW")
        yield NpuOp(cast_name, "Cast", [_inp(f"{DATA_NAME}:0", x)], [x16], original_ops=[],
                    attrs={"dst_type": 2}), [], None
        x5 = NpuTensor(x16.npu, "NC1HWC0", "NCHW")
        yield NpuOp(trans_name, "TransData", [NpuInput(f"{cast_name}:0", x16, x.golden_ref, x.golden)], [x5],
                    original_ops=[], attrs={"src_format": "NCHW", "dst_format": "NC1HWC0"}), [], None
        source, tensor, gref, golden = f"{trans_name}:0", x5, x.golden_ref, x.golden
        a16, b16 = self.scale.outputs[0].npu, self.shift.outputs[0].npu
        a32, b32 = self.scale.outputs[0].golden, self.shift.outputs[0].golden
        for k in range(self.plan.blocks):
            scope = f"bert/layer_{k}"
            mul = K.g_mul(golden, a32)
            add = K.g_add(mul, b32)
            framework = [FrameworkOp(f"{scope}/mul", "Mul", [gref, "bert/scale:0"], [mul]),
                         FrameworkOp(f"{scope}/add", "Add", [f"{scope}/mul:0", "bert/shift:0"], [add])]
            out = NpuTensor(K.npu_fused_mul_add(tensor.npu, a16, b16), self.plan.output_format(k), "NCHW",
                            f"{scope}/add:0", add)
            op = NpuOp(_block_name(k), "FusedMulAdd",
                       [NpuInput(source, tensor, gref, golden), _inp("bert/scale:0", self.scale.outputs[0]),
                        _inp("bert/shift:0", self.shift.outputs[0])],
                       [out], original_ops=[f"{scope}/mul", f"{scope}/add"], passes=[PASS_MUL_ADD])
            yield op, framework, k
            source, tensor, gref, golden = f"{op.name}:0", out, out.golden_ref, add
        self.output = tensor


class BlockText:
    """Graph text of tower blocks from one printed template (text_format is ~1 ms per op).

    Blocks differ only in their layer index, their producer and their id; everything else
    (descs, attrs, their sorted order) is identical, so the text of block k is the template with
    those strings substituted. ``tests/samples/test_samples.py`` checks it equals text_format's output.
    """
    _ID = 987654321

    def __init__(self, block: NpuOp):
        marker = _block_name("@K@")
        self._marker_kernel = kernel_name(NpuOp(marker, block.type, [], []))
        first = block.inputs[0]
        template = NpuOp(marker, block.type,
                         [NpuInput("@SRC@:0", first.tensor, None, None), *block.inputs[1:]],
                         [NpuTensor(o.npu, o.format, o.origin_format, "bert/layer_@K@/add:0") for o in block.outputs],
                         original_ops=["bert/layer_@K@/mul", "bert/layer_@K@/add"], passes=list(block.passes),
                         stream_id=block.stream_id, graph_id=self._ID)
        self._template = op_text(template)

    def render(self, k: int, source_op: str, graph_id: int) -> str:
        return (self._template.replace(self._marker_kernel, kernel_name(NpuOp(_block_name(k), "FusedMulAdd", [], [])))
                .replace("@K@", str(k)).replace("@SRC@", source_op)
                .replace(f"id: {self._ID}\n", f"id: {graph_id}\n"))


def _inp(source: str, tensor: NpuTensor) -> NpuInput:
    return NpuInput(source, tensor, tensor.golden_ref, tensor.golden)
