"""``eval`` expressions: numpy over tensors named in backticks, checked before anything runs.

The text is the user's, but ``source FILE`` can feed it from a file a workspace carries, so it is
never handed to Python as it is. It is parsed with :mod:`ast`, every node is checked against an
allow-list (names: only ``np`` and the backticked tensors; no attribute or name starting with
``_``; calls only to ``np`` functions and methods of values; no lambda, comprehension, import,
starred or ``**`` arguments, f-string, walrus), every ``np.`` chain is looked up now and must end
in a function or value of numpy itself (its ``linalg``/``fft``/``emath`` submodules at most), never
one that reads or writes files or changes numpy's global state. Only then is the checked tree
compiled and evaluated with exactly ``np`` and the tensors as names, and builtins empty but for
``__import__``: numpy's C array methods (``.max()``, ``.mean()``) import their Python helpers
through the calling frame's builtins, and the check refuses every name starting with ``_``, so the
expression itself cannot reach it.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from precision_shell.errors import CommandError

_PLACEHOLDER = "tensor_{}_"     # a backticked tensor's name in the parsed text
_NODES = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp, ast.IfExp, ast.Call,
          ast.Attribute, ast.Name, ast.Constant, ast.Subscript, ast.Slice, ast.Tuple, ast.List,
          ast.keyword, ast.Load, ast.operator, ast.unaryop, ast.cmpop, ast.boolop)
_SUBMODULES = {"linalg", "fft", "emath"}
# numpy names that read or write files, load pickles, or change numpy's global state
_REFUSED = {"load", "loads", "save", "savez", "savez_compressed", "savetxt", "loadtxt", "genfromtxt",
            "fromfile", "tofile", "fromregex", "memmap", "dump", "dumps", "DataSource", "ctypes",
            "ctypeslib", "set_printoptions", "printoptions", "seterr", "seterrcall", "setbufsize",
            "show_config", "show_runtime", "info", "source", "lookfor", "get_include", "test",
            # str.format reaches attributes by name inside its format string
            "format", "format_map",
            # arrays of Python objects: `10 ** 300000000` on them is a Python big int, unbounded
            "object_", "frompyfunc", "vectorize"}
_MAX_CONSTANT_POWER = 1024      # `10**10**10` would hang the shell computing a huge int


@dataclass(frozen=True)
class Expression:
    """A checked expression: ``tensors`` are the backticked names in order of appearance, each
    bound to ``tensor_K_`` in ``tree``."""

    text: str
    tree: ast.Expression
    tensors: tuple[str, ...]


class ExpressionError(CommandError):
    """One line: what is wrong, the expression, and a caret under the column when known."""

    laid_out = True     # its line breaks are its own (the front end escapes each line)

    def __init__(self, text: str, reason: str, column: int | None = None):
        message = f"eval: {reason}"
        if column is not None:
            message += f"\n  {text}\n  {' ' * column}^"
        super().__init__(message)


def parse_expression(text: str) -> Expression:
    """Backticked tensor names become placeholders; the rest must pass :func:`_check`."""
    text = text.strip()
    if not text:
        raise ExpressionError(text, "empty expression; e.g. eval \"np.abs(`OP:0`).max()\"")
    if text.count("`") % 2:
        raise ExpressionError(text, "a backtick is not closed", text.rfind("`"))
    parts = text.split("`")
    source, columns, tensors = "", [], []     # columns: offset in `text` of each char of `source`
    offset = 0
    for k, part in enumerate(parts):
        if k % 2:   # a tensor name
            name = part.strip()
            if not name:
                raise ExpressionError(text, "empty tensor name between backticks", offset - 1)
            if name not in tensors:
                tensors.append(name)
            placeholder = _PLACEHOLDER.format(tensors.index(name))
            source += placeholder
            columns += [offset - 1] * len(placeholder)
        else:
            source += part
            columns += range(offset, offset + len(part))
        offset += len(part) + 1
    columns.append(len(text))

    def where(node_or_col: Any) -> int:
        col = node_or_col if isinstance(node_or_col, int) else getattr(node_or_col, "col_offset", 0)
        return columns[min(max(col, 0), len(columns) - 1)]

    try:
        tree = ast.parse(source, mode="eval")
    except SyntaxError as exc:
        col = (exc.offset or 1) - 1
        raise ExpressionError(text, f"syntax error: {exc.msg}", where(col)) from None
    placeholders = {_PLACEHOLDER.format(k) for k in range(len(tensors))}
    # a placeholder-like name typed outside backticks would pass as a tensor: refuse it
    outside = "".join(parts[0::2])
    typed = re.search(r"tensor_\d+_", outside)
    if typed:
        raise ExpressionError(text, f"{typed.group()!r} is reserved; name tensors in backticks",
                              text.find(typed.group()))
    _check(tree, text, placeholders, where)
    return Expression(text, tree, tuple(tensors))


def _np_object(node: ast.AST) -> Any:
    """The numpy object a ``np.a.b`` chain names, or None when the chain is not rooted at np."""
    if isinstance(node, ast.Name):
        return np if node.id == "np" else None
    if isinstance(node, ast.Attribute):
        base = _np_object(node.value)
        if base is None:
            return None
        return getattr(base, node.attr, _MISSING)
    return None


_MISSING = object()


def _check(tree: ast.Expression, text: str, placeholders: set[str], where: Callable[[Any], int]) -> None:
    def refuse(node: ast.AST, reason: str) -> None:
        raise ExpressionError(text, reason, where(node))

    call_args: set[int] = set()     # string constants are allowed only as call arguments
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            for a in node.args:
                if isinstance(a, ast.Starred):
                    refuse(a, "*arguments are not allowed")
                call_args.add(id(a))
            for kw in node.keywords:
                if kw.arg is None:
                    refuse(kw.value, "**arguments are not allowed")
                call_args.add(id(kw.value))
    for node in ast.walk(tree):     # what kind of expression first: `(lambda: 1)()` is a lambda
        if not isinstance(node, _NODES):
            what = {ast.Lambda: "lambda", ast.NamedExpr: "assignment (:=)", ast.JoinedStr: "f-string",
                    ast.Starred: "*unpacking", ast.Dict: "dict", ast.Set: "set"}.get(type(node))
            if what is None and isinstance(node, ast.comprehension | ast.ListComp | ast.SetComp
                                           | ast.DictComp | ast.GeneratorExp):
                what = "comprehension"
            refuse(node, f"{what or type(node).__name__} is not allowed (numpy expressions only)")
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            if node.id.startswith("_"):
                refuse(node, f"name {node.id!r}: names starting with _ are not allowed")
            if node.id != "np" and node.id not in placeholders:
                refuse(node, f"unknown name {node.id!r}: only np and tensors in backticks "
                             f"(`OP:0`) may be used")
        elif isinstance(node, ast.Attribute):
            _check_attribute(node, refuse)
        elif isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Attribute):
                refuse(node.func, f"{ast.unparse(node.func)!r} cannot be called: only np.FUNCTION(...) "
                             "and methods like .max()")
            if _np_object(node.func) is not None and type(_np_object(node.func)) is type(np):
                refuse(node, f"{ast.unparse(node.func)!r} is a module, not a function")
        elif isinstance(node, ast.Constant):
            if isinstance(node.value, bytes) or (isinstance(node.value, str) and id(node) not in call_args):
                refuse(node, "text is allowed only as a function argument (e.g. dtype=\"float32\")")
            if isinstance(node.value, str) and _object_dtype(node.value):
                refuse(node, f"dtype {node.value!r}: arrays of Python objects are not allowed")
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow | ast.LShift):
            exponent = node.right
            if (isinstance(exponent, ast.Constant) and isinstance(exponent.value, int)
                    and abs(exponent.value) > _MAX_CONSTANT_POWER and not _has_tensor(node.left)):
                refuse(exponent, f"exponent {exponent.value} is too large for a constant")
            if isinstance(exponent, ast.BinOp) and not _has_tensor(node):
                refuse(exponent, "a computed exponent of a constant is not allowed")


def _check_attribute(node: ast.Attribute, refuse: Callable[[ast.AST, str], None]) -> None:
    """``x.attr`` and every ``np.a.b`` chain, innermost first (``np.lib.format``: np.lib is refused)."""
    if isinstance(node.value, ast.Attribute):
        _check_attribute(node.value, refuse)
    at = _AttrName(node)
    if node.attr.startswith("_"):
        refuse(at, f"attribute {node.attr!r}: names starting with _ are not allowed")
    found = _np_object(node)
    if found is _MISSING:
        refuse(at, f"numpy has no {ast.unparse(node)!r}")
    if found is not None and type(found) is type(np) and node.attr not in _SUBMODULES:
        refuse(at, f"{ast.unparse(node)!r}: of numpy's submodules only "
                   f"{', '.join(sorted(_SUBMODULES))} may be used")
    if node.attr in _REFUSED:
        refuse(at, f"{node.attr!r} is not allowed (no files, no global numpy settings)")


class _AttrName:
    """Where an attribute's name starts: the caret goes under ``__class__``, not under ``np``."""

    def __init__(self, node: ast.Attribute):
        self.col_offset = (node.end_col_offset or 0) - len(node.attr)


