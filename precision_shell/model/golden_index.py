"""Golden (CPU/GPU run) tensors: ``{escaped op}.{output_index}.{timestamp}.npy`` files.

Keyed the way the vendor engine looks them up (formats.md §5): the framework op name with ``/``
and ``.`` replaced by ``_``, plus the output index; the newest timestamp wins.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from precision_shell.formats.dump_names import GoldenName, escape_op_name, parse_golden_name


@dataclass(frozen=True)
class GoldenFile:
    path: Path
    name: GoldenName
    size: int


class GoldenIndex:
    def __init__(self, folder: Path | None, files: list[GoldenFile]):
        self.folder = folder
        self.by_key: dict[tuple[str, int], GoldenFile] = {}
        for f in sorted(files, key=lambda f: (f.name.timestamp or 0, f.path.name)):
            self.by_key[(f.name.op_name, f.name.output_index)] = f  # later (newer) wins

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


def scan_golden_dir(folder: Path | None) -> GoldenIndex:
    if folder is None:
        return GoldenIndex(None, [])
    files = []
    stack = [folder]
    while stack:
        current = stack.pop()
        try:
            entries = list(os.scandir(current))
        except OSError:
            continue
        for entry in entries:
            if entry.is_dir():
                stack.append(Path(entry.path))
                continue
            parsed = parse_golden_name(entry.name)
            if parsed is not None:
                files.append(GoldenFile(Path(entry.path), parsed, entry.stat().st_size))
    return GoldenIndex(folder, files)
