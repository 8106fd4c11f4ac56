"""pshell's own PyTorch capture (framework-dumps.md B; optional: ``pip install '.[capture]'``).

``with capture("runs/bf16", model=model, mode="tensor"):`` records one eager training step in
msprobe's dump layout (so msprobe's compare and pshell's msprobe reader take it) plus
``pshell_meta.json`` with the exact dataflow edges. ``python -m precision_shell.capture`` runs a
script under it (see :mod:`.runner`). This is the only package of pshell that imports torch.
"""

from .session import Capture, CaptureError, capture

__all__ = ["Capture", "CaptureError", "capture"]
