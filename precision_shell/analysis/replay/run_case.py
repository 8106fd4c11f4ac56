"""An :class:`~.engine.OpCase` from any run: the call's tensors loaded through ``Run.load``, its
constants as recorded, each output's and input's golden through the run's :class:`Pairing`
(framework ``replay``; graph mode keeps its own loader, which also walks Cast/TransData chains
for input goldens)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .calls import OpCall
from .engine import OpCase
from .metrics import cosine
from .verdict import InputCheck


def _golden(pairing: Any, golden_run: Any, run: Any, name: str) -> tuple[str | None, np.ndarray | None]:
    if pairing is None or golden_run is None:
        return None, None
    found = pairing.golden_for(run.tensor(name))
    if found is None or not found.has_data:
        return None, None
    return found.printed(golden=True), np.asarray(golden_run.load(found.name))


def _check(j: int, tensor: str, x: np.ndarray, ref: str | None, golden: np.ndarray | None) -> InputCheck:
    if golden is None or golden.size != x.size:
        return InputCheck(j, tensor, ref if golden is not None else None, None)
    g = np.asarray(golden, dtype=np.float64).reshape(x.shape)
    xf = np.asarray(x, dtype=np.float64)
    return InputCheck(j, tensor, ref, cosine(xf, g), bool((~np.isfinite(xf) & np.isfinite(g)).any()))


def is_value(array: np.ndarray) -> bool:
    """A floating tensor (rounded by the profiles); integers (ids, targets) go in as they are."""
    return array.dtype.kind == "f" or array.dtype.name == "bfloat16"


def case_of(run: Any, call: OpCall, pairing: Any = None, golden_run: Any = None) -> OpCase:
    """FormatError/CommandError from the reader when a tensor cannot be loaded."""
    inputs, values, checks, in_goldens, in_dtypes = [], [], [], [], []
    for j, x in enumerate(call.inputs):
        if isinstance(x, str):
            array = np.asarray(run.load(x))
            ref, golden = _golden(pairing, golden_run, run, x)
            checks.append(_check(j, run.tensor(x).printed(), array, ref, golden))
            values.append(is_value(array))
            in_goldens.append(golden.reshape(array.shape) if golden is not None and golden.size == array.size else None)
            in_dtypes.append(run.tensor(x).dtype or array.dtype.name)
        else:
            array = x
            values.append(False)
            in_goldens.append(x)
            in_dtypes.append("float64")
        inputs.append(array)
    outputs = [np.asarray(run.load(o)) for o in call.outputs]
    goldens = [_golden(pairing, golden_run, run, o)[1] for o in call.outputs]
    return OpCase(call.op, call.type, call.attrs, inputs, outputs, list(call.output_dtypes), goldens, checks,
                  call.fused_passes, values=values, input_goldens=in_goldens, input_dtypes=in_dtypes)
