"""``decode``/``dc``: write every tensor of a binary dump as ``.npy`` (Opdebug: as JSON)."""

from __future__ import annotations

import json
from pathlib import Path

from precision_shell.atomic_write import write_atomic
from precision_shell.commands.registry import arg, command
from precision_shell.commands.results import Table
from precision_shell.errors import CommandError
from precision_shell.formats.dump_names import parse_dump_name
from precision_shell.model.session import Session


def find_dump_path(session: Session, text: str) -> Path:
    """A dump given as a path, a file name in the active dump folder, or an op name."""
    path = Path(text).expanduser()
    if path.is_file():
        return path
    if session.active is not None and (session.active.path / text).is_file():
        return session.active.path / text
    if path.exists():
        raise CommandError(f"{path}: not a file")
    if session.graph is not None or session.dumps.files:
        name = session.resolve_op(text).name if session.graph is not None else text
        dump = session.op_dump(name)
        if dump is not None:
            return dump.path
        raise CommandError(f"op {name} has no dump file in the active dump set")
    raise CommandError(f"{text}: no such dump file")


def _npy_ready(array):
    """bf16 and fp8 have no portable .npy dtype: written as float32 (exact), as the vendor's
    convert does for bf16 (the table-decoded low-precision types are float32 already)."""
    from precision_shell.formats.dtypes import npy_ready

    array, note = npy_ready(array)
    return array, note or ""


@command("decode", aliases=("dc",),
         summary="Write each input/output of a binary dump as .npy (logical layout by default).",
         example="dc Conv2D.conv1_Conv2D.3.0.1706167904000000\n"
                 "dc conv1/Conv2D -f device -o /tmp/conv1",
         args=[arg("dumpfile", complete="dump", help="dump file path, file name in the active dump "
                                                      "folder, or an op name (its newest dump)"),
               arg("-f", "--format", choices=("logical", "device"), default="logical",
                   help="logical: restore the original shape (default); device: keep the device layout"),
               arg("-o", "--output", metavar="DIR",
                   help="output folder (default: <output folder>/decode)")])
def decode(session: Session, args) -> Table:
    import numpy as np  # the readers and numpy: on first use, not at start-up

    from precision_shell.formats.dump_file import read_device_array, read_dump_header, read_logical_array
    from precision_shell.formats.opdebug import decode_opdebug_buffer

    path = find_dump_path(session, args.dumpfile)
    header = read_dump_header(path)
    out_dir = session.output_path(args.output, "decode", folder=True)
    guard = session.output_guard()  # each file too: an input file may sit in the folder
    rows, json_rows = [], []
    parsed = parse_dump_name(path.name)
    if parsed is not None and parsed.is_opdebug:
        for entry in header.outputs:
            record = decode_opdebug_buffer(read_device_array(header, entry).tobytes(), path)
            target = out_dir / f"{path.name}.output.{entry.index}.json"
            guard.check(target)
            write_atomic(target, lambda fh: json.dump(record, fh, indent=2))
            rows.append([f"output {entry.index}", "opdebug record", "", "", str(target)])
            json_rows.append({"tensor": f"output:{entry.index}", "file": str(target), "kind": "opdebug"})
        return Table(["tensor", "dtype", "format", "shape", "file"], rows, json_rows=json_rows,
                     title=f"decoded {path.name}")
    for entry in header.inputs + header.outputs:
        if args.format == "device":
            array = read_device_array(header, entry)
        else:
            array = read_logical_array(header, entry)
        array, note = _npy_ready(array)
        target = out_dir / f"{path.name}.{entry.kind}.{entry.index}.npy"
        guard.check(target)
        write_atomic(target, lambda fh: np.save(fh, np.ascontiguousarray(array)), binary=True)
        fmt = entry.format_name if args.format == "device" else f"{entry.format_name} -> logical"
        rows.append([f"{entry.kind} {entry.index}", entry.dtype_name, fmt, str(tuple(array.shape)),
                     str(target) + (f"  ({note})" if note else "")])
        json_rows.append({"tensor": f"{entry.kind}:{entry.index}", "dtype": entry.dtype_name,
                          "format": entry.format_name, "shape": list(array.shape),
                          "file": str(target)})
    return Table(["tensor", "dtype", "format", "shape", "file"], rows, json_rows=json_rows,
                 title=f"decoded {path.name} ({header.op_name or '?'})", notes=[f"written to {out_dir}"])
