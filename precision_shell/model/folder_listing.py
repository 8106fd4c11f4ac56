"""List the files of a folder tree that a name parser accepts, with sizes, cached per folder.

Used for dump folders (tens of thousands of files) and golden folders. Paths are kept as a shared
folder ``Path`` plus a file name: building a ``Path`` per file costs more than the listing itself.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from precision_shell.model.load_cache import LoadCache, folder_key

# parse(file name, folder) -> parsed name or None (None: not a file of this kind)
NameParser = Callable[[str, Path, list], Any]


@dataclass
class Listing:
    entries: list[tuple[Path, str, Any, int]] = field(default_factory=list)  # folder, name, parsed, size
    warnings: list[str] = field(default_factory=list)


def _scan_one(folder: Path, parse: NameParser) -> tuple[list[tuple[str, Any, int]], list[str], list[str]]:
    files, subdirs, warnings = [], [], []
    try:
        with os.scandir(folder) as it:
            entries = list(it)
    except OSError as exc:
        return [], [], [f"{folder}: cannot list folder ({exc.strerror})"]
    for entry in entries:
        try:
            if entry.is_dir():
                subdirs.append(entry.name)
                continue
            parsed = parse(entry.name, folder, warnings)
            if parsed is None:
                continue
            files.append((entry.name, parsed, entry.stat().st_size))
        except OSError as exc:
            warnings.append(f"{entry.path}: cannot stat ({exc.strerror})")
    return files, sorted(subdirs), warnings


def list_tree(root: Path, parse: NameParser, *, kind: str, recursive: bool,
              cache: LoadCache | None = None, extra_key: Callable[[Path], tuple] = lambda p: ()) -> Listing:
    listing = Listing()
    stack = [root]
    while stack:
        folder = stack.pop()
        key = None
        cached = None
        if cache is not None:
            try:
                key = folder_key(folder) + extra_key(folder)
                cached = cache.load(kind, key)
            except OSError:
                key = None
        if cached is None:
            cached = _scan_one(folder, parse)
            if key is not None:
                cache.store(kind, key, cached)
        files, subdirs, warnings = cached
        listing.entries += [(folder, name, parsed, size) for name, parsed, size in files]
        listing.warnings += warnings
        if recursive:
            stack.extend(folder / d for d in reversed(subdirs))
    return listing
