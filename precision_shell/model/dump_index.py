"""Index of the binary dump files of one dump set: by op name, newest first when asked.

Building the index reads directory entries only (names and sizes). A dump's protobuf header is
read the first time a command needs it and then kept, so start-up cost does not grow with the
size of the dumps.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from precision_shell.errors import FormatError
from precision_shell.formats.dump_file import DumpHeader, read_dump_header
from precision_shell.formats.dump_names import DumpName, escape_op_name, parse_dump_name, read_mapping_csv
from precision_shell.model.folder_listing import list_tree
from precision_shell.model.load_cache import LoadCache


class DumpFile(NamedTuple):  # a tuple: 10^5 of them are built at start-up
    folder: Path
    filename: str
    name: DumpName
    size: int

    @property
    def path(self) -> Path:
        return self.folder / self.filename

    @property
    def op_key(self) -> str:
        """The escaped op name as it appears in file names."""
        return self.name.op_name


class DumpIndex:
    def __init__(self, files: list[DumpFile], warnings: list[str] | None = None):
        self.files = sorted(files, key=lambda f: (f.name.timestamp, f.filename))
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


def _parse_dump_file(filename: str, folder: Path, warnings: list[str]) -> DumpName | None:
    """All-digit file names are hashed over-long names: the real name is in the folder's
    ``mapping.csv`` (formats.md §1.1)."""
    if not filename.isdigit():
        return parse_dump_name(filename)
    mapping = _mapping(folder, warnings)
    real = mapping.get(filename)
    if real is None:
        warnings.append(f"{folder / filename}: hashed dump name not in mapping.csv")
        return None
    return parse_dump_name(real)


_MAPPINGS: dict[Path, tuple[int, dict[str, str]]] = {}  # mapping.csv -> (mtime, rows), read once


def _mapping(folder: Path, warnings: list[str]) -> dict[str, str]:
    path = folder / "mapping.csv"
    try:
        stamp = path.stat().st_mtime_ns
    except OSError:
        return {}
    if _MAPPINGS.get(path, (None,))[0] != stamp:
        try:
            _MAPPINGS[path] = (stamp, read_mapping_csv(path))
        except FormatError as exc:
            warnings.append(str(exc))
            _MAPPINGS[path] = (stamp, {})
    return _MAPPINGS[path][1]


def _mapping_key(folder: Path) -> tuple:
    try:
        return ((folder / "mapping.csv").stat().st_mtime_ns,)
    except OSError:
        return ()


def scan_dump_dir(folder: Path, recursive: bool = False, cache: LoadCache | None = None) -> DumpIndex:
    """Index the dump files in ``folder`` (and below it when ``recursive``)."""
    listing = list_tree(Path(folder), _parse_dump_file, kind="dumps", recursive=recursive,
                        cache=cache, extra_key=_mapping_key)
    files = [DumpFile(f, name, parsed, size) for f, name, parsed, size in listing.entries]
    return DumpIndex(files, listing.warnings)
