"""Index of the binary dump files of one dump set: by op name, newest first when asked.

Building the index reads directory entries only: start-up needs counts, and gets them from one
regex test per file name; sizes (a stat per file) are read when first asked for. Looking up one
op parses only that op's file names; the full index (every name parsed, by-op table) is built when
a command needs all dumps or looks up many ops. A dump's protobuf header is read the first time a
command needs it and then kept. So start-up cost does not grow with the size of the dumps, and
little with their number.
"""

from __future__ import annotations

import threading
from itertools import repeat
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from precision_shell.errors import FormatError
from precision_shell.formats.dump_names import (
    DumpName, dump_names_in, escape_op_name, parse_dump_name, parse_dump_names, read_mapping_csv,
    unparseable_dump_names,
)
from precision_shell.formats.quoting import shown
from precision_shell.model.cache_codec import need, strings
from precision_shell.model.folder_listing import Listing, list_tree
from precision_shell.model.load_cache import LoadCache

if TYPE_CHECKING:
    from precision_shell.formats.dump_file import DumpHeader


class DumpFile(NamedTuple):  # a tuple: 10^5 of them are built on first lookup
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


_dump_file = DumpFile._make  # tuple.__new__ directly: a third of the cost of DumpFile(...)
_FILE_ORDER = attrgetter("name.timestamp", "filename")  # oldest first
_SINGLE_LOOKUPS = 64  # ops looked up one by one (parsing only their names) before indexing all


class DumpIndex:
    """``DumpIndex(files, warnings)`` indexes the given files now; ``DumpIndex.from_listing``
    indexes a folder listing on first use (``op_file_count`` and ``total_bytes`` do not parse)."""

    def __init__(self, files: list[DumpFile], warnings: list[str] | None = None):
        self.warnings = warnings or []
        self._listing: Listing | None = None
        self._lock = threading.Lock()  # the REPL's completion warm-up thread may build it too
        self._headers: dict[Path, DumpHeader] = {}
        self._files: list[DumpFile] | None = None
        self._opdebug: list[DumpFile] | None = None
        self._positions: dict[str, list[int]] | None = None
        self._single_lookups = 0
        self._index(files)

    @classmethod
    def from_listing(cls, listing: Listing) -> "DumpIndex":
        index = cls([])
        index.warnings = listing.warnings  # shared: sizes read later add their problems there
        index._listing, index._files, index._opdebug = listing, None, None
        return index

    def _index(self, files: list[DumpFile]) -> None:
        by_key: dict[str, list[DumpFile]] = {}
        opdebug, op_files = [], []
        ordered = sorted(files, key=_FILE_ORDER)
        for f in ordered:
            name = f.name  # fields, not the is_opdebug/op_key properties: 10^5 calls
            if name.op_type == "Opdebug":
                opdebug.append(f)
            else:
                op_files.append(f)
                by_key.setdefault(name.op_name, []).append(f)
        self._by_key, self._op_files, self._opdebug = by_key, op_files, opdebug
        self._files = ordered  # set last: other threads take a set _files as a complete index

    def _built(self) -> list[DumpFile]:
        if self._files is None:
            with self._lock:
                if self._files is None:
                    self._index(self._parse_listing())
        return self._files

    def _parse_listing(self) -> list[DumpFile]:
        files: list[DumpFile] = []
        for f in self._listing.folders:
            hashed = f.summary[0]
            real_names = [hashed.get(n, n) for n in f.names] if hashed else f.names
            files += map(_dump_file, zip(repeat(f.folder), f.names, parse_dump_names(real_names),
                                         f.sizes(self.warnings)))
        return files

    @property
    def files(self) -> list[DumpFile]:
        """Every dump, op dumps and Opdebug files, oldest first."""
        return self._built()

    @property
    def by_key(self) -> dict[str, list[DumpFile]]:
        """Escaped op name -> its dumps (no Opdebug files), oldest first."""
        self._built()
        return self._by_key

    @property
    def op_files(self) -> list[DumpFile]:
        self._built()
        return self._op_files

    @property
    def op_file_count(self) -> int:
        """``len(op_files)`` without parsing the file names."""
        if self._files is not None:
            return len(self._op_files)
        return sum(f.count - len(f.summary[1]) for f in self._listing.folders)

    @property
    def opdebug(self) -> list[DumpFile]:
        """Opdebug (overflow record) files, oldest first: few, so found without parsing the rest."""
        if self._opdebug is None:
            found = []
            for folder_files in self._listing.folders:
                hashed, wanted = folder_files.summary
                if not wanted:
                    continue
                found += [DumpFile(folder_files.folder, n, parse_dump_name(hashed.get(n, n)),
                                   folder_files.size_of(i, self.warnings, n))
                          for n, i in folder_files.positions_of(set(wanted)).items()]
            self._opdebug = sorted(found, key=_FILE_ORDER)
        return self._opdebug

    @property
    def total_bytes(self) -> int:
        if self._files is None:
            return self._listing.total_bytes()
        return sum(f.size for f in self._files)

    @property
    def known_bytes(self) -> int | None:
        """``total_bytes`` when every size is read already, else None (no stat here)."""
        if self._files is None and not self._listing.sizes_known():
            return None
        return self.total_bytes

    @property
    def listing(self) -> Listing | None:
        """The folder listing the index was built from (None: built from given files)."""
        return self._listing

    def _files_of_key(self, key: str) -> list[DumpFile]:
        """``by_key.get(key, [])``; before the index is built, only this op's names are parsed,
        so that one command's first lookup does not pay for all 10^5 dumps. A command that looks
        up many ops gets the full index instead."""
        if self._files is not None or self._single_lookups >= _SINGLE_LOOKUPS:
            return self.by_key.get(key, [])
        self._single_lookups += 1
        found = []
        for position in self._op_positions().get(key, ()):
            folder_files, i = self._listing.locate(position)
            filename = folder_files.names[i]
            real = folder_files.summary[0].get(filename, filename)
            found.append(DumpFile(folder_files.folder, filename, parse_dump_name(real),
                                  folder_files.size_of(i, self.warnings)))
        return sorted(found, key=_FILE_ORDER)

    def _op_positions(self) -> dict[str, list[int]]:
        """Escaped op name -> positions of its dumps in the listing, from the names' second
        field (the op name: a tenth of the cost of parsing them). No Opdebug files."""
        if self._positions is None:
            positions: dict[str, list[int]] = {}
            position = 0
            for folder_files in self._listing.folders:
                hashed, opdebug = folder_files.summary
                skip = set(opdebug)
                for filename in folder_files.names:
                    if filename not in skip:
                        op = hashed.get(filename, filename).split(".", 2)[1]
                        positions.setdefault(op, []).append(position)
                    position += 1
            self._positions = positions
        return self._positions

    def files_for_op(self, op_name: str) -> list[DumpFile]:
        """All dumps of an op (real GE name), oldest first. Escaping is lossy, so when several
        real names share one escaped name the header's unescaped op_name decides."""
        files = self._files_of_key(escape_op_name(op_name))
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
        from precision_shell.formats.dump_header import read_dump_header  # on first use: not at start-up

        hdr = self._headers.get(f.path)
        if hdr is None:
            hdr = self._headers[f.path] = read_dump_header(f.path)
        return hdr


