"""The tool table: which registry command each MCP tool runs, and its input schema and argv,
both derived from that command's argparse parser (the registry stays the one source of truth
for names, arguments and help).

Nothing here imports the SDK: :mod:`.server` turns :class:`ToolSpec` into SDK tool objects.
"""

from __future__ import annotations

import argparse
import math
import shlex
from dataclasses import dataclass, field
from typing import Any

from precision_shell.commands import REGISTRY
from precision_shell.commands.registry import Command
from precision_shell.errors import UsageError

# never offered to an agent: help, and pictures for a terminal (a tool answers with JSON)
_HIDDEN_EVERYWHERE = frozenset({"help", "plot"})


@dataclass(frozen=True)
class ToolSpec:
    name: str
    command: str                                   # the registry name it runs
    purpose: str                                   # one line put before the command's summary
    fixed: tuple[str, ...] = ()                    # words always passed to the command
    rename: dict[str, str] = field(default_factory=dict)   # argparse dest -> tool argument
    invert: frozenset[str] = frozenset()           # store_true dests offered as their opposite
    hide: frozenset[str] = frozenset()             # dests not offered
    describe: dict[str, str] = field(default_factory=dict)   # tool argument -> its own help
    runs_user_commands: bool = False               # refused unless the server allows it
    page_limit: str | None = None                  # row-limit argument held to the answer cap (0: the cap)


TOOL_TABLE: tuple[ToolSpec, ...] = (
    ToolSpec("info", "info", "Workspace summary: graphs, runs, devices, steps, counts, what is missing."),
    ToolSpec("overflow", "overflow", "Overflow scan (pshell `ac`): the producer op of inf/nan and what "
             "it propagated to."),
    ToolSpec("compare", "compare", "Whole-network compare (pshell `vc`): every tensor against golden; "
             "writes the vendor-layout CSV."),
    ToolSpec("failing_ops", "vcs", "Failing ops (pshell `vcs`): roots (inputs match golden, output does "
             "not) and the first divergence, then propagated ops.", rename={"cosine": "threshold"},
             page_limit="limit",
             describe={"limit": "rows to return (default: the `config` limit, 20 unless set; 0 or more than "
                                "the answer cap: the cap, pshell mcp --max-items); roots are never cut; "
                                "`totals` counts the whole list"}),
    ToolSpec("node", "node_info", "One op's panel (pshell `ni`): type, kernel, fusion passes, original "
             "ops, producers/consumers, dump and golden files with stats."),
    ToolSpec("tensor_stats", "print_tensor", "Statistics of one tensor or a slice of it (pshell `pt -s`); "
             "values only when asked, capped.",
             rename={"stats": "values"}, invert=frozenset({"stats"}),
             hide=frozenset({"all", "write", "lines"}),
             describe={"values": "also the values of the (sliced) tensor, as `pt` without -s; long "
                                 "lists are cut by the answer cap: slice the tensor to see the part you need"}),
    ToolSpec("replay", "replay", "Why an op is wrong: recompute it from its dumped inputs exactly and "
             "under emulated device arithmetic."),
    ToolSpec("impact", "impact", "How much each root matters: substitute golden values and recompute "
             "downstream."),
    ToolSpec("curve", "curve", "Loss curve vs golden: verdict, first divergent step, loss-scale events, "
             "which dumped step to open."),
    ToolSpec("bisect", "bisect", "Find the smallest fusion/keep-fp32 change that fixes the user's check "
             "command (runs that command; refused unless the server was started with --allow-bisect).",
             runs_user_commands=True),
    ToolSpec("export", "export", "Write the current finding list (suspects, overflow, compare) to a file."),
)


def present_tools(registry=REGISTRY) -> list[ToolSpec]:
    """The table's tools whose command is registered (impact/curve/bisect appear when they are)."""
    return [spec for spec in TOOL_TABLE if registry.get(spec.command) is not None]


# -- schema --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ToolArgument:
    name: str                      # the tool's argument name
    action: argparse.Action
    flag: str | None               # None: positional
    boolean: bool
    inverted: bool
    many: bool                     # a list of values
    repeat_flag: bool              # append/extend: the flag before each value
    item_type: str                 # "string" | "integer" | "number"


def _item_type(action: argparse.Action) -> str:
    """int/float types; a checking function (``_positive_int``) by the type of its default."""
    default = action.default
    if action.type is int or (callable(action.type) and type(default) is int):
        return "integer"
    if action.type is float or (callable(action.type) and type(default) is float):
        return "number"
    return "string"


def tool_arguments(spec: ToolSpec, cmd: Command) -> list[ToolArgument]:
    """The command's argparse actions an agent may set, in parser order."""
    runner_format = "--format" not in cmd.flags()   # the runner's --format: a tool always answers JSON
    out = []
    for action in cmd.parser._actions:
        dest = action.dest
        if dest in _HIDDEN_EVERYWHERE or dest in spec.hide or (runner_format and dest == "format"):
            continue
        flag = max(action.option_strings, key=len) if action.option_strings else None
        boolean = action.nargs == 0
        repeat = isinstance(action, (argparse._AppendAction, argparse._ExtendAction))
        many = repeat or action.nargs in ("*", "+") or (isinstance(action.nargs, int) and action.nargs > 1)
        # an option is named by its long flag (--values-only: values_only; --type: type, whatever
        # its dest), a positional by its dest, as `help CMD` shows them
        name = flag.lstrip("-").replace("-", "_") if flag else dest
        out.append(ToolArgument(spec.rename.get(dest, name), action, flag, boolean, dest in spec.invert,
                                many, repeat and action.nargs in (None, 1, "?"), _item_type(action)))
    return out


