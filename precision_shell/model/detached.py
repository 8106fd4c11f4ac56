"""Work that outlives the command: a detached grandchild process (POSIX double fork).

Used for start-up cache writes (the first start does not wait for a big graph's entry to be
encoded) and for the file sizes a batch run did not finish counting. The child exits at once and
is reaped here, so no zombie is left in a long REPL session; the grandchild starts its own
session, so a Ctrl-C at the terminal does not cut its write short. Copy-on-write makes the fork
cheap.
"""

from __future__ import annotations

import os
from collections.abc import Callable


def run_detached(work: Callable[[], object]) -> bool:
    """Run ``work`` in a detached grandchild; False when no process could be forked (then
    nothing ran: the caller decides whether to do it here)."""
    if not hasattr(os, "fork"):
        return False
    try:
        pid = os.fork()
    except OSError:
        return False
    if pid == 0:  # child
        try:
            if os.fork() == 0:  # grandchild
                try:
                    os.setsid()
                    work()
                finally:
                    os._exit(0)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    return True