def _select_dumps(names: list[str], folder: Path, warnings: list[str]) -> tuple[list[str], tuple]:
    """The dump files among a folder's file names; summary: (real name of each hashed file,
    Opdebug files). All-digit names are hashed over-long names: the real name is in the folder's
    ``mapping.csv`` (formats.md §1.1)."""
    accepted = dump_names_in(names)
    if len(accepted) < len(names):
        odd = unparseable_dump_names(names)
        if odd:
            warnings.append(f"{folder}: {len(odd)} file name{'s' if len(odd) > 1 else ''} not in the dump name "
                            f"form type.name.task[.stream].timestamp, skipped (e.g. {shown(odd[0])})")
    hashed: dict[str, str] = {}
    for filename in (n for n in names if n.isdigit()):
        real = _mapping(folder, warnings).get(filename)
        if real is None:
            warnings.append(f"{folder / filename}: hashed dump name not in mapping.csv")
        elif parse_dump_name(real) is not None:
            hashed[filename] = real
            accepted.append(filename)
        else:
            warnings.append(f"{folder / filename}: mapping.csv names it {shown(real)}, not a dump file name")
    if hashed:
        opdebug = [n for n in accepted if hashed.get(n, n).startswith("Opdebug.")]
    else:
        opdebug = [n for n in accepted if n.startswith("Opdebug.")]
    return accepted, (hashed, opdebug)


_MAPPINGS: dict[Path, tuple[int, dict[str, str]]] = {}  # mapping.csv -> (mtime, rows), read once


def _read_dump_summary(value, count: int) -> tuple[dict[str, str], list[str]]:
    """A cached summary of :func:`_select_dumps` (JSON: [hashed, opdebug]), checked."""
    need(type(value) is list and len(value) == 2 and type(value[0]) is dict, "summary: not [hashed, opdebug]")
    hashed, opdebug = value
    strings(list(hashed.values()), "summary: real names")
    return hashed, strings(opdebug, "summary: opdebug")


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
    return DumpIndex.from_listing(list_tree(Path(folder), _select_dumps, kind="dumps", read_summary=_read_dump_summary,
                                            recursive=recursive, cache=cache, extra_key=_mapping_key))