def _describe(action: argparse.Action) -> str:
    """The help text as `help CMD` shows it (argparse's %-formatting applied)."""
    text = action.help or ""
    try:
        return text % {"default": action.default, "choices": action.choices, "dest": action.dest}
    except (KeyError, TypeError, ValueError):
        return text.replace("%%", "%")


def _json_default(value: Any) -> bool:
    return isinstance(value, (str, int, float, bool)) and not (isinstance(value, float) and not math.isfinite(value))


def input_schema(spec: ToolSpec, cmd: Command) -> dict:
    """JSON schema of the tool's arguments, from the command's parser."""
    properties: dict[str, dict] = {}
    required: list[str] = []
    for targ in tool_arguments(spec, cmd):
        action = targ.action
        if targ.boolean:
            prop: dict[str, Any] = {"type": "boolean"}
            if targ.inverted:
                prop["default"] = False
        else:
            item: dict[str, Any] = {"type": targ.item_type}
            if action.choices is not None:
                item["enum"] = list(action.choices)
            prop = {"type": "array", "items": item} if targ.many else dict(item)
            if action.default is not None and action.default is not argparse.SUPPRESS \
                    and _json_default(action.default) and not targ.many:
                prop["default"] = action.default
        prop["description"] = spec.describe.get(targ.name) or _describe(action)
        properties[targ.name] = prop
        # not action.required: argparse marks a "*" positional required, though none is needed
        if action.nargs in (None, "+") if targ.flag is None else action.required:
            required.append(targ.name)
    schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = required
    return schema


def tool_description(spec: ToolSpec, cmd: Command) -> str:
    alias = f" (pshell `{cmd.name}`" + (f", alias `{cmd.aliases[0]}`" if cmd.aliases else "") + ")"
    return f"{spec.purpose}\n\n{cmd.summary}{alias}\nReturns {{result: the command's JSON, evidence: " \
           "files read/written and tensor names, notes, warnings}."


# -- arguments -> argv ---------------------------------------------------------------------------

def _checked(tool: str, targ: ToolArgument, value: Any) -> Any:
    """One JSON value of ``targ``'s item type, or a UsageError naming the argument."""
    kind = targ.item_type
    ok = (isinstance(value, str) if kind == "string"
          else isinstance(value, int) and not isinstance(value, bool) if kind == "integer"
          else isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value))
    if not ok:
        raise UsageError(f"{tool}: argument {targ.name!r} must be {'an' if kind == 'integer' else 'a'} "
                         f"{kind}, not {type(value).__name__} {value!r}")
    choices = targ.action.choices
    if choices is not None and value not in choices:
        raise UsageError(f"{tool}: argument {targ.name!r} must be one of {', '.join(map(str, choices))}, "
                         f"not {value!r}")
    return value


def command_words(spec: ToolSpec, cmd: Command, arguments: Any) -> list[str]:
    """The command's argv (without its name) for the tool's JSON ``arguments``."""
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise UsageError(f"{spec.name}: arguments must be an object, not {type(arguments).__name__}")
    targs = {t.name: t for t in tool_arguments(spec, cmd)}
    unknown = sorted(set(arguments) - set(targs))
    if unknown:
        known = ", ".join(targs) or "none"
        raise UsageError(f"{spec.name}: unknown argument {unknown[0]!r} (arguments: {known})")
    options: list[str] = []
    positionals: list[str] = []
    inverted_off: list[str] = []
    for name, targ in targs.items():
        if name not in arguments:
            if targ.boolean and targ.inverted:
                inverted_off.append(targ.flag)      # default: the command's flag is on
            continue
        value = arguments[name]
        if targ.boolean:
            if not isinstance(value, bool):
                raise UsageError(f"{spec.name}: argument {name!r} must be a boolean, not "
                                 f"{type(value).__name__} {value!r}")
            if value != targ.inverted:
                options.append(targ.flag)
            continue
        values = value if targ.many else [value]
        if targ.many and not isinstance(value, list):
            raise UsageError(f"{spec.name}: argument {name!r} must be an array, not {type(value).__name__}")
        words = [str(_checked(spec.name, targ, v)) for v in values]
        if targ.flag is None:
            positionals += words
        elif targ.repeat_flag:
            options += [f"{targ.flag}={w}" for w in words]
        elif targ.many:
            options += [targ.flag, *words]
        else:
            options.append(f"{targ.flag}={words[0]}")
    missing = [t.name for t in targs.values() if t.flag is None and t.action.nargs in (None, "+")
               and t.name not in arguments]
    if missing:
        raise UsageError(f"{spec.name}: missing required argument {missing[0]!r}")
    return [*options, *inverted_off, *spec.fixed, *(["--", *positionals] if positionals else [])]


def capped_limit(spec: ToolSpec, arguments: Any, max_items: int) -> tuple[Any, str | None]:
    """``arguments`` with the tool's row limit held to ``max_items`` (an answer holds no more
    rows, so the command makes no more: ``vcs -l 0`` on a 100k-entry pair makes ~99k rows), and
    a note when it was; anything else (a bad value too) as it came, for ``command_words``."""
    name = spec.page_limit
    value = arguments.get(name) if name is not None and isinstance(arguments, dict) else None
    if not isinstance(value, int) or isinstance(value, bool) or 0 < value <= max_items or value < 0:
        return arguments, None
    asked = "0 (all)" if value == 0 else str(value)
    return {**arguments, name: max_items}, (f"{name} {asked} held to the answer cap of {max_items} rows "
                                            "(pshell mcp --max-items); `totals` counts the whole list")


def command_text(cmd: Command, words: list[str]) -> str:
    """The pshell command line an agent can cite (and a user can paste)."""
    return shlex.join([cmd.name, *[w for w in words if w != "--"]])
