"""Where the config file lives by default: a module of its own so that a batch run, which only
guards that path against being written over, need not import :mod:`precision_shell.config`
(its keys table and INI reader)."""

from __future__ import annotations

import os
from pathlib import Path


def default_config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "pshell" / "config.ini"
