"""Tab completion: commands, flags, op names, tensor references, golden names, paths.

What to complete comes from the registry (``Command.completer_for``), so a new command gets
completion by declaring ``complete="op"`` on its argument. Op, golden and dump-file names come
from :class:`NameIndex` objects built once per loaded graph / golden folder / dump set; the REPL
wraps this completer in prompt_toolkit's ``ThreadedCompleter`` so typing never waits for it.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from prompt_toolkit.completion import CompleteEvent, Completer, Completion, PathCompleter
from prompt_toolkit.document import Document

from precision_shell.safe_text import escape_controls
from precision_shell.commands.registry import REGISTRY, Registry
from precision_shell.shell import framework_names
from precision_shell.shell.line_context import ArgumentSlot, argument_slot, parse_line
from precision_shell.shell.name_index import NameIndex
from precision_shell.model.tensor_ref import tensor_name

MAX_RESULTS = 100


def natural_key(text: str) -> list:
    """``_2`` before ``_10``: digit runs compare as numbers."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part.lower())
            for part in re.split(r"(\d+)", text) if part]


def ranked(names: Iterable[str], word: str) -> list[str]:
    """Names starting with ``word`` first, each group in natural order."""
    folded = word.lower()
    return sorted(names, key=lambda n: (not n.lower().startswith(folded), natural_key(n)))


def _shape_text(shape: Any) -> str:
    try:
        return "[" + ",".join(str(int(d)) for d in shape) + "]"
    except (TypeError, ValueError):
        return ""


_SHORT_DTYPES = {"FLOAT16": "fp16", "FLOAT": "fp32", "BF16": "bf16", "DOUBLE": "fp64",
                 # framework dumps' numpy / ml_dtypes names
                 "float16": "fp16", "float32": "fp32", "bfloat16": "bf16", "float64": "fp64"}


def dtype_text(dtype: Any) -> str:
    """``DT_FLOAT16`` -> ``fp16`` (fp16/bf16/fp32 are what precision hunting turns on)."""
    if not isinstance(dtype, str) or not dtype:
        return ""
    bare = dtype[3:] if dtype.startswith("DT_") else dtype
    return _SHORT_DTYPES.get(bare, bare.lower())


def desc_meta(desc: Any) -> str:
    """``fp16 [2,8,16,16] NC1HWC0``: the dtype, the logical shape users index with, and the
    device layout when the dump is stored in a different one (duck-typed TensorDesc)."""
    if desc is None:
        return ""
    shape = getattr(desc, "origin_shape", None) or getattr(desc, "shape", None)
    text = _shape_text(shape) if shape is not None else ""
    text = f"{dtype_text(getattr(desc, 'dtype', None))} {text}".strip()
    layout, origin = getattr(desc, "layout", None), getattr(desc, "origin_format", None)
    if layout and origin and layout != origin:
        text += f" {layout}"
    return text


def op_meta(op: Any) -> str:
    """``Conv2D [2,8,16,16] NC1HWC0``: the op type and its first output (duck-typed OpNode)."""
    if op is None:
        return ""
    parts = [str(getattr(op, "type", "") or "")]
    outputs = getattr(op, "outputs", None) or []
    if outputs:
        parts.append(desc_meta(outputs[0]))
        if len(outputs) > 1:
            parts.append(f"+{len(outputs) - 1} out")
    return " ".join(p for p in parts if p)


def _dump_set_values(field: str):
    """``use --run/--device/--step/--time``: the values the workspace's dump sets have, each with
    how many dump sets carry it (framework sessions: the target's steps and ranks)."""
    def values(session: Any) -> list[tuple[str, str]]:
        if framework_names.is_framework(session):
            return {"step": framework_names.step_values,
                    "rank": framework_names.rank_values}.get(field, lambda s: [])(session)
        sets = getattr(getattr(session, "workspace", None), "dump_sets", None) or []
        counts: dict[str, int] = {}
        for dump_set in sets:
            value = str(getattr(dump_set, field, "") or "")
            if value:
                counts[value] = counts.get(value, 0) + 1
        return [(v, f"{n} dump set{'s' * (n != 1)}") for v, n in counts.items()]
    return values


