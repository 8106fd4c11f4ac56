"""No code from data: nothing in the product can unpickle, unmarshal, eval or exec what a
workspace carries. The one exception allowed is a restricted Unpickler for torch ``.pt`` files
(``formats/torch_pt.py``): a subclass of ``pickle.Unpickler`` whose ``find_class`` maps an
explicit allow-list."""

from __future__ import annotations

import ast
from pathlib import Path

import precision_shell

PACKAGE = Path(precision_shell.__file__).resolve().parent
UNPICKLER_MODULE = PACKAGE / "formats" / "torch_pt.py"
# `eval EXPR` evaluates the user's numpy expression: the one module allowed to call eval(), and only
# on a tree its allow-list checked first (tests/shell/test_eval.py tries the ways out)
EXPRESSION_MODULE = PACKAGE / "analysis" / "inspect" / "expression.py"
CODE_MODULES = {"pickle", "marshal", "shelve", "dill", "cloudpickle", "joblib"}
# in the torch module, the only names of pickle it may use
UNPICKLER_NAMES = {"Unpickler", "UnpicklingError"}


def problems(source: str, *, unpickler_allowed: bool = False, eval_allowed: bool = False) -> list[str]:
    """What in ``source`` could run code from data, as "line N: what"."""
    found = []
    for node in ast.walk(ast.parse(source)):
        where = f"line {getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Import):
            for alias in node.names:
                root = alias.name.split(".")[0]
                if root in CODE_MODULES and not (unpickler_allowed and alias.name == "pickle" and alias.asname is None):
                    found.append(f"{where}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in CODE_MODULES:
            found.append(f"{where}: from {node.module} import ...")
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in ("eval", "exec", "__import__") and not (
                    eval_allowed and func.id == "eval"):
                found.append(f"{where}: {func.id}(")
            for keyword in node.keywords:
                if keyword.arg == "allow_pickle" and not (isinstance(keyword.value, ast.Constant)
                                                         and keyword.value.value is False):
                    found.append(f"{where}: allow_pickle={ast.unparse(keyword.value)}")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in CODE_MODULES:
            if not (unpickler_allowed and node.value.id == "pickle" and node.attr in UNPICKLER_NAMES):
                found.append(f"{where}: {node.value.id}.{node.attr}")
        elif isinstance(node, ast.ClassDef) and any(ast.unparse(b) == "pickle.Unpickler" for b in node.bases):
            methods = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
            if "find_class" not in methods:
                found.append(f"{where}: class {node.name}(pickle.Unpickler) without its own find_class")
    return found


def test_the_package_source_runs_no_code_from_data():
    sources = sorted(PACKAGE.rglob("*.py"))
    assert len(sources) > 50  # the whole package, not an empty glob
    found = [f"{path.relative_to(PACKAGE.parent)}: {p}" for path in sources
             for p in problems(path.read_text(encoding="utf-8"), unpickler_allowed=path == UNPICKLER_MODULE,
                               eval_allowed=path == EXPRESSION_MODULE)]
    assert found == []
    # ... and the expression module's allowance is eval only
    assert problems("exec('1')\neval('1')", eval_allowed=True) == ["line 1: exec("]


def test_the_check_finds_each_way_in():
    bad = {
        "import pickle\npickle.loads(b'')": ["line 1: import pickle", "line 2: pickle.loads"],
        "import marshal as m": ["line 1: import marshal"],
        "from pickle import load": ["line 1: from pickle import ..."],
        "import numpy as np\nnp.load('x.npy', allow_pickle=True)": ["line 2: allow_pickle=True"],
        "eval('1')": ["line 1: eval("],
        "exec('x = 1')": ["line 1: exec("],
        "import shelve": ["line 1: import shelve"],
    }
    for source, want in bad.items():
        assert problems(source) == want, source
    ok = "import ast\nimport numpy as np\nast.literal_eval('1')\nnp.load('x', allow_pickle=False)\nx.eval()"
    assert problems(ok) == []


def test_only_a_restricted_unpickler_is_allowed_in_the_torch_module():
    restricted = ("import pickle\nclass R(pickle.Unpickler):\n    def find_class(self, m, n):\n"
                  "        raise pickle.UnpicklingError(n)\n")
    assert problems(restricted, unpickler_allowed=True) == []
    assert problems(restricted) == ["line 1: import pickle", "line 2: pickle.Unpickler",
                                    "line 4: pickle.UnpicklingError"]
    unrestricted = "import pickle\nclass R(pickle.Unpickler):\n    pass\n"
    assert problems(unrestricted, unpickler_allowed=True) == [
        "line 2: class R(pickle.Unpickler) without its own find_class"]
    assert problems("import pickle\npickle.load(f)", unpickler_allowed=True) == ["line 2: pickle.load"]
