"""Index of the binary dump files of one dump set: by op name, newest first when asked.

Building the index reads directory entries only (names and sizes). A dump's protobuf header is
read the first time a command needs it and then kept, so start-up cost does not grow with the
size of the dumps.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from precision_shell.errors import FormatError
from precision_shell.formats.dump_file import DumpHeader, read_dump_header
from precision_shell.formats.dump_names import DumpName, escape_op_name, parse_dump_name, read_mapping_csv


@dataclass(frozen=True)
class DumpFile:
    path: Path
    name: DumpName
    size: int

    @property
    def op_key(self) -> str:
        """The escaped op name as it appears in file names."""
        return self.name.op_name


class DumpIndex:
    def __init__(self, files: list[DumpFile], warnings: list[str] | None = None):
        self.files = sorted(files, key=lambda f: (f.name.timestamp, f.path.name))
        self.warnings = warnings or []
        self.by_key: dict[str, list[DumpFile]] = {}
        self.opdebug: list[DumpFile] = []
        for f in self.files:
            if f.name.is_opdebug:
                self.opdebug.append(f)
            else:
                self.by_key.setdefault(f.op_key, []).append(f)
        self._headers: dict[Path, DumpHeader] = {}

    @property
    def op_files(self) -> list[DumpFile]:
        return [f for f in self.files if not f.name.is_opdebug]

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def files_for_op(self, op_name: str) -> list[DumpFile]:
        """All dumps of an op (real GE name), oldest first. Escaping is lossy, so when several
        real names share one escaped name the header's unescaped op_name decides."""
        files = self.by_key.get(escape_op_name(op_name), [])
        if len(files) > 1 and len({f.name.op_type for f in files}) > 1:
            files = [f for f in files if self._header_name_matches(f, op_name)]
        return files

    def latest_for_op(self, op_name: str) -> DumpFile | None:
        files = self.files_for_op(op_name)
        return files[-1] if files else None

    def _header_name_matches(self, f: DumpFile, op_name: str) -> bool:
        try:
            return self.header(f).op_name in ("", op_name)
        except FormatError:
            return True

    def header(self, f: DumpFile) -> DumpHeader:
        hdr = self._headers.get(f.path)
        if hdr is None:
            hdr = self._headers[f.path] = read_dump_header(f.path)
        return hdr


def scan_dump_dir(folder: Path, recursive: bool = False) -> DumpIndex:
    """Index the dump files in ``folder`` (and below it when ``recursive``).

    All-digit file names are hashed over-long names: their real names come from the folder's
    ``mapping.csv`` (formats.md §1.1).
    """
    files: list[DumpFile] = []
    warnings: list[str] = []
    folders = [folder]
    while folders:
        current = folders.pop()
        mapping: dict[str, str] | None = None
        try:
            entries = list(os.scandir(current))
        except OSError as exc:
            warnings.append(f"{current}: cannot list folder ({exc.strerror})")
            continue
        for entry in entries:
            if entry.is_dir():
                if recursive:
                    folders.append(Path(entry.path))
                continue
            name = entry.name
            if name.isdigit():
                if mapping is None:
                    mapping = _load_mapping(Path(current), warnings)
                real = mapping.get(name)
                if real is None:
                    warnings.append(f"{entry.path}: hashed dump name not in mapping.csv")
                    continue
                parsed = parse_dump_name(real)
            else:
                parsed = parse_dump_name(name)
            if parsed is None:
                continue
            try:
                size = entry.stat().st_size
            except OSError as exc:
                warnings.append(f"{entry.path}: cannot stat ({exc.strerror})")
                continue
            files.append(DumpFile(Path(entry.path), parsed, size))
    return DumpIndex(files, warnings)


def _load_mapping(folder: Path, warnings: list[str]) -> dict[str, str]:
    path = folder / "mapping.csv"
    if not path.exists():
        return {}
    try:
        return read_mapping_csv(path)
    except FormatError as exc:
        warnings.append(str(exc))
        return {}
