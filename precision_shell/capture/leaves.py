"""dump.json leaves (framework-dumps.md A2) for the values a call saw, with deferred statistics.

Statistics are taken in float32 after an up-cast (float64 stays float64), unlike msprobe's
in-dtype ones, so a bf16 run's Norm is not rounded to 8 mantissa bits. Each leaf's statistics stay
a small device tensor until :meth:`LeafMaker.resolve`, which moves them all to the host at once:
one device sync per flush, not one per call. Tensor files are written as the call happens, so
host memory stays bounded; :class:`TensorFiles` stops writing (statistics go on) when the
``max_bytes`` budget or the disk runs out, and says why once.
"""

from __future__ import annotations

import errno
import os
import weakref

import torch

_STAT_KEYS = ("Max", "Min", "Mean", "Norm")


class SameBytes:
    """Values remembered per tensor contents within one step: a weight is linear's ``input.1``
    and its module's ``parameters.weight``, a module's output is its last API's output. The key
    is (storage address, offset, shape, stride, dtype, device, version); a hit counts only while
    the tensor first seen is alive, so the address cannot be a freed tensor's reused memory."""

    def __init__(self) -> None:
        self._seen: dict[tuple, tuple] = {}

    @staticmethod
    def _key(t: torch.Tensor) -> tuple | None:
        try:
            return (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape),
                    tuple(t.stride()), t.dtype, t.device, t._version)
        except (RuntimeError, NotImplementedError):     # sparse, fake: no plain storage
            return None

    def get(self, t: torch.Tensor):
        found = self._seen.get(self._key(t))
        return found[1] if found is not None and found[0]() is not None else None

    def put(self, t: torch.Tensor, value) -> None:
        key = self._key(t)
        if key is not None:
            self._seen[key] = (weakref.ref(t), value)


class TensorFiles:
    """``dump_tensor_data/{data_name}`` writer with a byte budget; the same bytes saved twice
    in a step become a hard link (no bytes written)."""

    def __init__(self, folder: str, max_bytes: int | None) -> None:
        self.folder = folder
        self.max_bytes = max_bytes
        self.bytes_written = 0
        self.files_written = 0
        self.linked = 0
        self.stopped: str | None = None     # why tensors are no longer written
        self._saved = SameBytes()

    def save(self, tensor: torch.Tensor, data_name: str) -> bool:
        if self.stopped:
            return False
        path = os.path.join(self.folder, data_name)
        earlier = self._saved.get(tensor)
        if earlier is not None and self._link(earlier, path):
            return True
        size = tensor.numel() * tensor.element_size()
        if self.max_bytes is not None and self.bytes_written + size > self.max_bytes:
            self.stopped = (f"--max-bytes {self.max_bytes} reached after {self.bytes_written} "
                            f"bytes in {self.files_written} files")
            return False
        try:
            torch.save(_exact_cpu_copy(tensor), path)
        except OSError as exc:
            reason = "disk full" if exc.errno == errno.ENOSPC else (exc.strerror or str(exc))
            self.stopped = f"writing {path} failed: {reason}"
            try:
                os.remove(path)
            except OSError:
                pass
            return False
        self.bytes_written += size
        self.files_written += 1
        self._saved.put(tensor, path)
        return True

    def _link(self, existing: str, path: str) -> bool:
        try:
            os.link(existing, path)
        except OSError:
            return False        # no hard links here: write the file
        self.files_written += 1
        self.linked += 1
        return True


def _exact_cpu_copy(tensor: torch.Tensor) -> torch.Tensor:
    """A CPU tensor whose storage is exactly its elements (torch.save writes whole storages);
    a CPU tensor that already is one is saved as it is, without a copy."""
    t = tensor.detach()
    if t.device.type == "cpu" and t.is_contiguous() and t.storage_offset() == 0 \
            and t.untyped_storage().nbytes() == t.numel() * t.element_size():
        return t
    return t.to("cpu").contiguous().clone()


