"""The compare exporters (``export suspects|compare``, any format): what ``vcs`` and ``vc`` left in
the session, written for the team. Registered in compare_cmd, imported on first use."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from precision_shell.analysis.compare.engine import write_vendor_csv
from precision_shell.analysis.root_cause.graph import Suspect, fusion_switch_config, keep_fp32_names
from precision_shell.atomic_write import write_atomic
from precision_shell.commands.export import write_rows
from precision_shell.errors import CommandError
from precision_shell.model.session import Session


def _suspects(session: Session) -> list[Suspect]:
    found = session.results.get("vcs")
    if found is None:
        raise CommandError("no suspect list yet: run `vcs` first")
    return found.suspects


def export_suspects(fmt: str) -> Callable[[Session, Path], int]:
    def export(session: Session, path: Path) -> int:
        suspects = _suspects(session)
        if fmt == "csv":
            return write_rows(path, [s.to_flat_json() for s in suspects], "csv")
        return write_rows(path, [s.to_json() for s in suspects], "json")
    return export


def fusion_switch_text(suspects: list[Suspect]) -> tuple[str, int]:
    """The fusion switch config turning off the passes behind the fused roots, and how many."""
    config, _unknown = fusion_switch_config(suspects)
    count = sum(len(v) for v in config["Switch"].values())
    if not count:
        roots = [s.op for s in suspects if s.role == "root"]
        raise CommandError("no fused root op in the suspect list, so no fusion pass to switch off"
                           + (f" (roots: {', '.join(roots)})" if roots else ""))
    return json.dumps(config, indent=4) + "\n", count


def keep_fp32_text(suspects: list[Suspect]) -> tuple[str, int]:
    """The keep-fp32 list: one framework op name of a root per line, and how many."""
    names = keep_fp32_names(suspects)
    if not names:
        raise CommandError("no root op in the suspect list: nothing to keep in fp32")
    return "".join(n + "\n" for n in names), len(names)


def _write_text(make: Callable[[list[Suspect]], tuple[str, int]]) -> Callable[[Session, Path], int]:
    def export(session: Session, path: Path) -> int:
        text, count = make(_suspects(session))
        write_atomic(path, lambda fh: fh.write(text))
        return count
    return export


export_fusion_switch = _write_text(fusion_switch_text)
export_keep_fp32 = _write_text(keep_fp32_text)


def export_compare(fmt: str) -> Callable[[Session, Path], int]:
    def export(session: Session, path: Path) -> int:
        result = session.results.get("compare")
        if result is None:
            raise CommandError("no compare result yet: run `vc` first")
        if fmt == "csv":
            return write_vendor_csv(path, result)
        return write_rows(path, [r.to_json() for r in result.iter_done()], "json")
    return export


