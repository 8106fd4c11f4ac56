"""Golden (CPU/GPU run) tensors: ``{escaped op}.{output_index}.{timestamp}.npy`` files.

Keyed the way the vendor engine looks them up (formats.md §5): the framework op name with ``/``
and ``.`` replaced by ``_``, plus the output index; the newest timestamp wins.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from precision_shell.formats.dump_names import GoldenName, escape_op_name, parse_golden_name
from precision_shell.model.folder_listing import list_tree
from precision_shell.model.load_cache import LoadCache


class GoldenFile(NamedTuple):  # a tuple: 10^5 of them are built at start-up
    folder: Path
    filename: str
    name: GoldenName
    size: int

    @property
    def path(self) -> Path:
        return self.folder / self.filename


class GoldenIndex:
    def __init__(self, folder: Path | None, files: list[GoldenFile]):
        self.folder = folder
        self.by_key: dict[tuple[str, int], GoldenFile] = {}
        for f in files:
            key = (f.name.op_name, f.name.output_index)
            old = self.by_key.get(key)
            # several dumps of one tensor: the newest timestamp wins (formats.md §5)
            if old is None or (f.name.timestamp or 0, f.filename) > (old.name.timestamp or 0, old.filename):
                self.by_key[key] = f

    def __len__(self) -> int:
        return len(self.by_key)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.by_key.values())

    def find(self, op_name: str, output_index: int) -> GoldenFile | None:
        return self.by_key.get((escape_op_name(op_name), output_index))

    def outputs_of(self, op_name: str) -> list[GoldenFile]:
        key = escape_op_name(op_name)
        return [f for (name, _), f in sorted(self.by_key.items()) if name == key]

    def names(self) -> list[str]:
        """``escaped_op:index`` of every golden tensor, sorted (for listings and completion)."""
        return [f"{name}:{idx}" for name, idx in sorted(self.by_key)]


def scan_golden_dir(folder: Path | None, cache: LoadCache | None = None) -> GoldenIndex:
    if folder is None:
        return GoldenIndex(None, [])
    listing = list_tree(Path(folder), lambda name, _folder, _warnings: parse_golden_name(name),
                        kind="golden", recursive=True, cache=cache)
    return GoldenIndex(folder, [GoldenFile(f, name, parsed, size) for f, name, parsed, size in listing.entries])
