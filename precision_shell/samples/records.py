"""The generator's record of truth: framework ops (golden), NPU ops and their tensors.

Every file the writer produces is derived from these objects, and tests compare decoded files
with the arrays kept here. An NPU op's input *is* its producer's output object, so the dumped
input bytes are bit-identical to the producer's dumped output bytes, as on a device.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import ml_dtypes
import numpy as np

from . import device_layouts

# numpy dtype name -> (dump OutputDataType code, GE DataType enum name)
DTYPES = {
    "float32": (1, "DT_FLOAT"),
    "float16": (2, "DT_FLOAT16"),
    "int32": (7, "DT_INT32"),
    "bfloat16": (27, "DT_BF16"),
    "float8_e5m2": (34, "DT_FLOAT8_E5M2"),        # the lowprec variant
    "float8_e4m3fn": (35, "DT_FLOAT8_E4M3FN"),
}
# NPU op types the golden mapping walks through, GE-inserted or not (formats.md A.8.5).
TRANS_TYPES = frozenset({"Cast", "TransData"})


@dataclass
class FrameworkOp:
    """One op of the framework (TF) graph; its outputs are the golden .npy files."""
    name: str
    type: str
    inputs: list[str]            # "producer:index"
    outputs: list[np.ndarray]    # float32 (int32 for integer constants)


@dataclass
class NpuTensor:
    """An NPU op output: the logical value in the NPU dtype plus its device placement."""
    npu: np.ndarray                 # logical shape, NPU storage dtype
    format: str                     # device format (NC1HWC0, FRACTAL_Z, FRACTAL_NZ, ND, NCHW)
    origin_format: str              # logical format (NCHW or ND)
    golden_ref: str | None = None   # "_datadump_origin_name:index" or None (GE-inserted op);
                                    # not what a Cast/TransData is compared with: NpuOp.compared_golden
    golden: np.ndarray | None = None

    @property
    def dtype(self) -> str:
        return "bfloat16" if self.npu.dtype == ml_dtypes.bfloat16 else self.npu.dtype.name

    @property
    def c0(self) -> int:
        """The cube's C0: 32 for 8-bit types (formats.md Appendix B), 16 for the others."""
        return 32 if self.npu.dtype.itemsize == 1 else device_layouts.C0

    @property
    def dtype_code(self) -> int:
        return DTYPES[self.dtype][0]

    @property
    def ge_dtype(self) -> str:
        return DTYPES[self.dtype][1]

    @property
    def format_code(self) -> int:
        return device_layouts.FORMAT_CODES[self.format]

    @property
    def logical_shape(self) -> tuple[int, ...]:
        return tuple(self.npu.shape)

    @property
    def device_shape(self) -> tuple[int, ...]:
        return device_layouts.device_shape(self.npu.shape, self.format, self.c0)

    def device(self) -> np.ndarray:
        """The bytes the device holds: the NPU value laid out in ``format`` with zero padding."""
        return device_layouts.to_device(self.npu, self.format, self.c0)

    @property
    def nbytes_device(self) -> int:
        return int(np.prod(self.device_shape)) * self.npu.dtype.itemsize


@dataclass
class NpuInput:
    source: str                     # "producer:index" as in the GE graph
    tensor: NpuTensor               # the producer's output object itself
    golden_ref: str | None          # producer output's golden, walked up through Cast/TransData
    golden: np.ndarray | None


@dataclass
class NpuOp:
    """One op of the built GE graph (the NPU side)."""
    name: str
    type: str
    inputs: list[NpuInput]
    outputs: list[NpuTensor]
    original_ops: list[str] | None = None   # None: attribute absent (Data/Const/NetOutput)
    passes: list[str] = field(default_factory=list)
    attrs: dict[str, Any] = field(default_factory=dict)
    executed: bool = True                   # has a task, hence a dump file
    stream_id: int = 0
    engine: str = "AIcoreEngine"
    order: int = -1                         # execution order among executed ops
    graph_id: int = -1                      # OpDef.id
    task_id: int = -1

    def output_ref(self, index: int = 0) -> str:
        return f"{self.name}:{index}"

    def compared_golden(self, index: int) -> tuple[str | None, np.ndarray | None]:
        """(golden ref, array) that output ``index`` is compared with (formats.md A.8.5): its own
        origin, except for a Cast/TransData, whose output ``index`` stands for its input
        ``index`` (already walked up to the real producer), whatever its own origin name."""
        if self.type in TRANS_TYPES:
            if index >= len(self.inputs):
                return None, None
            return self.inputs[index].golden_ref, self.inputs[index].golden
        out = self.outputs[index]
        return out.golden_ref, out.golden
