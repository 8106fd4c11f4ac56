"""The state of one capture: entries in dump order, counters, module nesting, dataflow.

Forward calls (APIs from :mod:`.api_mode`, modules from :mod:`.modules`) and backward records
(:mod:`.backward`) all go through :class:`Recorder`, which names them as msprobe does, builds
their leaves (:mod:`.leaves`) and keeps the exact dataflow: every tensor a recorded call
returns is remembered (weakly, by identity) with the leaf that produced it, so each tensor
input's producer is known when a later call receives it. A tensor that no recorded call returned
is looked up through its view base (``t._base``): ``detach`` and skipped getters such as ``.T``
make views of a recorded output.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager

import torch
from torch.utils.weak import WeakIdKeyDictionary

from .backward import BackwardEntry, tap_tree
from .leaves import LeafMaker, TensorFiles
from .output import PARAMETER

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


class Recorder:
    def __init__(self, rank_dir: str, mode: str, level: str, max_bytes: int | None) -> None:
        self.rank_dir = rank_dir
        self.mode = mode
        self.level = level
        files = None
        if mode == "tensor":
            files = TensorFiles(os.path.join(rank_dir, "dump_tensor_data"), max_bytes)
        self.files = files
        self.leaves = LeafMaker(files)
        self.data: dict[str, dict] = {}
        self.construct: dict[str, str | None] = {}
        self.stacks: dict[str, tuple] = {}
        self.edges: dict[str, str | None] = {}
        self.counters: dict[str, int] = {}
        self.module_stack: list[str] = []      # forward names of the modules now running
        self.waiting: dict[str, BackwardEntry] = {}   # output grads seen, input grads not yet
        self.busy = False                      # our own tensor work: not recorded
        self._producers = WeakIdKeyDictionary()
        self.parameter_names = WeakIdKeyDictionary()   # parameter -> "attn.qkv.weight"

    # --- naming -----------------------------------------------------------------------------
    def next_call(self, key: str) -> int:
        n = self.counters.get(key, 0)
        self.counters[key] = n + 1
        return n

    @contextmanager
    def internal(self):
        """Our own tensor work (statistics, copies): never recorded, never dispatched to us."""
        was, self.busy = self.busy, True
        try:
            with torch._C.DisableTorchFunction():
                yield
        finally:
            self.busy = was

    # --- dataflow ---------------------------------------------------------------------------
    def producer_of(self, t: torch.Tensor) -> str | None:
        source = self._producers.get(t)
        if source is None and t._base is not None:
            source = self._producers.get(t._base)
        if source is None:
            name = self.parameter_names.get(t)
            source = f"{PARAMETER}{name}" if name else None
        return source

    def produced(self, t: torch.Tensor, leaf_name: str, keep_existing: bool = False) -> None:
        if keep_existing and self.producer_of(t) is not None:
            return
        self._producers[t] = leaf_name

    def alias(self, pairs) -> None:
        """Tapped views carry the producer of the tensor they stand for."""
        for original, tapped in pairs:
            source = self.producer_of(original)
            if source is not None:
                self._producers[tapped] = source

    def input_leaves(self, entry: str, args, kwargs) -> tuple[list, dict]:
        """input_args / input_kwargs leaves of a forward entry, with an edge per tensor."""
        def link(t, path):
            self.edges[path] = self.producer_of(t)
        base = f"{entry}.input"
        args_leaf = [self.leaves.value(v, f"{base}.{i}", link) for i, v in enumerate(args)]
        kwargs_leaf = {str(k): self.leaves.value(v, f"{base}.{k}", link) for k, v in kwargs.items()}
        return args_leaf, kwargs_leaf

    def output_leaves(self, entry: str, output, keep_existing: bool) -> list:
        def mark(t, path):
            self.produced(t, path, keep_existing)
        values = output if isinstance(output, (tuple, list)) and not isinstance(output, torch.Size) \
            else (output,)
        return [self.leaves.value(v, f"{entry}.output.{i}", mark) for i, v in enumerate(values)]

    # --- entries ----------------------------------------------------------------------------
    def add(self, name: str, record: dict, parent: str | None, stack: tuple | None,
            construct: bool = True) -> None:
        self.data[name] = record
        if construct and self.level != "L1":
            self.construct[name] = parent
        if stack is not None:
            self.stacks[name] = stack

    def hook_outputs(self, output, entry: BackwardEntry) -> None:
        entry.hook_outputs(output, self._guarded)

    def tap_inputs(self, tree, entry: BackwardEntry):
        """(tapped ``tree``, pairs); ``entry.expects_inputs`` says whether any input needs a
        gradient."""
        new, pairs = tap_tree(tree, self._guarded(entry.inputs_done))
        entry.expects_inputs = bool(pairs)
        self.alias(pairs)
        return new, pairs

    def _guarded(self, done):
        """``done`` run as our own work (autograd calls it during the user's backward)."""
        def run(grads):
            with self.internal():
                done(grads)
        return run

    def write_backward(self, entry: BackwardEntry, grad_inputs) -> None:
        name = entry.name
        self.waiting.pop(name, None)
        grads_out = entry.grad_outputs
        record = {"input": [self.leaves.value(g, f"{name}.input.{i}") for i, g in enumerate(grads_out)],
                  "output": [self.leaves.value(g, f"{name}.output.{i}")
                             for i, g in enumerate(grad_inputs)]}
        self.add(name, record, entry.parent, None)

    def finish_backward(self) -> None:
        """Backward calls whose input gradients never came: written with what arrived."""
        with self.internal():
            for entry in list(self.waiting.values()):
                self.write_backward(entry, ())

    def backward_entry(self, name: str, parent: str | None) -> BackwardEntry | None:
        """A backward collector for a call made with autograd on."""
        return BackwardEntry(self, name, parent) if torch.is_grad_enabled() else None


def call_stack() -> tuple:
    """(file, line, function) frames of the caller, innermost first, without our own frames."""
    frames = []
    frame = sys._getframe(1)
    while frame is not None:
        file = frame.f_code.co_filename
        if not file.startswith(_PACKAGE_DIR):
            frames.append((file, frame.f_lineno, frame.f_code.co_name))
        frame = frame.f_back
    return tuple(frames)
