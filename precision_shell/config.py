"""User settings in an INI file: ``$XDG_CONFIG_HOME/pshell/config.ini`` or ``--config FILE``.

``config set KEY VALUE`` validates a value and applies it to the running session only;
``config set KEY VALUE --save`` also writes it to the file, so the next REPL starts with it. Only the REPL loads the file at start-up: batch runs take their
settings from flags, so a CI job gives the same answer on every machine.

Layout::

    [pshell]
    threshold = 0.98
    limit = 20
    min_coverage = 90
    pager = on
    output =
    editing_mode = emacs
    color = on
    scheduler =
    expanded = auto
    timing = off

    [profiles]
    mlu370 = trunc-mantissa-20,ftz
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from precision_shell.atomic_write import write_atomic
from precision_shell.config_path import default_config_path
from precision_shell.errors import FormatError, PshellError, UsageError
from precision_shell.formats.input_files import read_text_input

SECTION = "pshell"
PROFILES_SECTION = "profiles"
_TRUE = {"on", "true", "yes", "1"}
_FALSE = {"off", "false", "no", "0"}
CONFIG_CAP = 1 << 20


def _parse_threshold(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"threshold must be a number, got {text!r}") from None
    # A cosine lives in [-1, 1]; NaN or anything outside would make every op pass or fail.
    if not -1.0 <= value <= 1.0:
        raise UsageError(f"threshold is a cosine similarity in [-1, 1], got {text!r}")
    return value


def _parse_limit(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"limit must be a whole number (0 = no limit), got {text!r}") from None
    if value < 0:
        raise UsageError(f"limit must be 0 (no limit) or more, got {text!r}")
    return value


def parse_min_coverage(text: str) -> float:
    try:
        value = float(text.strip().rstrip("%"))
    except ValueError:
        raise UsageError(f"min_coverage must be a percentage, got {text!r}") from None
    if not 0.0 <= value <= 100.0:
        raise UsageError(f"min_coverage is a percentage from 0 to 100, got {text!r}")
    return value


def _parse_bool(text: str) -> bool:
    word = text.strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise UsageError(f"expected on or off, got {text!r}")


def _parse_editing_mode(text: str) -> str:
    word = text.strip().lower()
    if word not in ("vi", "emacs"):
        raise UsageError(f"editing_mode is vi or emacs, got {text!r}")
    return word


def _parse_expanded(text: str) -> str:
    word = text.strip().lower()
    if word not in ("auto", "on", "off"):
        raise UsageError(f"expanded is auto, on or off, got {text!r}")
    return word


_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_memory(text: str) -> int:
    """``1G``, ``512M``, ``1.5GB``, ``2000000000`` -> bytes (at least 64 MB)."""
    word = text.strip().lower().removesuffix("b").removesuffix("i")
    number, unit = (word[:-1], word[-1]) if word[-1:] in _UNITS and word[-1:] else (word, "")
    try:
        value = int(float(number) * _UNITS[unit])
    except (ValueError, OverflowError):
        raise UsageError(f"eval_memory is a size like 1G or 512M, got {text!r}") from None
    if value < 64 << 20:
        raise UsageError(f"eval_memory must be at least 64M, got {text!r}")
    return value


def _parse_timeout(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"eval_timeout is a number of seconds, got {text!r}") from None
    if not 0 < value <= 86400:
        raise UsageError(f"eval_timeout is seconds from 0 to 86400, got {text!r}")
    return value


def _parse_output(text: str) -> str:
    # Empty (or "default") means pshell's own choice: precision_data/temp/pshell.
    word = text.strip()
    return "" if word.lower() == "default" else word


@dataclass(frozen=True)
class ConfigKey:
    name: str
    parse: Callable[[str], Any]
    help: str


KEYS: dict[str, ConfigKey] = {k.name: k for k in (
    ConfigKey("threshold", _parse_threshold, "cosine at or below which an op fails (vcs -c default)"),
    ConfigKey("limit", _parse_limit, "rows shown by list commands (0 = all)"),
    ConfigKey("min_coverage", parse_min_coverage,
              "% of tensors with a golden counterpart a gated vc/vcs must compare (--min-coverage)"),
    ConfigKey("pager", _parse_bool, "page output taller than the terminal (on/off)"),
    ConfigKey("output", _parse_output, "output folder (empty or 'default': precision_data/temp/pshell)"),
    ConfigKey("editing_mode", _parse_editing_mode, "line editing keys: emacs or vi"),
    ConfigKey("color", _parse_bool, "colour on a terminal (on/off; NO_COLOR always wins)"),
    ConfigKey("scheduler", _parse_output,
              "Dask scheduler ADDRESS for vc/ac work (empty or 'default': this machine's processes)"),
    ConfigKey("expanded", _parse_expanded,
              "tables one field per line: auto (when a table does not fit), on, off"),
    ConfigKey("timing", _parse_bool, "print each command's run time (on/off)"),
    ConfigKey("eval_memory", parse_memory, "memory an eval expression may use (e.g. 1G)"),
    ConfigKey("eval_timeout", _parse_timeout, "seconds an eval expression may run"),
)}


def normalize_key(name: str) -> str:
    """``editing-mode`` and ``Editing_Mode`` both name ``editing_mode``."""
    key = name.strip().lower().replace("-", "_")
    if key == "colour":
        key = "color"
    if key not in KEYS:
        raise UsageError(f"unknown setting {name!r}; settings: {', '.join(KEYS)}")
    return key


def format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


@dataclass
class Config:
    threshold: float = 0.98
    limit: int = 20
    min_coverage: float = 90.0
    pager: bool = True
    output: str = ""
    editing_mode: str = "emacs"
    color: bool = True
    scheduler: str = ""
    expanded: str = "auto"
    timing: bool = False
    eval_memory: int = 1 << 30
    eval_timeout: float = 30.0
    path: Path | None = None
    warnings: list[str] = field(default_factory=list)   # bad lines skipped while loading
    # [profiles]: user-named replay arithmetic profiles, e.g. mlu370 = trunc-mantissa-20,ftz
    profiles: dict[str, str] = field(default_factory=dict)
    # The output folder workspace discovery chose, kept so `config set output default` can go back.
    discovered_output: Path | None = field(default=None, repr=False)

    def values(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in KEYS}

    def set(self, name: str, text: str) -> tuple[str, Any]:
        """Validate and store one setting; returns the canonical key and the parsed value."""
        key = normalize_key(name)
        value = KEYS[key].parse(text)
        setattr(self, key, value)
        return key, value

    def set_and_apply(self, session: Any, name: str, text: str) -> tuple[str, Any]:
        """``config set``: validate, apply to the session; a refused value changes nothing
        (an output folder inside the inputs is refused here, before any command writes)."""
        key = normalize_key(name)
        previous = getattr(self, key)
        key, value = self.set(key, text)
        try:
            self.apply_to(session, [key], check_output=True)
        except PshellError:
            setattr(self, key, previous)
            raise
        return key, value

    def apply_to(self, session: Any, keys: list[str] | None = None, *,
                 output_overridden: bool = False, check_output: bool = False) -> None:
        """Push settings (all, or just ``keys``) into a session (duck-typed: ``settings`` and
        ``workspace``). ``output_overridden``: ``-o DIR`` was given, keep it. ``check_output``:
        refuse an output folder the session's guard refuses (at start-up every writer refuses
        it on its own instead, so the shell still starts)."""
        if session is None:
            return
        settings = session.settings
        if keys is None:   # start-up: --scheduler given on the command line wins over the file
            keys = [k for k in KEYS if k != "scheduler" or not getattr(settings, "scheduler", "")]
        for name in ("threshold", "limit", "min_coverage", "pager", "color", "scheduler"):
            if name in keys:
                setattr(settings, name, getattr(self, name))
        workspace = getattr(session, "workspace", None)
        if workspace is None or output_overridden or "output" not in keys:
            return
        if self.discovered_output is None:
            self.discovered_output = workspace.output_dir
        folder = Path(self.output).expanduser() if self.output else self.discovered_output
        if check_output and hasattr(session, "check_output_folder"):
            session.check_output_folder(folder)
        workspace.output_dir = folder


def load_config(path: str | os.PathLike | None = None) -> Config:
    """Read the INI file; a missing file gives the defaults.

    A file that is not INI at all raises :class:`FormatError`; a bad value or an unknown key is
    skipped with a line in ``Config.warnings``, so one typo does not lose the other settings.
    """
    target = Path(path).expanduser() if path else default_config_path()
    config = Config(path=target)
    if not target.exists():
        if path:
            # An explicit --config FILE that does not exist yet is created by the first `config set`.
            config.warnings.append(f"{target}: no such config file yet (config set creates it)")
        return config
    import configparser   # here: a batch run without a config file never parses one (~1 ms)

    # strict=False: a duplicate key or section is a warning (_duplicates), the last one kept
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    try:   # a regular file of bounded size only: a FIFO or /dev/zero as config is one line
        text = read_text_input(target, "config file", CONFIG_CAP)
        parser.read_string(text, source=str(target))
    except configparser.MissingSectionHeaderError:
        raise FormatError(target, "not an INI config file: no [section] header before the first setting") from None
    except configparser.ParsingError as exc:   # raised after the whole file is read: the rest counts
        lines = text.splitlines()
        config.warnings += [f"{target}: line {lineno}: not 'key = value' ({lines[lineno - 1].strip()!r:.60}), skipped"
                            for lineno, _ in exc.errors]
    except (configparser.Error, UnicodeDecodeError) as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise FormatError(target, f"not an INI config file: {first_line}") from None
    config.warnings += _duplicates(target, text)
    config.warnings += [f"{target}: section [{name}] is not read (sections: [{SECTION}], [{PROFILES_SECTION}])"
                        for name in parser.sections() if name not in (SECTION, PROFILES_SECTION)]
    if parser.has_section(PROFILES_SECTION):
        config.profiles = {name.lower(): text for name, text in parser.items(PROFILES_SECTION)}
    if not parser.has_section(SECTION):
        if parser.sections() and not config.profiles:
            config.warnings.append(f"{target}: no [{SECTION}] section; settings ignored")
        return config
    for name, text in parser.items(SECTION):
        try:
            config.set(name, text)
        except UsageError as exc:
            config.warnings.append(f"{target}: {exc} (setting skipped)")
    return config


def _duplicates(target: Path, text: str) -> list[str]:
    """A line for each key or section given again (configparser keeps the last, as pshell does)."""
    found, section, seen = [], None, {}
    for lineno, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped[0] in "#;" or line[0] in " \t":   # comments, continuations
            continue
        if stripped.startswith("[") and stripped.endswith("]"):
            section = stripped[1:-1]
            key = ("[section]", section)
        else:
            name = stripped.split("=", 1)[0].split(":", 1)[0].strip().lower()
            key = (section, name)
        if key in seen:
            found.append(f"{target}: line {lineno}: section [{section}] given again (line {seen[key]}); "
                         f"read as one section" if key[0] == "[section]" else
                         f"{target}: line {lineno}: [{section}] {key[1]} given again (line {seen[key]}); "
                         f"the last one counts")
        seen.setdefault(key, lineno)
    return found


def save_config(config: Config, path: str | os.PathLike | None = None) -> Path:
    """Write every setting to the INI file (atomically); returns the path written."""
    import configparser

    target = Path(path).expanduser() if path else (config.path or default_config_path())
    parser = configparser.ConfigParser(interpolation=None)
    parser[SECTION] = {name: format_value(value) for name, value in config.values().items()}
    if config.profiles:
        parser[PROFILES_SECTION] = dict(config.profiles)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise FormatError(target, f"cannot save config ({exc.strerror or exc})") from None
    write_atomic(target, parser.write)
    config.path = target
    return target


# The settings of this process. The REPL installs the file it loaded (``--config``); batch runs
# that use `config` get the default file, loaded on first use.
_current: Config | None = None


def use_config(config: Config | None) -> None:
    global _current
    _current = config


def installed_config() -> Config:
    """The settings `config set` or the REPL installed, else the defaults (a batch run never
    reads the config file for them)."""
    return _current if _current is not None else Config()


def current_config() -> Config:
    global _current
    if _current is None:
        try:
            _current = load_config(None)
        except FormatError as exc:
            _current = Config(path=default_config_path(), warnings=[str(exc)])
    return _current
