"""Where a session writes, for both rooms (graph workspaces and framework dumps): the output
folder, a path the user gave, each checked by the session's output guard before anything is
created. A session class mixes this in and gives ``workspace.output_dir``, ``extra_inputs``
and ``output_guard(output_dir=None)``."""

from __future__ import annotations

import os
from pathlib import Path

from precision_shell.errors import FormatError
from precision_shell.model.output_guard import FILE, InputPlace, require_parent


class OutputWriter:
    def output_path(self, given: str | os.PathLike | None, default_name: str = "",
                    folder: bool = False) -> Path:
        """Where pshell writes: a path the user gave (relative to the current folder), else
        ``default_name`` inside the output folder, checked by the output guard. pshell creates
        its own output folder (and folders inside it) and the folder a user names for ``folder``
        outputs; an explicit file's folder must exist."""
        if not given:
            path = self.workspace.output_dir / default_name
            self.check_writable_location(path, folder=folder)
            make_folder(path if folder else path.parent, parents=True)
            return path
        path = Path(given).expanduser()
        self.check_writable_location(path, folder=folder)
        require_parent(path)
        if folder:
            make_folder(path, parents=False)
        return path

    def add_input_file(self, path: str | os.PathLike, what: str) -> None:
        """A file read outside the workspace (the ``-f`` script, the config file): never written."""
        self.extra_inputs.append(InputPlace.of(Path(path).expanduser(), FILE, what))

    def check_output_folder(self, folder: Path) -> None:
        """A folder about to become the output folder (``config set output``)."""
        self.output_guard(folder).check(folder, folder=True)

    def check_writable_location(self, path: str | os.PathLike, *, folder: bool = False) -> None:
        """pshell never writes inside the user's input folders nor over an input file."""
        self.output_guard().check(path, folder=folder)


def make_folder(path: Path, parents: bool) -> None:
    try:
        path.mkdir(parents=parents, exist_ok=True)
    except FileNotFoundError:
        raise FormatError(path, f"folder {path.parent} does not exist") from None
    except OSError as exc:
        raise FormatError(path, f"cannot create output folder ({exc.strerror})") from None
