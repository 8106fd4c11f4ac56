"""Cyclic garbage collection paused while pshell builds many small objects.

Loading a workspace, decoding a cache entry, translating a graph text or reading a dump.json
makes 10^5-10^6 small objects and no reference cycles: the collector's passes over them find
nothing and cost 30% to 2x of the work. Every such place pauses it the same way.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager


@contextmanager
def gc_paused(freeze: bool = False):
    """No cyclic collection inside; ``freeze``: afterwards, move every object that exists then out
    of later passes (for what lives as long as the session)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
        if freeze:
            gc.freeze()
