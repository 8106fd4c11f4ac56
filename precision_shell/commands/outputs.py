"""Writing result files atomically: a reader never sees half a file, a failure leaves none."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import IO, Callable

from precision_shell.errors import FormatError


def write_atomic(path: Path, write: Callable[[IO], None], *, binary: bool = False) -> Path:
    """Write via ``write(fileobj)`` into a temporary file beside ``path``, then rename it."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        if binary:
            fh = os.fdopen(fd, "wb")
        else:
            fh = os.fdopen(fd, "w", encoding="utf-8", newline="")
        with fh:
            write(fh)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise FormatError(path, f"cannot write ({exc.strerror})") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
