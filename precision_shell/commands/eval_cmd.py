"""``eval``: a numpy expression over tensors named in backticks (tfdbg's ``eval``), shown as ``pt``
shows a tensor. The expression is checked by :mod:`precision_shell.analysis.inspect.expression` before it
runs; each backticked name goes through the one tensor resolver, so it is written exactly as
``pt`` takes it (slice included)."""

from __future__ import annotations

from typing import Any

from precision_shell.commands.registry import REGISTRY, arg, command
from precision_shell.commands.results import Message
from precision_shell.commands.tensor_cmd import VALUE_ARGS
from precision_shell.model.session import Session


@command("eval",
         summary="Evaluate a numpy expression over tensors named in backticks (np is numpy; nothing "
                 "else is available) and print the result as `pt` does (stats, values, --hist, -w); "
                 "a scalar prints plainly. Quote an expression holding > or |.",
         example='eval "np.abs(`fc1/MatMul:0` - `golden:fc1_BiasAdd:0`).max()"\n'
                 "eval `conv1/Conv2D:0`[0].astype(np.float32).mean(axis=0) --hist\n"
                 'eval "np.linalg.norm(`fc1/MatMul:0`, axis=-1)" -w norms.npy',
         args=[arg("expression", nargs="+", complete="tensor",
                   help="numpy expression; tensors as `OP:0`, `golden:OP:0`, `FILE.npy` "
                        "(with an optional slice inside the backticks)")] + VALUE_ARGS)
def eval_expression(session: Session, args: Any):
    import numpy as np

    from precision_shell.analysis.inspect.eval_worker import EvalLimits, ForeignValue, run_limited
    from precision_shell.analysis.inspect.expression import evaluate, parse_expression
    from precision_shell.config import installed_config
    from precision_shell.commands.tensor_print import array_panel, parse_ranges, read_tensor
    from precision_shell.errors import CommandError
    from precision_shell.jsonable import jsonable
    from precision_shell.model.tensor_resolve import resolve_tensor

    if args.lines < 0:
        raise CommandError("-l must be 0 (no limit) or a positive number")
    text = " ".join(args.expression)
    ranges = parse_ranges(args.ranges) if args.ranges is not None else None
    expr = parse_expression(text)
    resolved = {name: resolve_tensor(session, name) for name in expr.tensors}
    values = {name: read_tensor(session, r) for name, r in resolved.items()}
    # in a forked worker with a memory cap and a timeout, killed on Ctrl-C (eval_worker)
    config = installed_config()
    value = run_limited(lambda: evaluate(expr, values),
                        EvalLimits(memory=config.eval_memory, timeout=config.eval_timeout))
    if isinstance(value, ForeignValue):
        return Message(value.text.split("\n"), data={"expression": expr.text, "value": value.data})
    tensors = [r.label + r.ref.slice_text for r in resolved.values()]
    options = args.write is not None or args.hist or args.stats or ranges is not None
    if isinstance(value, (np.ndarray, np.generic, int, float, bool)) and (np.ndim(value) > 0 or options):
        array = np.asarray(value)
        if array.dtype.kind not in "biufcV" and array.dtype.name != "bfloat16":
            raise CommandError(f"eval: the result is an array of {array.dtype}, not numbers")
        header = [("expression", expr.text), ("tensors", ", ".join(tensors) or "-"),
                  ("dtype", str(array.dtype)), ("shape", "(" + ", ".join(map(str, array.shape)) + ")")]
        data = {"expression": expr.text, "tensors": tensors, "numpy_dtype": str(array.dtype)}
        return array_panel(session, args, array, expr.text, header, data, ranges=ranges,
                           save_name="eval")
    shown = value.item() if isinstance(value, np.ndarray) else value
    return Message([str(shown)], data={"expression": expr.text, "tensors": tensors,
                                       "value": jsonable(shown)})


# tensors of a framework (msprobe) session resolve through the same resolver
REGISTRY.share("framework", "eval")
