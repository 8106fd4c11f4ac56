"""Eager only: what the capture cannot see is reported, never silently missed (B3).

A ``torch.compile``'d module or function runs as a graph that the TorchFunctionMode and the
module hooks may not enter, and a CUDA graph replay runs kernels with no Python call at all. The
watch notes each one it meets; the capture reports the notes (``pshell_meta.json``
``not_eager`` and one warning line each from the runner).
"""

from __future__ import annotations

import sys

import torch


class EagerWatch:
    def __init__(self) -> None:
        self.notes: list[str] = []
        self._patched: list[tuple[object, str, object]] = []
        self._graphs_before = self._compiled_graphs()

    def install(self) -> None:
        self._patch(torch, "compile", "torch.compile called")
        graph = getattr(torch.cuda, "CUDAGraph", None)
        if graph is not None:
            self._patch(graph, "replay", "CUDA graph replayed")

    def remove(self) -> None:
        for owner, attr, original in reversed(self._patched):
            setattr(owner, attr, original)
        self._patched.clear()
        graphs = self._compiled_graphs() - self._graphs_before
        if graphs > 0:
            self._note(f"{graphs} graph(s) compiled by torch.compile (dynamo) during the capture")

    def saw_module(self, module) -> None:
        if type(module).__name__ == "OptimizedModule":
            self._note(f"compiled module {type(getattr(module, '_orig_mod', module)).__name__} "
                       f"(torch.compile) called")

    def _note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def _patch(self, owner, attr: str, text: str) -> None:
        original = getattr(owner, attr)
        watch = self

        def noted(*args, **kwargs):
            watch._note(text)
            return original(*args, **kwargs)
        self._patched.append((owner, attr, original))
        setattr(owner, attr, noted)

    @staticmethod
    def _compiled_graphs() -> int:
        dynamo = sys.modules.get("torch._dynamo.utils")
        if dynamo is None:
            return 0
        return int(dynamo.counters["stats"].get("unique_graphs", 0))
