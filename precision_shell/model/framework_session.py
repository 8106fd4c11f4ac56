"""A session on msprobe dumps of PyTorch / MindSpore runs (``pshell TARGET --golden GOLDEN``).

The framework room beside the graph-mode :class:`~precision_shell.model.session.Session`: the
target and golden dumps (each any level of msprobe's tree, or a ``dump.json``), the selected
step and rank (``use --step S --rank R``) and the golden rank that matches it, the run model of
the selection (:class:`~precision_shell.model.framework_run.FrameworkRun`), the data_mapping
for the pairing, and the results of the analyses. Commands see ``session.kind == "framework"``
and the registry runs their framework variants (``commands/framework_*.py``).

pshell writes only into its output folder: ``./pshell_out`` by default (a sibling of the target
when the current folder lies inside a dump tree), never inside the dump trees nor over the
mapping file; every write goes through the output guard.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from precision_shell.errors import CommandError, PshellError
from precision_shell.formats.msprobe.dump import MsprobeDump, RankDump, read_msprobe_dump
from precision_shell.model.framework_reader import PendingRead, full_rank, start_reading
from precision_shell.model.framework_run import FrameworkRun
from precision_shell.model.output_guard import FILE, TREE, InputPlace, OutputGuard, resolved
from precision_shell.model.output_writer import OutputWriter
from precision_shell.model.progress import silent_progress
from precision_shell.model.session import Settings
from precision_shell.gc_pause import gc_paused


_SHOWN_PER_REASON = 3




def load_problems(dump: MsprobeDump) -> list[str]:
    """The reader's warnings for the start-up lines: a rank without ``dump.json`` says so once
    (not once more per tensor file recovered from its name), and a reason repeated over many
    files shows its first few and how many more."""
    missing = {r.location.path for r in dump.ranks
               if not os.path.exists(os.path.join(r.location.path, "dump.json"))}
    lines: list[str] = []
    by_reason: dict[str, int] = {}
    for w in dump.warnings:
        path, _, reason = w.partition(": ")
        reason = reason.split(";")[0]
        if reason == "not described by dump.json" and any(path.startswith(m + os.sep) for m in missing):
            continue
        by_reason[reason] = by_reason.get(reason, 0) + 1
        if by_reason[reason] <= _SHOWN_PER_REASON:
            lines.append(w)
    lines += [f"... {n - _SHOWN_PER_REASON} more files: {reason}" for reason, n in by_reason.items()
              if n > _SHOWN_PER_REASON]
    return lines


def _result(pending: PendingRead | None) -> tuple[MsprobeDump | None, PshellError | None]:
    if pending is None:
        return None, None
    try:
        return pending.result(), None
    except PshellError as exc:
        return None, exc


@dataclass
class FrameworkPlace:
    """What the shell shows as the workspace (toolbar, ``config set output``)."""
    root: Path
    output_dir: Path
    precision_data: Path | None = None


@dataclass
class FrameworkSession(OutputWriter):
    kind = "framework"

    target: MsprobeDump
    golden_dump: MsprobeDump | None
    workspace: FrameworkPlace
    mapping: dict[str, str] | None = None
    mapping_file: Path | None = None
    fuzzy: bool = False
    settings: Settings = field(default_factory=Settings)
    load_errors: list[str] = field(default_factory=list)
    load_warnings: list[str] = field(default_factory=list)
    results: dict[str, Any] = field(default_factory=dict)
    history: list[str] = field(default_factory=list)
    progress: Any = silent_progress
    extra_inputs: list[InputPlace] = field(default_factory=list)
    selected: RankDump | None = None
    _runs: dict[int, FrameworkRun] = field(default_factory=dict)
    _golden_read: PendingRead | None = field(default=None, repr=False)   # the child's columns to come
    # the REPL's completion warm-up thread builds the run too: one build, whoever asks first
    _runs_lock: threading.RLock = field(default_factory=threading.RLock, repr=False)

    # graph-mode attributes the shell reads duck-typed (completer, toolbar): none here; the
    # golden side is ``golden_dump``, not ``golden`` (a graph session's golden .npy index)
    graph = None
    golden = None
    active = None

    @classmethod
    def open(cls, target: str | os.PathLike, *, golden: str | os.PathLike | None = None,
             mapping: dict[str, str] | None = None, mapping_file: str | os.PathLike | None = None,
             output: str | os.PathLike | None = None) -> "FrameworkSession":
        """Read both dumps; raises only when the target itself holds no dump. A golden that
        cannot be read is a load error: the target still opens. ``mapping``: the data_mapping
        read from ``mapping_file`` (an input file: never written)."""
        # the golden is read in a child process while this one reads the target (framework_reader)
        pending = start_reading(golden) if golden is not None else None
        with gc_paused(freeze=True):  # dump.json: ~5 objects per leaf, no cycles
            try:
                dump = read_msprobe_dump(target)
            finally:     # the child is waited for (reaped) whatever happened here
                golden_dump, golden_error = _result(pending)
            errors = load_problems(dump)
            if golden_error is not None:
                errors.append(f"golden: {golden_error}")
            elif golden_dump is not None:
                errors += [f"golden: {w}" for w in load_problems(golden_dump)]
        root = Path(target)
        place = FrameworkPlace(root, Path(output) if output else Path("pshell_out"))
        session = cls(dump, golden_dump, place, mapping,
                      Path(mapping_file) if mapping_file is not None else None, load_errors=errors)
        if not output:
            place.output_dir = session._default_output()
        session.selected = dump.ranks[0]
        session._golden_read = pending
        return session

    # -- selection --------------------------------------------------------------------------------
    @property
    def run(self) -> FrameworkRun:
        """The run model of the selected step and rank (built on first use)."""
        return self.run_of(self.selected)

    def run_of(self, rank: RankDump) -> FrameworkRun:
        """The run model of a target (or golden) rank, built on first use (once, whichever
        thread asks first)."""
        with self._runs_lock:
            if id(rank) not in self._runs:
                with gc_paused(freeze=True):  # dump.json: ~5 objects per leaf, no cycles
                    self._runs[id(rank)] = FrameworkRun(rank)
            return self._runs[id(rank)]

    @property
    def run_built(self) -> bool:
        """Whether the selection's run model exists yet (``info`` does not build it)."""
        return id(self.selected) in self._runs

    @property
    def golden_rank(self) -> RankDump | None:
        """The golden ``dump.json`` for the selection (see :meth:`golden_for`)."""
        return self.golden_for(self.selected)

    def golden_for(self, target: RankDump) -> RankDump | None:
        """The golden ``dump.json`` for a target one: same step and rank, else the same rank
        name, else the golden's only rank (its entries may not be read yet: :meth:`require_golden`)."""
        if self.golden_dump is None:
            return None
        loc = target.location
        ranks = self.golden_dump.ranks
        for match in (lambda r: (r.location.step, r.location.rank) == (loc.step, loc.rank),
                      lambda r: r.location.rank == loc.rank):
            found = [r for r in ranks if match(r)]
            if found:
                return found[0]
        return ranks[0] if len(ranks) == 1 else None

    def require_golden(self, target: RankDump | None = None) -> RankDump:
        """The golden ``dump.json`` for ``target`` (default: the selection) with its entries
        (read now if start-up read only its summary)."""
        target = target or self.selected
        with self._runs_lock:
            rank = self.golden_for(target)
            if rank is not None and rank.deferred is not None:
                ranks = self.golden_dump.ranks
                at = next(i for i, r in enumerate(ranks) if r is rank)
                with gc_paused(freeze=True):
                    rank = ranks[at] = full_rank(rank)
        if rank is None:
            if self.golden_dump is None:
                raise CommandError("no golden dump: start with `pshell TARGET --golden GOLDEN`")
            loc = target.location
            raise CommandError(f"no golden rank for step {loc.step} rank {loc.rank} in {self.golden_dump.root}")
        return rank

    def golden_columns(self, target: RankDump | None = None):
        """The statistics columns of the golden ``dump.json`` for ``target`` (default: the
        selection): made by the child that read it at start-up when it could, else here from
        its entries (:mod:`precision_shell.formats.msprobe.columns`)."""
        from precision_shell.formats.msprobe.columns import rank_columns

        target = target or self.selected
        with self._runs_lock:
            rank = self.golden_for(target)
            if rank is not None and self._golden_read is not None:
                at = next(i for i, r in enumerate(self.golden_dump.ranks) if r is rank)
                columns = self._golden_read.columns(at)
                if columns is not None:
                    return columns
            with gc_paused(freeze=True):
                return rank_columns(self.require_golden(target))

    def use(self, step: int | None = None, rank: str | None = None) -> RankDump:
        """Select a step and rank (``rank`` as the folder name, ``rank3``, or just ``3``);
        levels not given keep the current choice when it exists."""
        ranks = self.target.ranks
        cur = self.selected.location
        wanted_step = cur.step if step is None else step
        wanted_rank = cur.rank if rank is None else str(rank)

        def rank_fits(loc) -> bool:
            return loc.rank == wanted_rank or (wanted_rank.isdigit() and (
                loc.rank_id == int(wanted_rank) or loc.rank == f"proc{wanted_rank}"))

        found = [r for r in ranks if r.location.step == wanted_step and rank_fits(r.location)]
        if not found and rank is None:      # the new step lacks the current rank: its first
            found = [r for r in ranks if r.location.step == wanted_step]
        if not found:
            steps = ", ".join(str(s) for s in self.target.steps)
            raise CommandError(f"no dump for step {wanted_step} rank {wanted_rank}; steps {steps}; "
                               f"ranks {', '.join(self.target.rank_names)}")
        if found[0] is not self.selected:
            self.selected = found[0]
            self.results.clear()       # findings of another rank no longer apply
        return self.selected

    def golden_run(self) -> FrameworkRun:
        return self.run_of(self.require_golden())

    # -- tensors ----------------------------------------------------------------------------------
    def resolve_tensor(self, ref):
        """A parsed tensor reference (``ENTRY:0``, ``ENTRY:in1``, ``golden:ENTRY:0``, long forms)
        as a ResolvedTensor that loads its file on read (``pt`` and ``cp`` call this). A wrong
        entry name gets a did-you-mean, a wrong index the valid ones."""
        if ref.kind == "file":
            return None     # a .npy path: the caller's own resolver reads it
        golden = ref.kind == "golden"
        run = self.golden_run() if golden else self.run
        op = run.op(ref.name)
        leaf = ref.leaf or str(ref.index)
        found = [t for t in op.tensors if t.name == f"{op.name}:{ref.io}:{leaf}"]
        if not found:
            same = [t.printed(golden) for t in op.tensors if t.io == ref.io]
            valid = f"valid: {', '.join(same)}" if same else f"it has no {ref.io}s"
            raise CommandError(f"no tensor {ref.text!r} in {run.path} ({valid})")
        return self._resolved(run, found[0], ref, golden)

    def resolve_leaf(self, text: str):
        """A leaf named as msprobe names it when the grammar has no short form for it
        (``Module.fc1.Linear.parameters_grad.0:weight``), else None."""
        from precision_shell.model.tensor_ref import TensorRef, split_slice

        base, slice_text = split_slice(text)
        golden = base.startswith("golden:")
        run = self.golden_run() if golden else self.run
        name = base[len("golden:"):] if golden else base
        try:
            tensor = run.tensor(name)
        except CommandError:
            return None
        ref = TensorRef("golden" if golden else "npu", tensor.op, tensor.io, 0, slice_text, name)
        return self._resolved(run, tensor, ref, golden)

    def _resolved(self, run: FrameworkRun, tensor, ref, golden: bool):
        from dataclasses import replace

        from precision_shell.model.tensor_ref import ResolvedTensor

        leaf = tensor.leaf
        if not leaf.file:
            raise CommandError(f"{tensor.printed(golden)}: no tensor file in {run.path} (task "
                               f"{run.rank.task or '?'}: statistics only)")
        return ResolvedTensor(replace(ref, kind="framework"), tensor.printed(golden), Path(leaf.file),
                              leaf.dtype or "?", tuple(leaf.shape or ()),
                              loader=lambda: run.load(tensor.name))

    # -- writing ----------------------------------------------------------------------------------
    def _default_output(self) -> Path:
        out = Path.cwd() / "pshell_out"
        if self.output_guard(out).problem(resolved(out), True) is None:
            return out
        root = resolved(self.workspace.root)
        base = root if root.is_dir() else root.parent
        return base.parent / f"{base.name}_pshell"

    def input_places(self) -> list[InputPlace]:
        places = [InputPlace.of(Path(self.target.root), TREE if Path(self.target.root).is_dir() else FILE,
                                "target msprobe dump")]
        places += [InputPlace.of(Path(r.location.path), TREE, "target rank folder") for r in self.target.ranks]
        if self.golden_dump is not None:
            places.append(InputPlace.of(Path(self.golden_dump.root), TREE if Path(self.golden_dump.root).is_dir()
                                        else FILE, "golden msprobe dump"))
            places += [InputPlace.of(Path(r.location.path), TREE, "golden rank folder")
                       for r in self.golden_dump.ranks]
        if self.mapping_file is not None:
            places.append(InputPlace.of(self.mapping_file, FILE, "data_mapping file"))
        return places + self.extra_inputs

    def output_guard(self, output_dir: Path | None = None) -> OutputGuard:
        return OutputGuard(self.input_places(), None, output_dir or self.workspace.output_dir)

    def after_command(self) -> None:
        pass
