"""Open input files so that a planted special file cannot hang pshell; word listing failures.

``open()`` of a FIFO blocks until some process writes to it, and a character device can stream
without end; a shared workspace (a tarball keeps FIFOs) may hold either under a dump's or a
graph's name. Inputs are opened non-blocking and refused unless they are regular files, with an
``OSError`` whose ``strerror`` the readers' usual ``cannot read: <strerror>`` line shows.
"""

from __future__ import annotations

import errno
import os
import stat

from precision_shell.errors import FormatError

NOT_REGULAR = "not a regular file (a FIFO, socket or device)"


def open_regular(path: str | os.PathLike) -> int:
    """A read-only descriptor of ``path``; OSError unless it is a regular file."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # O_NONBLOCK: no wait for a FIFO's writer
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), os.fspath(path))
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, NOT_REGULAR, os.fspath(path))
    except OSError:
        os.close(fd)
        raise
    return fd


def read_regular(path: str | os.PathLike) -> bytes:
    """The whole of a regular file (``Path.read_bytes`` that refuses FIFOs and devices)."""
    with os.fdopen(open_regular(path), "rb") as handle:
        return handle.read()


def cannot_list(folder, exc: OSError) -> str:
    """The one line for a folder whose entries cannot be read (EACCES, ...): never taken for an
    empty folder."""
    return f"{folder}: cannot list folder ({exc.strerror or exc})"


TEXT_CAP = 16 << 20     # scripts, config files: a few KB in practice


def read_text_input(path: str | os.PathLike, what: str = "file", cap: int = TEXT_CAP,
                    encoding: str = "utf-8") -> str:
    """A text input (a script, the config, a mapping) read whole, but only from a regular file of
    at most ``cap`` bytes: a FIFO, a device (``/dev/zero``), a folder or a huge file is one
    FormatError line naming the file, never a hang or a read without end."""
    shown = os.fspath(path)
    try:
        fd = open_regular(os.path.expanduser(shown))
    except OSError as exc:
        raise FormatError(shown, f"cannot read {what} ({exc.strerror or exc})") from None
    with os.fdopen(fd, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > cap:
            raise FormatError(shown, f"cannot read {what}: {size:,} bytes, more than the "
                                     f"{cap:,} a {what} may have")
        data = handle.read(cap + 1)
    if len(data) > cap:     # grew while read
        raise FormatError(shown, f"cannot read {what}: more than {cap:,} bytes")
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise FormatError(shown, f"cannot read {what}: not UTF-8 text (byte {exc.start})") from None
