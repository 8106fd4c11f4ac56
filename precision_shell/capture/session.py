"""``with capture(OUT, model=m, mode=..., level=...):`` -- one capture session (framework-dumps.md B3).

Every step is written to ``OUT/step{N}/rank{R}/`` when the session ends or :meth:`Capture.step`
is called. A body that raises still gets its files, marked ``"partial": true`` in
``pshell_meta.json`` with the error; the exception goes on to the caller.
"""

from __future__ import annotations

import os

import torch

from ..errors import PshellError
from .api_mode import ApiMode
from .eager import EagerWatch
from .modules import ModuleHooks
from .naming import OperatorMarks
from .output import write_rank_folder
from .recorder import Recorder

_LEVELS = {"api": "L1", "L1": "L1", "module": "L0", "L0": "L0", "mix": "mix"}
_MODES = ("tensor", "statistics")


class CaptureError(PshellError):
    """A capture that cannot be made or written: one line naming the folder and the reason."""


def distributed_rank() -> int:
    dist = getattr(torch, "distributed", None)
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return 0


def _autocast_state() -> dict | None:
    for device in ("cuda", "cpu"):
        try:
            if torch.is_autocast_enabled(device):
                return {"device": device, "dtype": str(torch.get_autocast_dtype(device))}
        except (RuntimeError, TypeError):
            continue
    return None


class Capture:
    def __init__(self, out, model=None, mode: str = "statistics", level: str = "mix",
                 step: int = 0, rank: int | None = None, max_bytes: int | None = None,
                 autocast: tuple[str, torch.dtype] | None = None) -> None:
        if mode not in _MODES:
            raise CaptureError(f"mode {mode!r}: expected one of {', '.join(_MODES)}")
        if level not in _LEVELS:
            raise CaptureError(f"level {level!r}: expected one of api, module, mix")
        self.out = os.fspath(out)
        self.model = model
        self.mode = mode
        self.level = _LEVELS[level]
        self.step_number = step
        self.rank = rank
        self.max_bytes = max_bytes
        self.autocast = autocast
        self.recorder: Recorder | None = None
        self.written: list[str] = []       # rank folders written, in step order
        self.partial_reason: str | None = None

    # --- entering and leaving -----------------------------------------------------------------
    def __enter__(self) -> "Capture":
        if self.rank is None:
            self.rank = distributed_rank()
        self.recorder = self._new_recorder()
        self._autocast_cm = None
        if self.autocast is not None:
            self._autocast_cm = torch.autocast(self.autocast[0], dtype=self.autocast[1])
            self._autocast_cm.__enter__()
        self.settings = {"torch": torch.__version__, "mode": self.mode, "level": self.level,
                         "autocast": _autocast_state(), "seed": torch.initial_seed(),
                         "rank": self.rank, "max_bytes": self.max_bytes}
        self.eager = EagerWatch()
        self.eager.install()
        self.modules = None
        if self.level in ("L0", "mix"):
            self.modules = ModuleHooks(self, self.model, self.eager)
            self.modules.install()
        self.marks = self.mode_cm = None
        if self.level in ("L1", "mix"):
            self.marks = OperatorMarks()
            self.marks.install()
            self.mode_cm = ApiMode(self, self.marks)
            self.mode_cm.__enter__()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if self.mode_cm is not None:
            self.mode_cm.__exit__(None, None, None)
            self.marks.remove()
        if self.modules is not None:
            self.modules.remove()
        self.eager.remove()
        if self._autocast_cm is not None:
            self._autocast_cm.__exit__(None, None, None)
        if exc is not None:
            self.partial_reason = f"{exc_type.__name__}: {exc}".splitlines()[0]
        self._write()
        return False

    def step(self) -> None:
        """Write the current step and start ``step{N+1}``."""
        self._write()
        self.step_number += 1
        self.recorder = self._new_recorder()

    # --- files ----------------------------------------------------------------------------------
    @property
    def rank_dir(self) -> str:
        return os.path.join(self.out, f"step{self.step_number}", f"rank{self.rank}")

    def _new_recorder(self) -> Recorder:
        rank_dir = self.rank_dir
        if os.path.exists(os.path.join(rank_dir, "dump.json")):
            raise CaptureError(f"{rank_dir}: already holds a capture (dump.json); "
                               f"choose another output folder")
        try:
            os.makedirs(os.path.join(rank_dir, "dump_tensor_data") if self.mode == "tensor"
                        else rank_dir, exist_ok=True)
            probe = os.path.join(rank_dir, ".pshell_write_probe")
            with open(probe, "w"):
                pass
            os.remove(probe)
        except OSError as exc:
            raise CaptureError(f"{self.out}: cannot write the capture: "
                               f"{exc.strerror or exc}") from None
        recorder = Recorder(rank_dir, self.mode, self.level, self.max_bytes)
        if self.recorder is not None:
            recorder.parameter_names = self.recorder.parameter_names
        return recorder

    def _write(self) -> None:
        rec = self.recorder
        rec.finish_backward()
        if self.modules is not None:
            self.modules.finish()
        files = rec.files
        meta = {"capture": self.settings, "step": self.step_number, "rank": self.rank,
                "partial": self.partial_reason is not None, "error": self.partial_reason,
                "not_eager": list(self.eager.notes),
                "entries": len(rec.data),
                "tensor_files": files.files_written if files else 0,
                "tensor_bytes": files.bytes_written if files else 0,
                "tensor_files_linked": files.linked if files else 0,
                "tensors_stopped": files.stopped if files else None}
        try:
            write_rank_folder(rec, meta)
        except OSError as exc:
            raise CaptureError(f"{rec.rank_dir}: cannot write the capture: "
                               f"{exc.strerror or exc}") from None
        self.written.append(rec.rank_dir)


def capture(out, model=None, mode: str = "statistics", level: str = "mix", step: int = 0,
            rank: int | None = None, max_bytes: int | None = None, autocast=None) -> Capture:
    """A capture session: use as ``with capture(...) as cap:``; see :class:`Capture`."""
    return Capture(out, model=model, mode=mode, level=level, step=step, rank=rank,
                   max_bytes=max_bytes, autocast=autocast)
