"""PyTorch ``.pt`` files (``torch.save``'s zip format) read with numpy alone, never running code.

A ``.pt`` file is a zip archive ``<stem>/data.pkl`` (a pickle whose tensors are calls to
``torch._utils._rebuild_tensor_v2`` on a persistent storage id ``('storage', torch.FloatStorage,
'0', 'cpu', numel)``), ``<stem>/data/<key>`` (each storage's raw bytes), ``<stem>/byteorder``
and ``<stem>/version`` (framework-dumps.md A4). Unpickling calls whatever globals the pickle
names, so :class:`_RestrictedUnpickler` maps an explicit allow-list of names to pshell's own
constructors and refuses every other global: a ``.pt`` can carry ``os.system`` as easily as a
tensor. Only ``pickle.Unpickler`` is used here (tests/trust/test_no_code_from_data.py checks that).

A pickle cannot steer what it builds: the opcodes that call constructors or extension registries
(INST, OBJ, NEWOBJ, EXT) are refused by a pre-scan; BUILD (``__setstate__`` / ``__dict__``
writes) reaches only objects that refuse it (tensors, storages, the allow-list's callables and
constants) or a fresh state dict that drops it; allowed callables take plain values, validated;
and the result is copied into plain containers before anyone sees it.

Opening a file reads the zip directory and the pickle; a :class:`PtTensor` reads its bytes from
``data/<key>`` only when :meth:`PtTensor.load` is called, and only the part of the storage the
view covers.
"""

from __future__ import annotations

import io
import os
import pickle
import pickletools
import zipfile
from collections import OrderedDict
from dataclasses import dataclass, replace

import numpy as np

from ..errors import FormatError
from .input_files import open_regular
# the tensor side, also imported from here by the dump readers
from .torch_tensor import (MAX_EXPANDED_BYTES, TORCH_DTYPES, PtStorage, PtTensor, _contiguous_strides,  # noqa: F401
                           _Disallowed, _int_tuple, _Sealed, storage_data)

# A pickle is opcodes only (tensor bytes live in data/N): even a state dict with 10k tensors
# needs ~1.5 MB, so anything larger is not a torch.save file worth unpickling.
MAX_PICKLE_BYTES = 8 << 20

# the typed storage classes torch pickles as `torch.<Name>Storage`
_STORAGE_DTYPES: dict[str, str] = {
    "DoubleStorage": "float64", "FloatStorage": "float32", "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16", "ComplexDoubleStorage": "complex128",
    "ComplexFloatStorage": "complex64", "LongStorage": "int64", "IntStorage": "int32",
    "ShortStorage": "int16", "CharStorage": "int8", "ByteStorage": "uint8", "BoolStorage": "bool",
}

# NPU storage formats whose bytes are in the plain row-major layout (ACL aclFormat codes)
_PLAIN_NPU_FORMATS = {0: "NCHW", 1: "NHWC", 2: "ND", 30: "NCDHW"}


@dataclass(frozen=True)
class StorageType(_Sealed):
    """A ``torch.<Name>Storage`` / ``torch.storage.UntypedStorage`` class named in the pickle."""
    name: str
    dtype: np.dtype


@dataclass(frozen=True)
class TorchDtype(_Sealed):
    """A ``torch.<dtype>`` object named in the pickle (``_rebuild_tensor_v3``'s dtype argument)."""
    name: str
    dtype: np.dtype


@dataclass(frozen=True)
class NpuFormat(_Sealed):
    """``torch_npu.npu._format.Format(code)``: the device layout an NPU tensor was saved in."""
    code: int


# --- the restricted unpickler -------------------------------------------------------------------

def _tensor(storage, offset, size, stride, requires_grad=False, dtype: np.dtype | None = None) -> PtTensor:
    if not isinstance(storage, PtStorage):
        raise ValueError("tensor storage is not a persistent storage reference")
    if type(requires_grad) is not bool:
        raise ValueError(f"tensor requires_grad {requires_grad!r:.40} is not a bool")
    # the geometry as plain tuples of ints, checked by PtTensor before it exists
    return PtTensor(storage, offset, _int_tuple(size, "size"), _int_tuple(stride, "stride"),
                    storage.dtype if dtype is None else dtype, requires_grad)


