"""The package's import graph keeps its layers (architecture.md): no module imports a module of a
higher layer, and no two modules import each other (directly or through a longer loop), counting
imports inside functions too -- a lazy import is still a dependency."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

PACKAGE = Path(__file__).resolve().parents[2] / "precision_shell"

# lowest first; a module may import its own layer and the ones before it
LAYERS = [
    {"precision_shell", "errors", "atomic_write", "gc_pause", "jsonable", "logfile", "safe_text",
     "blas_threads", "config_path"},
    {"formats", "config"},               # config reads its INI file through formats' bounded reads
    {"model", "samples", "capture"},     # generators and the torch capture write dumps; not analyses
    {"analysis"},
    {"commands"},
    {"render"},
    {"report"},                          # HTML of command results (render's cell format)
    {"frontend", "shell", "cli", "mcp", "__main__", "one_shot_exit"},
]


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def import_graph() -> nx.DiGraph:
    mods = modules()
    graph = nx.DiGraph()
    graph.add_nodes_from(mods)
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[:len(package.split(".")) - node.level + 1]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                # `from pkg import sub` imports the submodule; `from mod import name` the module
                subs = [f"{module}.{a.name}" for a in node.names if f"{module}.{a.name}" in mods]
                targets = subs or [module]
            else:
                continue
            for target in targets:
                while target and target not in mods:      # `import a.b.c` of a non-module name
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph.add_edge(name, target)
    return graph


def layer_of(module: str) -> int:
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else parts[0]
    for i, names in enumerate(LAYERS):
        if top in names:
            return i
    raise AssertionError(f"{module}: in no layer of tests/model/test_layering.py (add its package there)")


def test_every_module_has_a_layer():
    for module in modules():
        layer_of(module)


def test_no_module_imports_a_higher_layer():
    graph = import_graph()
    upward = [f"{a} -> {b}" for a, b in graph.edges if layer_of(b) > layer_of(a)]
    assert upward == []


def test_no_import_circles():
    graph = import_graph()
    # a package's __init__ importing its own submodules (to register them) is how packages
    # work; a submodule importing its package's names back is the circle that matters
    graph.remove_edges_from([(a, b) for a, b in graph.edges if b.startswith(a + ".")])
    cycles = [c for c in nx.simple_cycles(graph) if len(c) > 1]
    assert cycles == []


def test_the_checker_sees_lazy_imports(tmp_path):
    """A function-level import counts: the graph has the edge a lazy import makes."""
    graph = import_graph()
    # compare_cmd imports compare_run only inside a function (start-up without numpy)
    assert graph.has_edge("precision_shell.commands.compare_cmd", "precision_shell.commands.compare_run")
