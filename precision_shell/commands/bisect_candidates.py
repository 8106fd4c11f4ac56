"""What ``bisect`` may change, in pshell's ranking order: the candidates of each knob.

``fusion``: the effective passes of ``fusion_result.json`` (effect_times > 0), the passes blamed for
suspect fused ops first (roots before propagated ops, in ``vcs`` order), the rest in report order;
``all`` adds passes that matched without fusing. ``keep-fp32``: the suspect ops of the last ``vcs``
that stand for framework ops (GE's Cast/TransData cannot be kept), roots first, each group by
excess (error vs an ideal kernel's, when replay can tell) then cosine; ``all`` adds every other
executed op with framework names, in execution order. ``FILE``: one name per line.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from precision_shell.analysis.bisect import Candidate
from precision_shell.analysis.root_cause.graph import guess_pass_kind, pass_kind_map
from precision_shell.errors import CommandError, FormatError
from precision_shell.formats.quoting import shown

MAX_FILE_BYTES = 1 << 20


def _suspects(session: Any) -> list:
    found = session.results.get("vcs")
    return list(found.suspects) if found is not None else []


def _cosine_text(s) -> str:
    c = s.worst.metrics.cosine
    return "nan" if c != c else f"{c:.6f}"


def fusion_candidates(session: Any, which: str) -> list[Candidate]:
    kinds = pass_kind_map(session.fusion)
    listed: list[tuple[str, str, int]] = []          # (pass, kind, effect) in report order
    for stats in session.fusion or ():
        for p in stats.passes:
            if p.name not in [x[0] for x in listed] and (which == "all" or p.effect_times > 0):
                listed.append((p.name, p.kind, p.effect_times))
    if session.graph is not None and (which == "all" or not session.fusion):
        for op in session.graph.in_exec_order():
            for name in op.passes:
                if name not in [x[0] for x in listed]:
                    listed.append((name, guess_pass_kind(name, kinds), 1))
    if not listed:
        where = "fusion_result.json lists no pass with effect_times > 0" if session.fusion else \
            "no fusion_result.json and no fused op in the graph"
        raise CommandError(f"bisect fusion: no fusion pass to switch off ({where}); "
                           f"--candidates all|FILE names others")
    blamed: dict[str, str] = {}
    suspects = _suspects(session)
    for s in sorted(suspects, key=lambda s: s.role != "root"):
        for name in s.passes:
            blamed.setdefault(name, f"fused {s.role} {s.op} (cosine {_cosine_text(s)})")
    by_name = {name: (kind, effect) for name, kind, effect in listed}
    ranked = [n for n in blamed if n in by_name] + [n for n, _, _ in listed if n not in blamed]
    out = []
    for n in ranked:
        kind, effect = by_name[n]
        why = blamed.get(n) or (f"fused {effect}x" if effect else "matched, no effect")
        out.append(Candidate(n, (n,), kind if kind in ("graph", "ub") else "graph", why))
    return out


def keep_fp32_candidates(session: Any, which: str) -> list[Candidate]:
    suspects = [s for s in _suspects(session) if s.golden_ops]
    if not suspects and which != "all":
        raise CommandError("bisect keep-fp32: no suspect op with framework names: run `vcs` first "
                           "(or give --candidates all|FILE)")
    excess = _excess(session, suspects)

    def rank(s) -> tuple:
        e = excess.get(s.op)
        c = s.worst.metrics.cosine
        return (s.role != "root", e is None, -(e or 0.0), -math.inf if c != c else c, s.order)

    out, seen = [], set()
    for s in sorted(suspects, key=rank):
        e = excess.get(s.op)
        why = f"{s.role}, cosine {_cosine_text(s)}" + (f", excess {e:.3g}" if e is not None else "")
        out.append(Candidate(s.op, tuple(s.golden_ops), "", why))
        seen.add(s.op)
    if which == "all" and session.graph is not None:
        for op in session.graph.in_exec_order():
            if op.key not in seen and op.original_ops and op.type not in ("Cast", "TransData"):
                out.append(Candidate(op.key, tuple(op.original_ops), "", "executed op (--candidates all)"))
                seen.add(op.key)
    if not out:
        raise CommandError("bisect keep-fp32: no op with framework names in the graph")
    return out


def _excess(session: Any, suspects: list) -> dict[str, float]:
    """Observed / ideal error per suspect where replay has a kernel; {} when it cannot tell."""
    try:
        from precision_shell.commands.replay_run import excess_of

        found = excess_of(session, suspects)
    except Exception:    # ranking help only: never worth failing the search for
        return {}
    return {op: v[2] for op, v in found.items() if v is not None and v[2] == v[2] and math.isfinite(v[2])}


def file_candidates(session: Any, knob: str, path: str) -> list[Candidate]:
    """One name per line (``#`` comments, blank lines skipped); FormatError on a bad file."""
    try:
        with open(Path(path).expanduser(), "rb") as fh:
            raw = fh.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise FormatError(path, f"cannot read candidates ({exc.strerror or exc})") from None
    if len(raw) > MAX_FILE_BYTES:
        raise FormatError(path, f"candidates file larger than {MAX_FILE_BYTES >> 20} MiB: not a name list")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise FormatError(path, "candidates file is not UTF-8 text") from None
    names: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        name = line.strip()
        if not name or name.startswith("#"):
            continue
        if any(ord(ch) < 32 or ch == "\x7f" for ch in name) or " " in name:
            raise FormatError(path, f"line {number}: not a name ({shown(name)})")
        if name in names:
            raise FormatError(path, f"line {number}: {shown(name)} listed twice")
        names.append(name)
    if not names:
        raise FormatError(path, "candidates file names nothing")
    if knob == "fusion":
        kinds = pass_kind_map(session.fusion)
        return [Candidate(n, (n,), "ub" if guess_pass_kind(n, kinds) == "ub" else "graph", f"listed in {path}")
                for n in names]
    return [Candidate(n, (n,), "", f"listed in {path}") for n in names]


def _writable(c: Candidate) -> bool:
    """A name a config file can hold on one line (names from data may carry anything)."""
    return all(e and not any(ord(ch) < 32 or ch == "\x7f" for ch in e) for e in (c.name, *c.entries))


def candidates_for(session: Any, knob: str, which: str) -> list[Candidate]:
    if which not in ("suspects", "all"):
        return file_candidates(session, knob, which)
    found = fusion_candidates(session, which) if knob == "fusion" else keep_fp32_candidates(session, which)
    kept = [c for c in found if _writable(c)]
    if not kept:
        raise CommandError(f"bisect {knob}: no candidate whose name a config file can hold "
                           f"({len(found)} with control characters)")
    return kept