def _stat_vector(t: torch.Tensor) -> tuple[torch.Tensor, str] | None:
    """(float64 vector, kind): kind "float" -> Max, Min, Mean, Norm; "int" -> Max, Min; "bool"."""
    if t.numel() == 0 or t.device.type == "meta":
        return None
    t = t.detach()
    if t.dtype is torch.bool:
        return torch.stack((t.any(), t.all())).to(torch.float64), "bool"
    if t.is_complex():
        t = t.abs()
    if t.is_floating_point():
        x = t if t.dtype is torch.float64 else t.to(torch.float32)
        stats = torch.stack((x.max(), x.min(), x.mean(), torch.linalg.vector_norm(x)))
        return stats.to(torch.float64), "float"
    return torch.stack((t.max(), t.min())).to(torch.float64), "int"


class LeafMaker:
    """Builds leaves; tensor leaves get their statistics filled in by :meth:`resolve`."""

    def __init__(self, files: TensorFiles | None) -> None:
        self.files = files
        self._stats = SameBytes()
        self._pending: list[tuple[dict, torch.Tensor, str]] = []

    def tensor(self, t: torch.Tensor, data_name: str | None) -> dict:
        leaf = {"type": "torch.Tensor", "dtype": str(t.dtype), "shape": list(t.shape),
                "Max": None, "Min": None, "Mean": None, "Norm": None,
                "requires_grad": bool(t.requires_grad)}
        stats = self._stats.get(t)
        if stats is None:
            stats = _stat_vector(t)
            self._stats.put(t, stats)
        if stats is not None:
            self._pending.append((leaf, *stats))
        if data_name is not None and self.files is not None and t.device.type != "meta":
            file_name = data_name + ".pt"
            if self.files.save(t, file_name):
                leaf["data_name"] = file_name
        return leaf

    def value(self, v, data_name: str | None, on_tensor=None):
        """The leaf tree of any argument; ``on_tensor(tensor, path)`` sees every tensor leaf."""
        if isinstance(v, torch.Tensor):
            if on_tensor is not None:
                on_tensor(v, data_name)
            return self.tensor(v, data_name)
        if v is None:
            return None
        if isinstance(v, (list, tuple)) and not isinstance(v, torch.Size):
            return [self.value(x, _child(data_name, i), on_tensor) for i, x in enumerate(v)]
        if isinstance(v, dict):
            return {str(k): self.value(x, _child(data_name, k), on_tensor) for k, x in v.items()}
        if isinstance(v, bool):
            return {"type": "bool", "value": v}
        if isinstance(v, (int, float, str)):
            return {"type": type(v).__name__, "value": v}
        if isinstance(v, torch.Size):
            return {"type": "torch.Size", "value": list(v)}
        if isinstance(v, slice):
            return {"type": "slice", "value": [_plain(v.start), _plain(v.stop), _plain(v.step)]}
        if isinstance(v, (torch.dtype, torch.device)):
            return {"type": f"torch.{type(v).__name__}", "value": str(v)}
        return {"type": f"{type(v).__module__}.{type(v).__qualname__}"}

    def resolve(self) -> None:
        """Fill every pending leaf's statistics: one host transfer per device."""
        by_device: dict[torch.device, list] = {}
        for item in self._pending:
            by_device.setdefault(item[1].device, []).append(item)
        self._pending = []
        for items in by_device.values():
            values = torch.cat([vec for _, vec, _ in items]).tolist()
            pos = 0
            for leaf, vec, kind in items:
                chunk = values[pos:pos + vec.numel()]
                pos += vec.numel()
                if kind == "bool":
                    leaf["Max"], leaf["Min"] = bool(chunk[0]), bool(chunk[1])
                elif kind == "int":
                    leaf["Max"], leaf["Min"] = int(chunk[0]), int(chunk[1])
                else:
                    leaf.update(zip(_STAT_KEYS, chunk))


def _child(path: str | None, key) -> str | None:
    return None if path is None else f"{path}.{key}"


def _plain(v):
    return v if v is None or isinstance(v, (int, float)) else str(v)
