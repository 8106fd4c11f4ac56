"""The loaded workspace: op graph, dump index, golden index, overflow files, fusion report.

Each part loads on its own: a corrupt graph or a broken fusion report is recorded as a one-line
error in ``load_errors`` and the rest of the session stays usable.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from precision_shell.errors import CommandError, PshellError
from precision_shell.gc_pause import gc_paused
from precision_shell.model.dump_index import DumpFile, DumpIndex, scan_dump_dir
from precision_shell.model.folder_listing import forget_entries
from precision_shell.model.graph_cache import GRAPH, GRAPH_DETAILS
from precision_shell.model.golden_index import GoldenIndex, scan_golden_dir
from precision_shell.model.load_cache import LoadCache, file_key
from precision_shell.model.output_guard import InputPlace, OutputGuard, workspace_inputs
from precision_shell.model.output_writer import OutputWriter
from precision_shell.model.progress import silent_progress
from precision_shell.model.size_count import SizeCount
from precision_shell.model.workspace import DumpSet, Workspace, discover, level_labels


@dataclass
class Settings:
    """User-tunable defaults (``config set``); the REPL persists them, batch mode takes flags."""

    threshold: float = 0.98
    limit: int = 20
    color: bool = True
    pager: bool = True
    min_coverage: float = 90.0   # % of tensors with a counterpart a gated compare must compare
    scheduler: str = ""          # Dask scheduler address (--scheduler); "": local processes


@dataclass
class Session(OutputWriter):
    workspace: Workspace
    settings: Settings = field(default_factory=Settings)
    load_errors: list[str] = field(default_factory=list)
    # problems that lose nothing (an ignored start-up cache entry): shown, but no batch failure
    load_warnings: list[str] = field(default_factory=list)
    graph: Any = None                      # OpGraph, or None when no graph could be loaded
    active: DumpSet | None = None
    dumps: DumpIndex = field(default_factory=lambda: DumpIndex([]))
    golden: GoldenIndex = field(default_factory=lambda: GoldenIndex(None, []))
    overflow_dumps: DumpIndex = field(default_factory=lambda: DumpIndex([]))
    fusion: list = field(default_factory=list)
    # Results of analyses, kept so that `next`/`export` and later commands can use them.
    results: dict[str, Any] = field(default_factory=dict)
    # Statements run in this process, in order (kept across `use`): what `report` lists as the
    # commands that produced it.
    history: list[str] = field(default_factory=list)
    # progress(label, total) -> context manager with .advance(n); the REPL swaps in a real bar
    progress: Any = silent_progress
    cache: LoadCache = field(default_factory=lambda: LoadCache(None))
    npu_root: Path | None = None           # --npu DIR: an input tree besides the dump leaves in it
    extra_inputs: list[InputPlace] = field(default_factory=list)
    size_counts: list = field(default_factory=list)  # SizeCounts started, each done or counting
    _graph_key: tuple | None = None
    _run: Any = None
    _input_places: list[InputPlace] | None = None

    @classmethod
    def open(cls, path: str | os.PathLike | None = None, **overrides: Any) -> "Session":
        """Discover and load a workspace. Raises only when the workspace path itself is bad."""
        ws = discover(path, **overrides)
        npu = overrides.get("npu")
        session = cls(workspace=ws, npu_root=Path(npu).expanduser() if npu else None)
        session._load()
        return session

    # -- loading -----------------------------------------------------------------------------
    def _guard(self, fn, *args):
        try:
            return fn(*args)
        except PshellError as exc:
            self.load_errors.append(str(exc))
        except OSError as exc:
            self.load_errors.append(f"{exc.filename or '?'}: {exc.strerror or exc}")
        return None

    def _load(self) -> None:
        self.cache = self._make_cache()
        # loading makes 100k+ small objects that live as long as the session: no cyclic GC
        # passes meanwhile, and frozen out of later ones
        with gc_paused(freeze=True):
            job = self._guard(self._start_graph)  # a first start loads it in a child meanwhile
            self._guard(self.use)
            golden = self._guard(scan_golden_dir, self.workspace.golden_dir, self.cache)
            if golden is not None:  # not `or`: an empty index (no tensors) is falsy but carries warnings
                self.golden = golden
            self._guard(self._load_overflow)
            self._guard(self._load_fusion)
            # file sizes (a stat each; `info` shows totals): counted meanwhile, not before the prompt
            self._count_sizes(self.dumps, self.golden)
            if job is not None:
                self._guard(self._finish_graph, job)
            forget_entries()  # what discovery read and the listings did not take
            # folders that could not be listed, goldens skipped: said at start-up, not found empty
            self.load_errors += self.workspace.warnings + self.golden.warnings + self.overflow_dumps.warnings

    def _count_sizes(self, *indexes) -> None:
        listings = [index.listing for index in indexes if index.listing is not None]
        self.size_counts.append(SizeCount(listings))

    def wait_for_sizes(self) -> None:
        """Until the sizes counted in the background are all read (``info --sizes``)."""
        for count in self.size_counts:
            count.wait()

    def _make_cache(self) -> LoadCache:
        folder = self.workspace.output_dir / "cache"
        try:
            self.check_writable_location(folder, folder=True)
        except CommandError:
            link = self.output_guard().link_problem()   # said at start-up, once
            if link is not None:
                self.load_warnings.append(link)
            return LoadCache(None)  # an output folder inside the inputs: never write there
        return LoadCache(folder, self.load_warnings)

    def _start_graph(self):
        """The graph from the cache, else a GraphJob loading it (see _finish_graph)."""
        from precision_shell.model.graph_job import GraphJob

        files = self.workspace.graph_files
        if not files:
            return None
        key = tuple(file_key(p) for p in files)
        graph = self.cache.load(GRAPH, key)
        if graph is not None:
            self._set_graph(graph, key, [])
            return None
        return GraphJob(files, self.cache, key)

    def _finish_graph(self, job) -> None:
        graph, errors, store = job.result()
        if graph is not None and store:  # a graph with load errors is not cached
            self.cache.store(GRAPH, job.key, graph, background=True)
        self._set_graph(graph, job.key, errors)

    def _set_graph(self, graph, key: tuple, errors: list[str]) -> None:
        files = self.workspace.graph_files
        source = files[0] if len(files) == 1 else files[0].parent
        warnings = [f"{source}: {w}" for w in graph.warnings] if graph is not None else []
        self.load_errors[:0] = errors + warnings  # the graph's problems first, as it loads first
        if graph is None:
            return
        self.graph, self._graph_key = graph, key
        for reader in graph.readers:  # the first op detail read asks the details cache first
            reader.before_bulk = self._load_graph_details

    # -- op details: decoded on demand, kept in the cache once many were needed (vc, ls -k) ----
    _DETAILS_STORE_MIN = 1000

    def _load_graph_details(self) -> None:
        for reader in self.graph.readers:
            reader.before_bulk = None
        rows = self.cache.load(GRAPH_DETAILS, self._graph_key)
        if rows is not None:
            self.graph.set_detail_rows(rows)

    def after_command(self) -> None:
        """Called after each command: store the op details when a command decoded many more."""
        graph = self.graph
        if graph is None or not graph.readers or self._graph_key is None:
            return
        decoded = sum(r.decoded for r in graph.readers)  # since the last store
        if decoded < max(self._DETAILS_STORE_MIN, graph.op_count // 10):
            return
        for reader in graph.readers:
            reader.decoded = 0
            reader.release()  # the file's text and the parser's line cache: 100s of MB
        self.cache.store(GRAPH_DETAILS, self._graph_key, graph.detail_rows(), background=True)

    def _load_overflow(self) -> None:
        files: list[DumpFile] = []
        warnings: list[str] = []
        for folder in self.workspace.overflow_dirs:
            index = scan_dump_dir(folder, recursive=True, cache=self.cache)
            files += index.files
            warnings += index.warnings
        self.overflow_dumps = DumpIndex(files, warnings)

    def overflow_opdebug(self, dump_set: DumpSet | None) -> list[DumpFile]:
        """The overflow-mode Opdebug files recorded for ``dump_set``: those whose folder is at
        the same device and step (formats.md §5 levels; the model's name carries the build time
        of its own run, so it is not compared). Files in folders without those levels belong to
        no device in particular and count for every set, as every file counts for a set whose
        own folder has no device and step levels (``--npu LEAF``)."""
        if dump_set is None or not (dump_set.device or dump_set.step):
            return list(self.overflow_dumps.opdebug)
        found = []
        for f in self.overflow_dumps.opdebug:
            labels = next((level_labels(d, f.folder) for d in self.workspace.overflow_dirs
                           if f.folder.is_relative_to(d)), {})
            if not labels or (labels["device"], labels["step"]) == (dump_set.device, dump_set.step):
                found.append(f)
        return found

    def _load_fusion(self) -> None:
        from precision_shell.formats.fusion_result import read_fusion_result

        if self.workspace.fusion_file is not None:
            self.fusion = read_fusion_result(self.workspace.fusion_file)

    # -- dump sets -----------------------------------------------------------------------------
    def use(self, run: str | None = None, device: str | None = None, step: str | None = None,
            time: str | None = None) -> DumpSet | None:
        """Switch the active dump set; unspecified levels keep the current choice when possible."""
        sets = self.workspace.dump_sets
        if not sets:
            self.active, self.dumps = None, DumpIndex([])
            return None
        current = self.active
        if run is None and current is not None and any(s.run == current.run for s in sets):
            run = current.run
        if run is not None and not any(s.run == run for s in sets):
            raise CommandError(f"no run {run!r}; runs: {', '.join(self.workspace.runs)}")
        chosen = self.workspace.default_dump_set(run)
        wanted = {"time": time, "device": device, "step": step}
        if any(v is not None for v in wanted.values()):
            if current is not None and current.run == chosen.run:
                # keep the levels the user did not name
                for level in wanted:
                    if wanted[level] is None:
                        wanted[level] = getattr(current, level)
            matches = [s for s in sets if s.run == chosen.run
                       and all(v is None or getattr(s, k) == str(v) for k, v in wanted.items())]
            if not matches:
                named = ", ".join(f"{k} {v}" for k, v in wanted.items() if v is not None)
                raise CommandError(f"no dump set with {named} in run {chosen.run}; "
                                   f"see `info` for devices and steps")
            chosen = matches[0]
        index = scan_dump_dir(chosen.path, cache=self.cache)
        if self.size_counts:  # after start-up (which counts all its folders at once)
            self._count_sizes(index)
        self.active, self.dumps = chosen, index
        self.results.clear()  # findings of another dump set no longer apply
        return chosen

    # -- the run model ---------------------------------------------------------------------------
    @property
    def run(self):
        """The active dump set as the run model's Run (:mod:`precision_shell.model.runs.ge`)."""
        from precision_shell.model.runs.ge import GeRun

        if self._run is None or self._run.dumps is not self.dumps or self._run.graph is not self.graph:
            self._run = GeRun(self)
        return self._run

    def pairing(self):
        """Each output's golden ``.npy`` (:class:`~precision_shell.model.runs.ge.GePairing`)."""
        from precision_shell.model.runs.ge import GePairing

        return GePairing(self)

    # -- names ---------------------------------------------------------------------------------
    def resolve_op(self, text: str):
        """The graph op named by ``text`` (exact, else a unique substring)."""
        if self.graph is None:
            raise CommandError("no graph loaded: op names need ge_proto_*_Build.txt (see `info`)")
        matches = self.graph.find(text)
        if not matches:
            from precision_shell.model.suggest import did_you_mean

            raise CommandError(f"no op matches {text!r}" + did_you_mean(text, self.graph.sorted_names()))
        if len(matches) > 1:
            shown = ", ".join(m.name for m in matches[:8])
            more = f" and {len(matches) - 8} more" if len(matches) > 8 else ""
            raise CommandError(f"{text!r} matches {len(matches)} ops: {shown}{more}")
        return matches[0]

    def op_dump(self, op_name: str) -> DumpFile | None:
        return self.dumps.latest_for_op(op_name)

    def input_places(self) -> list[InputPlace]:
        """What the session reads, for the output guard (formats.md §5)."""
        if self._input_places is None:
            self._input_places = workspace_inputs(self.workspace, self.npu_root)
        return self._input_places + self.extra_inputs

    def output_guard(self, output_dir: Path | None = None) -> OutputGuard:
        ws = self.workspace
        return OutputGuard(self.input_places(), ws.precision_data, output_dir or ws.output_dir,
                           output_given=ws.output_given or output_dir is not None)
