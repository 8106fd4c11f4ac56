"""The INI config file and the `config show` / `config set` command."""

from __future__ import annotations

import configparser
from pathlib import Path
from types import SimpleNamespace

import pytest

from precision_shell.commands import REGISTRY
from precision_shell.commands.runner import execute, split_statements
from precision_shell.config import (Config, current_config, default_config_path, load_config,
                                    save_config, use_config)
from precision_shell.errors import FormatError, UsageError
from precision_shell.model.session import Settings


@pytest.fixture(autouse=True)
def _own_config(tmp_path, monkeypatch):
    """Each test has its own config dir and starts without a loaded config."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg_config"))
    use_config(None)
    yield
    use_config(None)


def run(line: str, session=None):
    return execute(session, split_statements(line)[0], REGISTRY)


def fake_session(tmp_path: Path) -> SimpleNamespace:
    """What `config set` touches: settings and the workspace's output folder."""
    return SimpleNamespace(settings=Settings(),
                           workspace=SimpleNamespace(output_dir=tmp_path / "discovered_out"))


def test_default_path_follows_xdg_config_home(tmp_path):
    assert default_config_path() == tmp_path / "xdg_config" / "pshell" / "config.ini"


def test_missing_file_gives_the_defaults_of_the_session_settings(tmp_path):
    cfg = load_config(None)
    settings = Settings()
    assert (cfg.threshold, cfg.limit, cfg.pager, cfg.color) == (
        settings.threshold, settings.limit, settings.pager, settings.color)
    assert cfg.editing_mode == "emacs" and cfg.output == ""
    assert cfg.warnings == []
    assert cfg.path == default_config_path()


def test_save_and_load_round_trip(tmp_path):
    cfg = Config()
    for key, text in [("threshold", "0.95"), ("limit", "0"), ("pager", "off"),
                      ("output", "~/pshell_out"), ("editing_mode", "vi"), ("color", "no"),
                      ("min_coverage", "75%"), ("eval_memory", "2G"), ("eval_timeout", "5")]:
        cfg.set(key, text)
    path = save_config(cfg, tmp_path / "sub" / "c.ini")
    assert path.is_file()
    back = load_config(path)
    assert back.values() == cfg.values()
    assert back.values() == {"threshold": 0.95, "limit": 0, "pager": False,
                             "output": "~/pshell_out", "editing_mode": "vi", "color": False,
                             "min_coverage": 75.0, "scheduler": "", "expanded": "auto", "timing": False,
                             "eval_memory": 2 << 30, "eval_timeout": 5.0}
    # the file is plain INI another tool can read
    raw = configparser.ConfigParser()
    raw.read(path)
    assert raw["pshell"]["pager"] == "off" and raw["pshell"]["threshold"] == "0.95"


def test_bad_values_and_unknown_keys_are_skipped_with_a_warning(tmp_path):
    path = tmp_path / "c.ini"
    path.write_text("[pshell]\nthreshold = 1.5\nlimit = many\neditor = nano\n"
                    "Editing-Mode = vi\npager = off\n", encoding="utf-8")
    cfg = load_config(path)
    assert cfg.threshold == Config().threshold and cfg.limit == Config().limit
    assert cfg.editing_mode == "vi" and cfg.pager is False   # the good lines still count
    text = "\n".join(cfg.warnings)
    assert len(cfg.warnings) == 3
    assert "threshold" in text and "limit" in text and "'editor'" in text
    assert all(str(path) in w for w in cfg.warnings)