def _rebuild_tensor(storage, storage_offset, size, stride):
    return _tensor(storage, storage_offset, size, stride)


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad=False, backward_hooks=None,
                       metadata=None):
    return _tensor(storage, storage_offset, size, stride, requires_grad)


def _rebuild_tensor_v3(storage, storage_offset, size, stride, requires_grad, backward_hooks, dtype,
                       metadata=None):
    if not isinstance(dtype, TorchDtype):
        raise ValueError(f"tensor dtype {dtype!r:.40} is not a torch dtype")
    if not isinstance(storage, PtStorage):
        raise ValueError("tensor storage is not a persistent storage reference")
    if storage.numel * storage.dtype.itemsize % dtype.dtype.itemsize:
        raise ValueError(f"storage of {storage.numel} bytes is not a whole number of {dtype.name}")
    return _tensor(storage, storage_offset, size, stride, requires_grad, dtype.dtype)


def _rebuild_parameter(data, requires_grad, backward_hooks):
    if not isinstance(data, PtTensor):
        raise ValueError("parameter data is not a tensor")
    if type(requires_grad) is not bool:
        raise ValueError(f"parameter requires_grad {requires_grad!r:.40} is not a bool")
    return replace(data, requires_grad=requires_grad)


def _rebuild_npu_tensor(storage, storage_offset, size, stride, requires_grad, backward_hooks,
                        npu_storage_info=True):
    # a bool means "was on the NPU, plain layout"; a Format names the device layout
    if isinstance(npu_storage_info, NpuFormat) and npu_storage_info.code not in _PLAIN_NPU_FORMATS:
        raise ValueError(f"NPU tensor saved in device format {npu_storage_info.code}, "
                         f"not a plain row-major layout")
    return _tensor(storage, storage_offset, size, stride, requires_grad)


def _npu_format(code):
    if type(code) is not int:
        raise ValueError(f"bad NPU format {code!r:.40}")
    return NpuFormat(code)


class _StateDict(OrderedDict):
    """What ``collections.OrderedDict()`` makes while unpickling. torch pickles a state dict's
    ``_metadata`` attribute as BUILD state; written into ``__dict__`` it could shadow the mapping's
    own methods (``keys``), so it is dropped here and the dict is copied to a plain OrderedDict."""

    def __setstate__(self, state):
        if not isinstance(state, dict):
            raise _Disallowed("pickle BUILD with slot state on an OrderedDict")


@dataclass(frozen=True, eq=False)
class _AllowedCall(_Sealed):
    """A callable of the allow-list. Functions and classes take BUILD state (``__dict__``,
    ``__defaults__`` by slot state) for the whole process; this wrapper refuses it."""
    name: str
    function: object

    def __call__(self, *args):
        return self.function(*args)


_ALLOWED: dict[tuple[str, str], object] = {
    ("torch._utils", "_rebuild_tensor"): _AllowedCall("_rebuild_tensor", _rebuild_tensor),
    ("torch._utils", "_rebuild_tensor_v2"): _AllowedCall("_rebuild_tensor_v2", _rebuild_tensor_v2),
    ("torch._utils", "_rebuild_tensor_v3"): _AllowedCall("_rebuild_tensor_v3", _rebuild_tensor_v3),
    ("torch._utils", "_rebuild_parameter"): _AllowedCall("_rebuild_parameter", _rebuild_parameter),
    ("torch_npu.utils.storage", "_rebuild_npu_tensor"): _AllowedCall("_rebuild_npu_tensor", _rebuild_npu_tensor),
    ("torch_npu.npu._format", "Format"): _AllowedCall("Format", _npu_format),
    ("collections", "OrderedDict"): _AllowedCall("OrderedDict", _StateDict),
    ("torch.storage", "UntypedStorage"): StorageType("UntypedStorage", np.dtype("u1")),
    ("torch", "UntypedStorage"): StorageType("UntypedStorage", np.dtype("u1")),
    **{("torch", name): StorageType(name, TORCH_DTYPES[dt]) for name, dt in _STORAGE_DTYPES.items()},
    **{("torch", name): TorchDtype(name, dt) for name, dt in TORCH_DTYPES.items()},
}

