"""The shell registry's static command table (commands/table.py): it equals what the command
modules register, each entry's module registers it on its own, and the registry built on it
lists, completes and runs commands while importing only the modules a command needs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from precision_shell.commands.table import TABLE
from precision_shell.commands.table_make import TABLE_FILE


def _python(code: str, *args: str, cwd: Path | None = None) -> str:
    """Run ``code`` in a fresh interpreter (nothing imported yet); its stdout."""
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_table_equals_what_every_command_module_registers():
    made = _python("from precision_shell.commands.registry import REGISTRY\n"
                   "from precision_shell.commands.table_make import import_command_modules, table_source\n"
                   "import_command_modules()\n"
                   "print(table_source(REGISTRY), end='')\n")
    assert made == TABLE_FILE.read_text(encoding="utf-8"), \
        "commands/table.py is stale: run `python -m precision_shell.commands.table_make`"
    assert len(TABLE.commands) >= 30 and {"compare", "vcs", "help", "report"} <= {c.name for c in TABLE.commands}


# one interpreter: the modules every command shares first, then one forked child per module of
# the table importing that module alone and saying what got registered
_EACH_MODULE_ALONE = r"""
import json, os, sys
import numpy
import precision_shell.model.session
from precision_shell.commands.registry import REGISTRY
modules = json.loads(sys.argv[1])
out = {}
for module in modules:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        import importlib
        importlib.import_module(module)
        names, variants = REGISTRY.imported()
        os.write(write, json.dumps([sorted(names), sorted(variants)]).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        out[module] = json.loads(f.read())
    os.waitpid(pid, 0)
print(json.dumps(out))
"""


def test_each_entrys_module_registers_it_on_its_own():
    modules = sorted({c.module for c in TABLE.commands} | {v.module for v in TABLE.variants.values()})
    registered = json.loads(_python(_EACH_MODULE_ALONE, json.dumps(modules)))
    for info in TABLE.commands:
        assert info.name in registered[info.module][0], (info.name, info.module)
    for (kind, name), info in TABLE.variants.items():
        assert [kind, name] in registered[info.module][1], (kind, name, info.module)


def test_the_overview_from_the_table_equals_the_loaded_commands_availability():
    """Help's list before any command module is imported equals what the imported commands say
    on each kind of session (the command's summary, its variant's, or not available)."""
    code = r"""
import json, sys
from precision_shell.commands.registry import REGISTRY
class Kind:
    def __init__(self, kind): self.kind = kind
kinds = [None, Kind("framework"), Kind("mindspore-graph"), Kind("unknown")]
before = [[[i.name, list(i.aliases), s] for i, s in REGISTRY.overview(k)] for k in kinds]
lazy = sorted(m for m in sys.modules if m.startswith("precision_shell.commands."))
after = [[[c.name, list(c.aliases), shown.summary if shown else None]
          for c in REGISTRY.commands() for shown in [REGISTRY.available(c, k)]] for k in kinds]
print(json.dumps([before, after, lazy]))
"""
    before, after, imported = json.loads(_python(code))
    assert before == after
    assert imported == ["precision_shell.commands.command_table", "precision_shell.commands.registry",
                        "precision_shell.commands.table"]
    framework = {name: summary for name, _, summary in after[1]}
    assert framework["fusion"] is None and framework["next"] == {n: s for n, _, s in after[0]}["next"]
    assert framework["vcs"] != {n: s for n, _, s in after[0]}["vcs"]     # the framework variant's


_RUN_AND_LIST_MODULES = r"""
import json, sys
from precision_shell.cli import main
rc = main(sys.argv[1:])
sys.stdout.flush()
print(json.dumps([rc, sorted(m for m in sys.modules if m.startswith("precision_shell."))]))
"""


def _run(*argv: str, cwd: Path) -> tuple[int, list[str], str]:
    out = _python(_RUN_AND_LIST_MODULES, *argv, cwd=cwd)
    rc, modules = json.loads(out.splitlines()[-1])
    return rc, modules, "\n".join(out.splitlines()[:-1])


def test_help_lists_every_command_and_imports_no_other_command_module(sample_ws, tmp_path):
    root, _ = sample_ws
    rc, modules, out = _run(str(root), "-c", "help", "--format", "json", cwd=tmp_path)
    assert rc == 0
    listed = {row["command"]: row["aliases"] for row in json.loads(out)}
    assert listed == {c.name: list(c.aliases) for c in TABLE.commands}
    commands = {m for m in modules if m.startswith("precision_shell.commands.")}
    assert {"precision_shell.commands.basic", "precision_shell.commands.compare_cmd"} & commands \
        == {"precision_shell.commands.basic"}
    assert not any(m.startswith(("precision_shell.commands.framework", "precision_shell.report"))
                   for m in modules)


def test_a_graph_workspaces_compare_imports_no_framework_or_other_command(sample_ws, tmp_path):
    root, manifest = sample_ws
    rc, modules, out = _run(str(root), "-o", str(tmp_path / "out"), "-c", "vc", cwd=tmp_path)
    assert rc == 0 and "compared" in out
    assert "precision_shell.commands.compare_cmd" in modules
    for other in ("framework_analysis", "framework_inspect", "mindspore_graph_cmd", "bisect_cmd",
                  "curve_cmd", "replay_cmd", "impact_cmd", "qstat_cmd", "fusion_cmd", "inspect_cmd"):
        assert f"precision_shell.commands.{other}" not in modules, other
    # (formats.msprobe.layout and formats.mindspore_graph.layout tell what PATH is: imported)
    assert not any(m.startswith(("precision_shell.report", "precision_shell.model.framework",
                                 "precision_shell.model.mindspore", "precision_shell.analysis.compare.msprobe",
                                 "precision_shell.formats.msprobe.dump", "precision_shell.formats.mindspore_graph.anf"))
                   for m in modules), modules


def test_completing_and_highlighting_command_names_imports_no_command_module():
    code = r"""
import json, sys
from precision_shell.shell.completer import ShellCompleter
from precision_shell.shell.lexer import ShellLexer
completer = ShellCompleter(None)
names = {c.text: c.display_meta_text for c in completer.complete_commands("")}
tokens = ShellLexer(None).lex_line("bisect --help; nosuch")
print(json.dumps([names, tokens, sorted(m for m in sys.modules if m.startswith("precision_shell.commands."))]))
"""
    names, tokens, imported = json.loads(_python(code))
    assert imported == ["precision_shell.commands.command_table", "precision_shell.commands.registry",
                        "precision_shell.commands.table"]
    summaries = {c.name: c.summary for c in TABLE.commands}
    for c in TABLE.commands:
        assert names[c.name] == summaries[c.name]
        for alias in c.aliases:
            assert names[alias] == f"= {c.name}"
    assert ["class:command", "bisect"] in tokens and ["class:unknown-command", "nosuch"] in tokens
