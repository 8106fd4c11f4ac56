"""What the command table (:mod:`.table`) holds: a command's or variant's name, module, summary,
aliases; the kinds that share or inherit commands. Read by the registry before any command
module is imported."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class CommandInfo:
    """What help and completion show of a command (or of a kind's variant of it) before its
    module is imported; ``module`` registers it when imported."""

    name: str
    module: str
    summary: str
    aliases: tuple[str, ...] = ()
    needs_session: bool = True


@dataclass(frozen=True)
class CommandTable:
    """The static table of a registry (see :mod:`.table`): commands, variants by (kind, name),
    commands shared per kind, and the kind each kind inherits from."""

    commands: tuple[CommandInfo, ...] = ()
    variants: dict[tuple[str, str], CommandInfo] = field(default_factory=dict)
    shared: dict[str, tuple[str, ...]] = field(default_factory=dict)
    bases: dict[str, str] = field(default_factory=dict)
