"""Commands: argparse adapters over the analyses, registered in :mod:`.registry`.

The shell's registry knows every command from its static table (:mod:`.table`) and imports a
command's module on first use; importing this package imports no command module.
"""

from precision_shell.commands.registry import REGISTRY

__all__ = ["REGISTRY"]