# a storage key is a member name inside data/: torch writes decimal numbers
_STORAGE_KEY_CHARS = frozenset("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_-.")


class _RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, data: bytes, path: str, prefix: str, members: dict[str, zipfile.ZipInfo],
                 big_endian: bool):
        super().__init__(io.BytesIO(data))
        self._path, self._prefix, self._members, self._big = path, prefix, members, big_endian
        self._storages: dict[str, PtStorage] = {}

    def find_class(self, module, name):
        try:
            return _ALLOWED[(module, name)]
        except (KeyError, TypeError):
            raise _Disallowed(f"disallowed pickle global {module}.{name}") from None

    def persistent_load(self, pid):
        if not (type(pid) is tuple and len(pid) == 5 and pid[0] == "storage"):
            raise ValueError(f"unsupported persistent id {pid!r:.80}")
        _, storage_type, key, location, numel = pid
        if not isinstance(storage_type, StorageType) or type(key) is not str \
                or type(location) is not str or type(numel) is not int or numel < 0:
            raise ValueError(f"bad storage reference {pid!r:.80}")
        if not key or key in (".", "..") or len(key) > 64 or not set(key) <= _STORAGE_KEY_CHARS:
            raise _Disallowed(f"storage key {key!r:.80} does not name a member of data/")
        if key in self._storages:   # views of one storage share it (and its bytes)
            return self._storages[key]
        member = f"{self._prefix}data/{key}"
        info = self._members.get(member)
        if info is None:
            raise ValueError(f"storage {member} is not in the archive")
        if numel * storage_type.dtype.itemsize > info.file_size:
            raise ValueError(f"storage {member} holds {info.file_size} bytes, the pickle says "
                             f"{numel} x {storage_type.dtype.itemsize}")
        storage = PtStorage(self._path, member, storage_type.dtype, numel, location, self._big)
        self._storages[key] = storage
        return storage


_PRIMITIVES = (type(None), bool, int, float, complex, str, bytes)
_KEPT = (PtTensor, StorageType, TorchDtype, NpuFormat)


def _plain(obj, done: dict[int, object], busy: set[int]):
    """``obj`` rebuilt from plain containers (dict, OrderedDict, list, tuple, set), primitives and
    the sealed objects above: nothing a pickle made survives as the object it made. Shared parts
    stay shared; a container holding itself is refused."""
    if type(obj) in _PRIMITIVES or type(obj) in _KEPT:
        return obj
    key = id(obj)
    if key in done:
        return done[key]
    if key in busy:
        raise _Disallowed("data.pkl holds a container that contains itself")
    busy.add(key)
    kind = type(obj)
    if kind is _StateDict or kind is dict:
        out = (OrderedDict if kind is _StateDict else dict)(
            (_plain(k, done, busy), _plain(v, done, busy)) for k, v in obj.items())
    elif kind in (list, tuple, set, frozenset):
        out = kind(_plain(v, done, busy) for v in obj)
    elif kind is bytearray:
        out = bytes(obj)
    else:
        raise _Disallowed(f"data.pkl builds a {kind.__name__}")
    busy.discard(key)
    done[key] = out
    return out


_MEMO_PUTS = {"PUT", "BINPUT", "LONG_BINPUT"}
# opcodes torch.save never writes that build objects by calling classes (INST, OBJ, NEWOBJ*),
# through copyreg's extension registry (EXT*), or out of band (buffers, text persistent ids)
_REFUSED_OPCODES = {"INST", "OBJ", "NEWOBJ", "NEWOBJ_EX", "EXT1", "EXT2", "EXT4",
                    "NEXT_BUFFER", "READONLY_BUFFER", "PERSID"}


