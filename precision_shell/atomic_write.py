"""Writing files atomically: a reader never sees half a file, a failure leaves none.

Every file pshell writes (exports, redirects, ``dc``/``pt -w`` arrays, DOT files, compare CSVs,
cache entries, the config file) goes through :func:`write_atomic`. The temporary file that
``mkstemp`` makes is private (0600); before it is renamed into place it gets the mode a plain
``open(path, "w")`` would have given: the existing file's mode when it replaces one, else
``0o666`` less the umask, so colleagues can read exports as they can read any other file.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import IO, Callable

from precision_shell.errors import FormatError


def _read_umask() -> int:
    """The process umask, read once at import. Linux shows it in /proc without changing it;
    elsewhere it is set and put back, before any thread of pshell's exists."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


NEW_FILE_MODE = 0o666 & ~_read_umask()


def _mode_for(path: Path) -> int:
    try:
        st = os.stat(path)
    except OSError:
        return NEW_FILE_MODE
    return stat.S_IMODE(st.st_mode) if stat.S_ISREG(st.st_mode) else NEW_FILE_MODE


def write_atomic(path: str | os.PathLike, write: Callable[[IO], None], *, binary: bool = False) -> Path:
    """Write via ``write(fileobj)`` into a temporary file beside ``path``, then rename it.
    Any OSError (missing folder, full disk, permissions) is a :class:`FormatError` naming ``path``."""
    path = Path(path)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        if binary:
            fh = os.fdopen(fd, "wb")
        else:
            fh = os.fdopen(fd, "w", encoding="utf-8", newline="")
        with fh:
            os.fchmod(fd, _mode_for(path))
            write(fh)
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise FormatError(path, f"cannot write ({exc.strerror or exc})") from None
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
    return path