def _op_types(session: Any) -> list[tuple[str, str]]:
    """``ls -t``: the op types of the loaded graph, each with its op count."""
    if framework_names.is_framework(session):
        return framework_names.api_type_values(session)
    graph = getattr(session, "graph", None)
    counts: dict[str, int] = {}
    for op in (getattr(graph, "ops", None) or {}).values():
        kind = str(getattr(op, "type", "") or "")
        if kind:
            counts[kind] = counts.get(kind, 0) + 1
    return [(t, f"{n} op{'s' * (n != 1)}") for t, n in counts.items()]


def _metrics(session: Any) -> list[tuple[str, str]]:
    """``plot``, ``vcs --plot``: the compare metrics."""
    from precision_shell.analysis.inspect.metric_series import LOWER_IS_WORSE, PLOT_METRICS

    return [(m, "lower is worse" if m in LOWER_IS_WORSE else "higher is worse") for m in PLOT_METRICS]


# argument completion kinds whose values come from the session: kind -> (session -> (value, meta))
VALUE_KINDS = {"run": _dump_set_values("run"), "device": _dump_set_values("device"), "rank": _dump_set_values("rank"),
               "step": _dump_set_values("step"), "time": _dump_set_values("time"),
               "optype": _op_types, "metric": _metrics}


def ranked_values(values: list[tuple[str, str]], word: str) -> list[tuple[str, str]]:
    """Values containing ``word`` (case-insensitive), those starting with it first, natural order."""
    folded = word.lower()
    meta = dict(values)
    return [(v, meta[v]) for v in ranked([v for v in meta if folded in v.lower()], word)]


class _CachedIndex:
    """A NameIndex rebuilt only when the object it was built from is replaced."""

    def __init__(self, names_of):
        self._names_of = names_of
        self._source: Any = None
        self._index: NameIndex | None = None
        self._lock = threading.Lock()

    def get(self, source: Any) -> NameIndex | None:
        if source is None:
            return None
        with self._lock:   # the warm-up thread and the completer thread may both ask
            if self._index is None or self._source is not source:
                self._index = NameIndex(self._names_of(source))
                self._source = source
            return self._index


def _graph_names(graph: Any) -> Iterable[str]:
    """Op names of a graph, or entry names of a framework run (a list of ops in dump order)."""
    sorted_names = getattr(graph, "sorted_names", None)
    if callable(sorted_names):
        return sorted_names()
    return list(graph.ops) if isinstance(graph.ops, dict) else framework_names.entry_names(graph)


def _golden_names(golden: Any) -> Iterable[str]:
    names = getattr(golden, "names", None)     # a golden .npy index, else a framework golden run
    return names() if callable(names) else framework_names.golden_tensor_names(golden)


def _dump_names(dumps: Any) -> Iterable[str]:
    return [f.path.name for f in getattr(dumps, "files", [])]


def _open_backtick(text: str) -> str | None:
    """The tensor name typed after an unclosed backtick of an ``eval`` statement, else None."""
    statement = text.rsplit(";", 1)[-1].lstrip()
    if statement.split(maxsplit=1)[:1] != ["eval"] or statement.count("`") % 2 == 0:
        return None
    return statement.rsplit("`", 1)[1]


