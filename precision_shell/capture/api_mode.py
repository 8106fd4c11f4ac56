"""Top-level torch API calls through ``torch.overrides.TorchFunctionMode`` (framework-dumps.md B1).

The mode sees every call at the Python API, above autocast, so an fp32 run and an autocast run
of the same code see the same calls with the same names. While its handler runs the mode is off,
so calls made inside a recorded call (``F.softmax`` calling ``Tensor.softmax``) are not recorded:
msprobe's "top-level API" semantics. Our own tensor work runs with torch functions disabled.
"""

from __future__ import annotations

import inspect

from torch.overrides import TorchFunctionMode

from .backward import untap_outputs
from .naming import ApiNames, OperatorMarks, is_in_place
from .recorder import call_stack


def writes_inputs(api: str, kwargs: dict) -> bool:
    """``add_``, ``__iadd__``, ``out=...``, ``F.relu(x, inplace=True)``: never tap the inputs."""
    return is_in_place(api) or "out" in kwargs or kwargs.get("inplace") is True


def backward_parent(forward_name: str | None) -> str | None:
    """``Module.fc1.Linear.forward.0`` -> ``Module.fc1.Linear.backward.0`` (construct.json)."""
    return None if forward_name is None else forward_name.replace(".forward.", ".backward.")


_SIGNATURES: dict = {}


def _positional_names(func) -> tuple[tuple[str, ...], dict]:
    """Names of ``func``'s positional-or-keyword parameters and every parameter's default."""
    try:
        return _SIGNATURES[func]
    except (KeyError, TypeError):
        pass
    try:
        params = inspect.signature(func).parameters.values()
        found = (tuple(p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD),
                 {p.name: p.default for p in params if p.default is not p.empty})
    except (TypeError, ValueError):
        found = ((), {})
    try:
        _SIGNATURES[func] = found
    except TypeError:
        pass
    return found


def as_called(func, args, kwargs) -> tuple[tuple, dict]:
    """The arguments as the caller most likely wrote them. A Python function such as
    ``F.layer_norm`` hands ``__torch_function__`` its own re-spelling of the call (weight, bias,
    eps as keywords, plus defaults like ``_stacklevel``); msprobe records the call as made.
    Keywords left at their default are dropped, and the rest that continue the positional
    arguments become positional, as ``nn.LayerNorm`` and ``nn.Embedding`` pass them, so leaf
    names (``input.2`` for the weight) agree with msprobe's."""
    if not kwargs or not hasattr(func, "__code__"):
        return args, kwargs
    names, defaults = _positional_names(func)
    kwargs = {k: v for k, v in kwargs.items() if not (k in defaults and _same(v, defaults[k]))}
    args = list(args)
    for name in names[len(args):]:
        if name not in kwargs:
            break
        args.append(kwargs.pop(name))
    return tuple(args), kwargs


def _same(value, default) -> bool:
    return value is default or (type(value) is type(default) and type(value) in (int, float, bool, str)
                                and value == default)


class ApiMode(TorchFunctionMode):
    def __init__(self, session, marks: OperatorMarks) -> None:
        super().__init__()
        self.session = session      # reads session.recorder: a new one per step
        self.marks = marks
        self.names = ApiNames()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        operator = self.marks.take()
        rec = self.session.recorder
        if rec.busy:
            return func(*args, **kwargs)
        api = self.names.name(func, operator)
        if api is None:
            return func(*args, **kwargs)
        return _record(rec, api, func, args, kwargs)


def _record(rec, api: str, func, args, kwargs):
    n = rec.next_call(api)
    name = f"{api}.{n}.forward"
    parent = rec.module_stack[-1] if rec.module_stack else None
    stack = call_stack()
    with rec.internal():
        in_args, in_kwargs = rec.input_leaves(name, *as_called(func, args, kwargs))
        backward = rec.backward_entry(f"{api}.{n}.backward", backward_parent(parent))
        pairs = []
        if backward is not None and not writes_inputs(api, kwargs):
            (args, kwargs), pairs = rec.tap_inputs((tuple(args), kwargs), backward)
    output = func(*args, **kwargs)
    with rec.internal():
        output = untap_outputs(output, pairs)
        record = {"input_args": in_args, "input_kwargs": in_kwargs,
                  "output": rec.output_leaves(name, output, keep_existing=False)}
        if backward is not None:
            rec.hook_outputs(output, backward)
        rec.add(name, record, parent, stack)
    return output