def _prescan(data: bytes) -> None:
    """Refuses opcodes torch.save does not write, and memo bombs: CPython's C unpickler sizes its
    memo array by the largest index a PUT names and zeroes it all (a 6-byte ``LONG_BINPUT
    0x40000000`` commits 16 GB before any allow-list is asked); an honest pickle memoizes at most
    one object per opcode, so an index above the opcode count so far is refused.
    ``pickletools.genops`` only decodes opcodes (nothing is built or run); ~25 us for msprobe's
    per-tensor pickles."""
    for count, (op, arg, _) in enumerate(pickletools.genops(data)):
        if op.name in _MEMO_PUTS and not (isinstance(arg, int) and 0 <= arg <= count):
            raise ValueError(f"memo index {arg!r:.20} at opcode {count} (a memory bomb, not a torch pickle)")
        if op.name == "INST":    # names its class like GLOBAL: say which
            module, _, name = str(arg).partition(" ")
            raise _Disallowed(f"disallowed pickle global {module}.{name} (opcode INST)")
        if op.name in _REFUSED_OPCODES:
            raise _Disallowed(f"pickle opcode {op.name} at opcode {count} (torch.save never writes it)")


# --- the archive ---------------------------------------------------------------------------------

_LEGACY_MAGIC = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19"


def _not_zip_reason(head: bytes) -> str:
    if head.startswith(_LEGACY_MAGIC):
        return ("legacy (pre-1.6, non-zip) torch.save format is not read: "
                "re-save it with torch.save(..., _use_new_zipfile_serialization=True)")
    if head[257:262] == b"ustar":
        return "legacy tar torch.save format (torch < 0.4) is not read"
    if head[:1] == b"\x80":
        return "a bare pickle, not a torch.save zip archive"
    return "not a PyTorch .pt file (not a zip archive)"


def _archive_prefix(path: str, names: list[str]) -> str:
    pickles = [n for n in names if n.rpartition("/")[2] == "data.pkl" and n.count("/") <= 1]
    if len(pickles) != 1:
        if any(n.endswith("constants.pkl") for n in names):
            raise FormatError(path, "a TorchScript archive, not a torch.save file")
        raise FormatError(path, f"zip archive with {len(pickles)} data.pkl records, expected 1")
    return pickles[0][:-len("data.pkl")]


def open_pt(path: str | os.PathLike):
    """The object a ``.pt`` file holds, with :class:`PtTensor` in place of each tensor (dicts,
    lists, tuples, numbers and strings as they are). Reads the zip directory and the pickle."""
    path = os.fspath(path)
    try:
        with os.fdopen(open_regular(path), "rb") as f:
            head = f.read(512)
            if not head.startswith(b"PK"):
                raise FormatError(path, "empty file" if not head else _not_zip_reason(head))
            f.seek(0)
            with zipfile.ZipFile(f) as zf:
                members = {i.filename: i for i in zf.infolist()}
                prefix = _archive_prefix(path, list(members))
                pkl = members[prefix + "data.pkl"]
                if pkl.file_size > MAX_PICKLE_BYTES:
                    raise FormatError(path, f"data.pkl is {pkl.file_size} bytes, over the "
                                            f"{MAX_PICKLE_BYTES >> 20} MB limit for a tensor pickle")
                data = zf.read(pkl)
                order = members.get(prefix + "byteorder")
                byteorder = zf.read(order)[:16].decode("ascii", "replace").strip() if order else "little"
    except FormatError:
        raise
    except IsADirectoryError:
        raise FormatError(path, "is a directory, not a .pt file") from None
    except FileNotFoundError:
        raise FormatError(path, "no such file") from None
    except (OSError, zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError, NotImplementedError) as e:
        raise FormatError(path, f"not a readable zip archive: {e}") from None
    if byteorder not in ("little", "big"):
        raise FormatError(path, f"unknown byteorder {byteorder!r}")
    try:
        _prescan(data)
        return _plain(_RestrictedUnpickler(data, path, prefix, members, byteorder == "big").load(), {}, set())
    except _Disallowed as e:
        raise FormatError(path, str(e)) from None
    except RecursionError:
        raise FormatError(path, "data.pkl nests too deeply") from None
    except Exception as e:   # any malformed pickle: opcodes, arity, types; nothing else runs
        raise FormatError(path, f"invalid data.pkl: {type(e).__name__}: {str(e)[:200]}") from None


def load_pt_tensor(path: str | os.PathLike) -> np.ndarray:
    """The array of a ``.pt`` file holding one tensor (what msprobe writes per tensor)."""
    obj = open_pt(path)
    if not isinstance(obj, PtTensor):
        raise FormatError(path, f"holds a {type(obj).__name__}, not a single tensor")
    return obj.load()