@pytest.mark.parametrize("content", ["threshold = 0.9\n", "[pshell\nlimit=3\n", b"\xff\xfe[x]\n"])
def test_a_file_that_is_not_ini_is_a_format_error(tmp_path, content):
    path = tmp_path / "c.ini"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(FormatError) as info:
        load_config(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("key,text", [("threshold", "nan"), ("threshold", "-2"), ("limit", "-1"),
                                      ("limit", "2.5"), ("pager", "maybe"), ("editing_mode", "nano"),
                                      ("colour", "blue"), ("nosuch", "1")])
def test_set_rejects_bad_values_as_usage_errors(key, text):
    cfg = Config()
    before = cfg.values()
    with pytest.raises(UsageError):
        cfg.set(key, text)
    assert cfg.values() == before


def test_config_show_lists_every_setting_and_the_file(tmp_path):
    path = tmp_path / "c.ini"
    path.write_text("[pshell]\nlimit = 7\n", encoding="utf-8")
    use_config(load_config(path))
    outcome = run("config show")
    assert outcome.error is None
    rows = {row[0]: row[1] for row in outcome.result.rows}
    assert rows["limit"] == "7" and rows["pager"] == "on" and rows["threshold"] == "0.98"
    assert set(rows) == set(Config().values())
    assert any(str(path) in note for note in outcome.result.notes)
    one = run("config show limit")
    assert [r[:2] for r in one.result.rows] == [["limit", "7"]]


def test_config_set_applies_to_the_session_only(tmp_path):
    session = fake_session(tmp_path)
    outcome = run("config set threshold 0.9", session)
    assert outcome.error is None
    assert session.settings.threshold == 0.9
    assert outcome.result.data["saved"] is False
    assert not default_config_path().exists()
    assert "--save" in "\n".join(outcome.result.lines)


def test_config_set_save_writes_only_that_key(tmp_path):
    session = fake_session(tmp_path)
    run("config set limit 0", session)                  # session only
    outcome = run("config set pager off --save", session)
    assert outcome.error is None and outcome.result.data["saved"] is True
    assert str(default_config_path()) in "\n".join(outcome.result.lines)
    assert session.settings.pager is False and session.settings.limit == 0
    on_file = load_config(None)
    assert on_file.pager is False and on_file.limit == Config().limit


def test_config_set_output_and_back_to_default(tmp_path):
    session = fake_session(tmp_path)
    discovered = session.workspace.output_dir
    run(f"config set output {tmp_path / 'mine'}", session)
    assert session.workspace.output_dir == tmp_path / "mine"
    run("config set output default", session)
    assert session.workspace.output_dir == discovered
    assert load_config(None).output == ""


def test_setting_one_key_leaves_a_command_line_output_folder_alone(tmp_path):
    session = fake_session(tmp_path)
    cfg = load_config(None)
    cfg.set("output", str(tmp_path / "from_config"))
    use_config(cfg)
    cfg.apply_to(session, output_overridden=True)   # `pshell -o DIR`
    assert session.workspace.output_dir == tmp_path / "discovered_out"
    run("config set limit 5", session)
    assert session.workspace.output_dir == tmp_path / "discovered_out"
    assert session.settings.limit == 5


def test_config_set_bad_value_is_a_usage_error_and_changes_nothing(tmp_path):
    session = fake_session(tmp_path)
    outcome = run("config set limit lots", session)
    assert isinstance(outcome.error, UsageError)
    assert session.settings.limit == Settings().limit
    assert not default_config_path().exists()
    outcome = run("config set limit", session)
    assert isinstance(outcome.error, UsageError) and "KEY VALUE" in str(outcome.error)
    outcome = run("config set wrongkey 3", session)
    assert isinstance(outcome.error, UsageError)


def test_unwritable_config_still_applies_for_the_session(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    use_config(load_config(blocker / "config.ini"))   # parent is a file: cannot save
    session = fake_session(tmp_path)
    outcome = run("config set limit 3 --save", session)
    assert outcome.error is None
    assert session.settings.limit == 3
    assert outcome.result.data["saved"] is False
    assert "this session only" in "\n".join(outcome.result.lines)


def test_config_works_without_a_workspace():
    outcome = run("config set editing_mode vi --save")
    assert outcome.error is None
    assert current_config().editing_mode == "vi"
    assert load_config(None).editing_mode == "vi"