def _object_dtype(text: str) -> bool:
    """Whether ``text`` names numpy's object dtype ('O', 'object', '|O8', ...)."""
    try:
        return np.dtype(text).kind == "O"
    except (TypeError, ValueError, SyntaxError):
        return False


def _has_tensor(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Name) and n.id != "np" or isinstance(n, ast.Call)
               for n in ast.walk(node))


def evaluate(expr: Expression, values: Mapping[str, np.ndarray]) -> Any:
    """The value of a checked expression; ``values`` maps each of ``expr.tensors`` to its array.
    A numpy or Python error is one line naming it."""
    names: dict[str, Any] = {"__builtins__": {"__import__": __import__}, "np": np}
    for k, name in enumerate(expr.tensors):
        names[_PLACEHOLDER.format(k)] = values[name]
    code = compile(expr.tree, "<eval>", "eval")
    try:
        with np.errstate(all="ignore"):     # nan/inf show in the result's stats instead
            return eval(code, names)  # noqa: S307 - the tree passed _check (see the module doc)
    except (ArithmeticError, ValueError, TypeError, IndexError, KeyError, AttributeError,
            RecursionError) as exc:     # MemoryError: the worker's memory cap says it (eval_worker)
        raise ExpressionError(expr.text, f"{type(exc).__name__}: {exc}") from None
