"""What msprobe's names say (framework-dumps.md A4, A6): entry names, tensor file names, dtypes.
Where a dump is (its rank folders) is :mod:`.rank_dirs`, re-exported here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from .rank_dirs import TENSOR_DIR, RankDir, find_rank_dirs, is_msprobe_dump  # noqa: F401  (re-exported)


# --- names --------------------------------------------------------------------------------------

MODULE_PREFIXES = ("Module", "Cell")
_DIRECTIONS = ("forward", "backward")


@dataclass(frozen=True)
class EntryName:
    """What an entry name says: ``Functional.linear.0.forward`` is api ``linear`` of prefix
    ``Functional``, call 0, forward; ``Module.fc1.Linear.backward.0`` is module ``fc1.Linear``."""
    kind: str             # forward | backward | parameters_grad | unknown
    scope: str            # api | module
    prefix: str
    op: str               # api name, or module "fqn.Class"
    counter: int | None


def parse_entry_name(name: str) -> EntryName:
    return EntryName(*entry_name_fields(name))


_KINDS = frozenset((*_DIRECTIONS, "parameters_grad"))


def entry_name_fields(name: str) -> tuple[str, str, str, str, int | None]:
    """:func:`parse_entry_name`'s fields as a tuple (kind, scope, prefix, op, counter): the reader
    runs this once per entry, so it looks at the last two dot-separated parts only."""
    prefix, dot1, rest = name.partition(".")
    scope = "module" if prefix in MODULE_PREFIXES else "api"
    head, dot2, last = rest.rpartition(".")
    body, dot3, second = head.rpartition(".")
    # module: ...{forward|backward|parameters_grad}.{n}; parameters_grad before 26.x has no .{n}
    if dot2 and second in _KINDS and last.isdecimal():     # int() takes what isdecimal() accepts
        return second, scope, prefix, body, int(last)
    if dot1 and last == "parameters_grad":
        return "parameters_grad", scope, prefix, head, None
    # api: {Prefix}.{api}.{n}.{forward|backward}
    if dot3 and last in _DIRECTIONS and second.isdecimal():
        return last, scope, prefix, body, int(second)
    return "unknown", scope, prefix, rest, None


_FILE_NAME = re.compile(
    r"(?P<entry>.+?\.(?:(?:forward|backward)(?:\.\d+)?|parameters_grad(?:\.\d+)?))"
    r"\.(?P<rest>.+)\.(?P<ext>pt|npy)\Z")


def split_tensor_file_name(file_name: str) -> tuple[str, str] | None:
    """``Functional.linear.0.forward.input.1.pt`` -> (entry name, leaf path ``input.1``); the
    ``kwargs`` spelling of keyword inputs becomes ``input`` as in dump.json-derived paths.
    None for a name that does not follow msprobe's scheme."""
    m = _FILE_NAME.match(file_name)
    if m is None:
        return None
    entry, rest = m.group("entry"), m.group("rest")
    # an API entry never ends in a counter: "X.0.forward.0..." would be a module's
    if parse_entry_name(entry).kind == "unknown":
        return None
    head, _, tail = rest.partition(".")
    if head == "kwargs":
        rest = f"input.{tail}"
    return entry, rest


# --- dtypes -------------------------------------------------------------------------------------

def normalize_dtype(raw: str) -> str | None:
    """numpy / ml_dtypes name of a torch (``torch.bfloat16``) or MindSpore (``BFloat16``,
    ``mindspore.float32``) dtype string; None when unknown."""
    return _dtype_name(raw) if isinstance(raw, str) else None


@lru_cache(maxsize=256)    # runs per leaf; numpy's dtype.name is slow (~9 us)
def _dtype_name(raw: str) -> str | None:
    from ..torch_pt import TORCH_DTYPES     # numpy: not needed to find a dump (pshell start-up)

    key = raw.strip().removeprefix("torch.").removeprefix("mindspore.").lower()
    dtype = TORCH_DTYPES.get(key)
    return dtype.name if dtype is not None else None
