"""The log file for warnings and internal-error tracebacks (the screen shows one line)."""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

_LOGGER = logging.getLogger("precision_shell")


def state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "pshell"


def setup_logging(path: str | None = None) -> Path:
    """Log to ``path`` (default ``$XDG_STATE_HOME/pshell/pshell.log``), falling back to the temp dir."""
    candidates = [Path(path)] if path else [state_dir() / "pshell.log",
                                            Path(tempfile.gettempdir()) / "pshell.log"]
    for candidate in candidates:
        try:
            candidate.parent.mkdir(parents=True, exist_ok=True)
            handler = logging.FileHandler(candidate, encoding="utf-8", delay=True)
        except OSError:
            continue
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        _LOGGER.handlers[:] = [handler]
        _LOGGER.setLevel(logging.INFO)
        _LOGGER.propagate = False
        return candidate
    _LOGGER.addHandler(logging.NullHandler())
    return Path(os.devnull)


def log_internal_error(context: str) -> None:
    _LOGGER.exception("internal error in %s", context)