class ShellCompleter(Completer):
    def __init__(self, session: Any, registry: Registry = REGISTRY):
        self.session = session
        self.registry = registry
        self._ops = _CachedIndex(_graph_names)
        self._golden = _CachedIndex(_golden_names)
        self._dumps = _CachedIndex(_dump_names)
        self._paths = PathCompleter(expanduser=True)
        self._commands = NameIndex(registry.all_names())
        self._command_count = len(registry.all_names())

    # -- indexes ---------------------------------------------------------------------------
    def op_index(self) -> NameIndex | None:
        return self._ops.get(self._op_source())

    def golden_index(self) -> NameIndex | None:
        if framework_names.is_framework(self.session):
            return self._golden.get(framework_names.golden_run(self.session))
        return self._golden.get(getattr(self.session, "golden", None))

    def _op_source(self) -> Any:
        """The graph, or the framework session's selected run (entries in dump order)."""
        if framework_names.is_framework(self.session):
            return framework_names.target_run(self.session)
        return getattr(self.session, "graph", None)

    def dump_index(self) -> NameIndex | None:
        return self._dumps.get(getattr(self.session, "dumps", None))

    def warm_up(self) -> None:
        """Build the indexes now (the REPL calls this in a background thread at start-up)."""
        self.op_index()
        self.golden_index()

    def _op(self, name: str) -> Any:
        source = self._op_source()
        if source is None:
            return None
        if framework_names.is_framework(self.session):
            return framework_names.find_entry(source, name)
        return source.ops.get(name)

    # -- prompt_toolkit entry point --------------------------------------------------------
    def get_completions(self, document: Document, complete_event: CompleteEvent
                        ) -> Iterator[Completion]:
        # the menu shows names from data: escaped, so a name cannot drive the terminal
        for completion in self._completions(document, complete_event):
            display, meta = completion.display_text, completion.display_meta_text
            if escape_controls(display) != display or escape_controls(meta) != meta:
                completion = Completion(completion.text, completion.start_position,
                                        display=escape_controls(display),
                                        display_meta=escape_controls(meta))
            yield completion

    def _completions(self, document: Document, complete_event: CompleteEvent
                     ) -> Iterator[Completion]:
        backticked = _open_backtick(document.text_before_cursor)
        if backticked is not None:      # `eval ... `OP:outp`: a tensor name inside an expression
            yield from self.complete_tensors(backticked, complete_event)
            return
        ctx = parse_line(document.text_before_cursor)
        if ctx.in_brackets:
            return
        if ctx.redirect:
            yield from self._path_completions(ctx.word, complete_event)
            return
        if not ctx.words:
            yield from self.complete_commands(ctx.word)
            return
        command = self.registry.get(ctx.words[0])
        if command is not None:     # the framework variant's own flags (`use --rank`)
            command = self.registry.available(command, self.session)
        if command is None:
            return
        slot = argument_slot(command, ctx.words[1:], ctx.word)
        if slot.kind == "flag":
            yield from self.complete_flags(command, ctx.word, slot)
            return
        if slot.kind == "value":
            kind = command.completer_for(slot.arg.flags[0])
        else:
            kind = command.completer_for(slot.position)
        yield from self.complete_kind(kind, ctx.word, slot, complete_event)

    # -- each kind -------------------------------------------------------------------------
    def complete_commands(self, word: str) -> Iterator[Completion]:
        if len(self.registry.all_names()) != self._command_count:  # a command was added
            self._commands = NameIndex(self.registry.all_names())
            self._command_count = len(self.registry.all_names())
        for name in self._commands.search(word, MAX_RESULTS):
            cmd = self.registry.info(name)      # from the command table: imports no command module
            meta = cmd.summary if cmd.name == name else f"= {cmd.name}"
            yield Completion(name, -len(word), display_meta=meta)

    def complete_flags(self, command: Any, word: str, slot: ArgumentSlot) -> Iterator[Completion]:
        helps = {}
        repeatable = set()
        for a in command.args:
            for f in a.flags:
                helps[f] = a.kwargs.get("help", "") or ""
                if a.kwargs.get("action") in ("append", "count", "extend"):
                    repeatable.add(f)
        helps.setdefault("-h", "show help and an example")
        helps.setdefault("--help", "show help and an example")
        flags = [f for f in command.flags() if f not in slot.used_flags or f in repeatable]
        starts = [f for f in flags if f.startswith(word)]
        # `--c` also offers `-c`: the same letters after the dashes
        bare = word.lstrip("-")
        inside = [f for f in flags if f not in starts and bare and f.lstrip("-").startswith(bare)]
        for f in starts + inside:
            yield Completion(f, -len(word), display_meta=helps.get(f, ""))

    def complete_kind(self, kind: str | None, word: str, slot: ArgumentSlot,
                      event: CompleteEvent) -> Iterator[Completion]:
        if kind == "op":
            yield from self.complete_ops(word)
        elif kind == "tensor":
            yield from self.complete_tensors(word, event)
        elif kind == "golden":
            yield from self.complete_golden(word)
        elif kind == "command":
            yield from self.complete_commands(word)
        elif kind == "path":
            yield from self._path_completions(word, event)
        elif kind == "dump":
            yield from self.complete_dumps(word, event)
        elif kind in VALUE_KINDS:
            for value, meta in ranked_values(VALUE_KINDS[kind](self.session), word):
                yield Completion(value, -len(word), display_meta=meta)
        elif slot.arg is not None and slot.arg.kwargs.get("choices"):
            for choice in slot.arg.kwargs["choices"]:
                if str(choice).startswith(word):
                    yield Completion(str(choice), -len(word))

    def complete_ops(self, word: str, suffix: str = "") -> Iterator[Completion]:
        index = self.op_index()
        if index is None:
            return
        framework = framework_names.is_framework(self.session)
        for name in ranked(index.search(word, MAX_RESULTS), word):
            op = self._op(name)
            meta = framework_names.entry_meta(op, desc_meta) if framework and op is not None else op_meta(op)
            yield Completion(name + suffix, -len(word), display=name, display_meta=meta)

    def _tensor_refs(self, op_name: str) -> list[tuple[str, str]]:
        """Each ``OP:N`` (output) and ``OP:inN`` (input), as tables print them, with its shape
        (inputs: and producer)."""
        op = self._op(op_name)
        if op is not None and framework_names.is_framework(self.session):
            return framework_names.tensor_refs(op, desc_meta)
        refs = []
        for i, desc in enumerate(getattr(op, "outputs", None) or []):
            refs.append((tensor_name(op_name, "output", i), desc_meta(desc)))
        for i, inp in enumerate(getattr(op, "inputs", None) or []):
            meta = desc_meta(getattr(inp, "desc", None))
            producer = getattr(inp, "producer", None)
            if producer:
                meta = f"{meta} from {producer}".strip()
            refs.append((tensor_name(op_name, "input", i), meta))
        return refs

    def complete_tensors(self, word: str, event: CompleteEvent) -> Iterator[Completion]:
        """``OP:N`` / ``OP:inN`` / ``golden:NAME:I`` / ``.npy`` paths."""
        if word.startswith("golden:"):
            yield from self.complete_golden(word)
            return
        if word[:1] in ("/", ".", "~"):
            yield from self._path_completions(word, event)
            return
        # An op name already typed in full, then ':': offer each of its inputs and outputs.
        pos = word.find(":")
        while pos >= 0:
            head = word[:pos]
            if self._op(head) is not None:
                for ref, meta in self._tensor_refs(head):
                    if ref.startswith(word):
                        yield Completion(ref, -len(word), display_meta=meta)
                return
            pos = word.find(":", pos + 1)
        if word and "golden:".startswith(word.lower()) and self.golden_index():
            yield Completion("golden:", -len(word), display_meta="golden (CPU/GPU) tensors")
        # The common case is an op's first output; the menu shows the op name and its meta.
        yield from self.complete_ops(word, suffix=":0")
        # ... and a relative path (no ./ needed): .npy files and the folders that may hold them
        if word and ":" not in word:
            for c in self._path_completions(word, event):
                if c.text.endswith(("/", ".npy")):
                    yield c

    def complete_golden(self, word: str) -> Iterator[Completion]:
        index = self.golden_index()
        if index is None:
            return
        query = word[len("golden:"):] if word.startswith("golden:") else word
        for name in ranked(index.search(query, MAX_RESULTS), query):
            yield Completion(f"golden:{name}", -len(word), display=name, display_meta="golden")

    def complete_dumps(self, word: str, event: CompleteEvent) -> Iterator[Completion]:
        """A dump file: a path, or a file name of the active dump folder (``dc`` takes both)."""
        yield from self._path_completions(word, event)
        index = self.dump_index()
        if index is not None and "/" not in word:
            for name in index.search(word, MAX_RESULTS):
                yield Completion(name, -len(word), display_meta="active dump set")

    def _path_completions(self, word: str, event: CompleteEvent) -> Iterator[Completion]:
        sub = Document(word, len(word))
        found = list(self._paths.get_completions(sub, event))
        for c in sorted(found, key=lambda c: natural_key(c.text)):
            whole = word[:len(word) + c.start_position] + c.text
            slash = "/" if os.path.isdir(os.path.expanduser(whole)) else ""   # a folder: go on in
            yield Completion(c.text + slash, c.start_position, display=c.text + slash)
