"""Where a one-shot command's start goes: perf_counter marks (ms after this script's start) when
``cli`` is imported, the session is open, ``compare_run`` and the compare engine are imported,
``prepare_vc`` runs, the first compare task starts, the CSV is written, ``main`` returns.

    python bench/one_shot_marks.py WS -o OUT -c "vc -j 2" --format json

Nothing is imported before its time: the hooks are an import finder that wraps the two modules
as they load. ``main(argv)`` is called as a caller would (the cyclic GC stays on; the program's
own ``-c`` run has none), so the marks include its passes. Run it alternating with another
checkout (``PYTHONPATH=/other/checkout``) and take medians: one run is noise on a shared machine.
"""

import importlib.machinery
import resource
import sys
import threading
import time

T0 = time.perf_counter()
MARKS: list[tuple[float, str, str]] = []


def mark(what: str) -> None:
    MARKS.append((time.perf_counter() - T0, threading.current_thread().name[:12], what))


def wrap(module, name: str) -> None:
    fn = getattr(module, name)

    def wrapped(*args, **kwargs):
        mark(f"> {name}")
        try:
            return fn(*args, **kwargs)
        finally:
            mark(f"< {name}")

    setattr(module, name, wrapped)


def _on_engine(module) -> None:
    run_task, first = module.run_task, []

    def first_task(task):
        if not first:
            first.append(True)
            mark("first task starts")
        return run_task(task)

    module.run_task = first_task


HOOKS = {"precision_shell.commands.compare_run": lambda m: [wrap(m, "prepare_vc"), wrap(m, "write_vendor_csv")],
         "precision_shell.analysis.compare.engine": _on_engine}


class _MarkingFinder:
    """Finds nothing itself: wraps the loader of a hooked module to mark and patch it once run."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name not in HOOKS:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None:
            return None
        exec_module = spec.loader.exec_module

        def marked(module):
            exec_module(module)
            mark(f"{name.rpartition('.')[2]} imported")
            HOOKS[name](module)

        spec.loader.exec_module = marked
        return spec


def main() -> int:
    sys.meta_path.insert(0, _MarkingFinder)
    from precision_shell import cli

    mark("cli imported")
    wrap(cli, "_open_session")
    rc = cli.main(sys.argv[1:])
    mark("main returned")
    usage = resource.getrusage(resource.RUSAGE_SELF)
    for at, thread, what in MARKS:
        print(f"{at * 1000:8.1f} ms  {thread:12s} {what}", file=sys.stderr)
    print(f"cpu user {usage.ru_utime:.2f} s sys {usage.ru_stime:.2f} s, {len(sys.modules)} modules", file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
