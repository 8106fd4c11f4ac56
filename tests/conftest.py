"""Shared fixtures: workspaces made by the sample generator (the source of every expected value)."""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path

import pytest

from precision_shell.cli import main
from precision_shell.samples.writer import SampleOptions, write_workspace


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory, monkeypatch):
    """Logs, history and config of the code under test go to a temp dir, never to $HOME."""
    home = tmp_path_factory.getbasetemp() / "home"
    for var, sub in (("XDG_STATE_HOME", "state"), ("XDG_DATA_HOME", "data"),
                     ("XDG_CONFIG_HOME", "config"), ("XDG_CACHE_HOME", "cache")):
        monkeypatch.setenv(var, str(home / sub))
    monkeypatch.delenv("NO_COLOR", raising=False)


@pytest.fixture(scope="session", autouse=True)
def _cwd_in_temp(tmp_path_factory):
    """The run starts in a temp folder (session scope: before module fixtures open sessions), so code
    under test that writes relative to the current folder (a framework session's default ./pshell_out)
    writes there, never into the checkout."""
    before = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("cwd"))
    yield
    os.chdir(before)


REPO = Path(__file__).resolve().parents[1]
_REPO_ENTRIES = frozenset(p.name for p in REPO.iterdir())


def pytest_sessionfinish(session, exitstatus):
    """Fail the run when a test left something in the checkout's root (tests write under tmp only)."""
    new = sorted(p.name for p in REPO.iterdir() if p.name not in _REPO_ENTRIES
                 and not p.name.startswith("."))
    if new:
        print(f"\nerror: tests wrote into the checkout: {', '.join(new)}")
        session.exitstatus = 1


# Test modules run twice, with the C metrics kernel and with the numpy path (PSHELL_NO_EXT=1),
# so that CI tests the fallback wherever a compiler exists too.
BOTH_METRIC_PATHS = frozenset({"test_compare", "test_vc_tasks", "test_vcs", "test_overflow",
                               "test_ac_small_files"})


def pytest_generate_tests(metafunc):
    if metafunc.module.__name__.rpartition(".")[2] in BOTH_METRIC_PATHS:
        metafunc.parametrize("metrics_path", ["default", "numpy"], indirect=True)


@pytest.fixture(autouse=True)
def metrics_path(request, monkeypatch) -> str:
    """"default" (the environment's choice: the kernel when built) or "numpy" (``PSHELL_NO_EXT=1``
    for this test)."""
    path = getattr(request, "param", "default")
    if path == "numpy":
        monkeypatch.setenv("PSHELL_NO_EXT", "1")
    return path


@pytest.fixture(scope="session")
def sample_ws(tmp_path_factory) -> tuple[Path, dict]:
    """A default sample workspace (same as sample_data/convnet) and its manifest."""
    root = tmp_path_factory.mktemp("sample_ws")
    return root, write_workspace(root, SampleOptions(seed=0))


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def json_docs(out: str) -> list:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def cache_round_trip(kind, value, key=("key",)):
    """``value`` as a start-up cache entry of ``kind`` would give it back (bytes and all)."""
    from precision_shell.model.load_cache import LoadCache

    cache = LoadCache(None)
    copy = cache.value_of(kind, LoadCache.entry(kind, key, value), key, "round trip")
    assert cache.warnings == []
    return copy


class InterruptAfter:
    """A session/compare progress factory whose bar raises Ctrl-C once ``n`` steps are done."""

    def __init__(self, n: int):
        self.n, self.seen = n, 0

    @contextmanager
    def __call__(self, label, total):
        outer = self

        class Bar:
            def advance(self, k: int = 1):
                outer.seen += k
                if outer.seen >= outer.n:
                    raise KeyboardInterrupt

        yield Bar()
