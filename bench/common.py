"""Helpers shared by the benchmark scripts: child processes with their own rusage, medians,
sample workspaces, page-cache control and a description of the machine.

Why whole processes: what a user waits for is ``pshell WS -c CMD`` from exec to exit (interpreter
start, imports, discovery, the command). Each child is reaped with ``os.wait4`` so its rusage is
its own: ``resource.getrusage(RUSAGE_CHILDREN)`` is a running maximum over every child ever
reaped, so after one large child it would report that child's RSS for every later one.
"""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = "pshell_sample_manifest.json"
# pshell's start-up cache (being added by the lead): deleting it makes the next start "cold".
PSHELL_CACHE = Path("precision_data") / "temp" / "pshell" / "cache"


# ------------------------------------------------------------------------------------------------
# child processes

def bench_env(**extra: str) -> dict[str, str]:
    """Environment for children: the repo importable without installing it, one BLAS/OpenMP
    thread per process (parallelism is what ``-j`` measures, not hidden BLAS threads)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(var, "1")
    env.setdefault("NO_COLOR", "1")
    # Byte-code cached as on any installed Python program (pip compiles on install; an editable
    # install writes __pycache__ on first import). This machine's PYTHONDONTWRITEBYTECODE=1 would
    # make every child compile ~180 modules from source: 0.12-0.2 s of each pshell start. The
    # cache goes under bench/out, not into the source tree.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.setdefault("PYTHONPYCACHEPREFIX", str(ROOT / "bench" / "out" / "pycache"))
    env.update(extra)
    return env


@dataclass
class ChildRun:
    """One measured child process."""

    cmd: list[str]
    wall: float                 # seconds, exec to exit
    user: float                 # CPU seconds of the child and the children it reaped
    sys: float
    rss_mb: float               # peak RSS of the largest single process of the child's tree, MiB
    returncode: int
    stdout: str = ""
    stderr: str = ""
    detached_s: float = 0.0     # waited after exit for processes it left behind (cache writers)
    tree_cpu: float = 0.0       # user+sys of every process of the tree, orphans included
    pss_mb: float = 0.0         # peak of the summed PSS of every live process of the tree, MiB

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def brief(self) -> dict:
        out = {"wall": round(self.wall, 4), "user": round(self.user, 3), "sys": round(self.sys, 3),
               "rss_mb": round(self.rss_mb, 1), "tree_cpu": round(self.tree_cpu, 3),
               "pss_mb": round(self.pss_mb, 1)}
        if self.detached_s:
            out["detached_s"] = round(self.detached_s, 3)
        return out


def _gnu_time() -> bool:
    try:
        probe = subprocess.run(["/usr/bin/time", "-f", "%M", "true"], capture_output=True, text=True,
                               timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    return probe.returncode == 0 and probe.stderr.strip().isdigit()


_GNU_TIME = _gnu_time()
_PR_SET_CHILD_SUBREAPER = 36
_subreaper: bool | None = None


def _become_subreaper() -> bool:
    """Make this harness the reaper of its orphaned descendants (Linux ``prctl``). pshell's pool
    workers fork from a forkserver that the pshell process never reaps (it exits after pshell),
    so their CPU is in no rusage pshell's parent sees; reparented to us, it is in ours."""
    global _subreaper
    if _subreaper is None:
        try:
            _subreaper = sys.platform.startswith("linux") and \
                ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
        except (OSError, AttributeError):
            _subreaper = False
    return _subreaper


def _descendants(root: int) -> list[int]:
    """Pids of every live descendant of ``root`` (one scan of /proc/*/stat)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2:].split(None, 2)[1])
        children.setdefault(ppid, []).append(int(name))
    out, todo = [], [root]
    while todo:
        kids = children.get(todo.pop(), ())
        out.extend(kids)
        todo.extend(kids)
    return out


def _pss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as fh:
            for line in fh:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


class TreePss(threading.Thread):
    """Peak of the summed PSS of every descendant of this process (``skip``: pids not counted,
    e.g. the GNU time wrapper), sampled every ``interval`` seconds until :meth:`stop`. PSS, not
    RSS: pages shared by pshell and its workers (numpy, mapped files) are counted once in the sum."""

    def __init__(self, skip: Sequence[int] = (), interval: float = 0.02):
        super().__init__(daemon=True)
        self.skip, self.interval = set(skip), interval
        self.peak_kb = 0
        self._done = threading.Event()

    def sample(self) -> None:
        total = sum(_pss_kb(pid) for pid in _descendants(os.getpid()) if pid not in self.skip)
        self.peak_kb = max(self.peak_kb, total)

    def run(self) -> None:
        while not self._done.is_set():
            self.sample()
            self._done.wait(self.interval)

    def stop(self) -> float:
        """Stops sampling; the peak in MiB."""
        self._done.set()
        self.join()
        return self.peak_kb / 1024


def _reap_orphans(timeout: float = 600.0) -> tuple[float, float]:
    """Wait for (and reap) every orphan reparented to this harness: (their user+sys CPU incl.
    what they reaped, seconds waited). Only call with no other child of ours running."""
    cpu, start = 0.0, time.perf_counter()
    while time.perf_counter() - start < timeout:
        try:
            pid, _, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            time.sleep(0.005)
            continue
        cpu += usage.ru_utime + usage.ru_stime
    return cpu, time.perf_counter() - start


def run_child(cmd: Sequence[str], *, env: dict[str, str] | None = None,
              cwd: str | os.PathLike | None = None, wait_detached: bool = False, pss: bool = True) -> ChildRun:
    """Run ``cmd`` to completion; wall time and the child's own rusage (via ``os.wait4``; peak
    RSS via GNU time when installed, see below), the CPU seconds of its whole process tree and
    the peak of the tree's summed PSS.

    Linux ``wait4`` reports the child plus the descendants it reaped, and ``ru_maxrss`` is the
    largest of those processes (not a sum): for ``vc -j 2`` that is the bigger of the parent and
    its pool workers. Processes the child leaves behind (a forkserver and its workers, a cache
    writer) are reparented to this harness (a child subreaper) and reaped here, so their CPU is
    in ``tree_cpu``. stdout/stderr go through temporary files so a chatty child cannot block on
    a full pipe while we sit in ``wait4``.

    ``wait_detached``: then wait until no process with the same command line is left. pshell
    writes its start-up cache from a detached (double-forked) copy of itself, which the user
    does not wait for; the next measurement must not start before it is done, or it would run
    without the cache and share the CPUs with the writer. (With a subreaper, every orphan is
    waited for anyway; this is the fallback elsewhere.)

    ``pss=False``: no PSS sampling (``pss_mb`` is NaN). The sampler reads every process's
    ``smaps_rollup`` 50 times a second, which costs CPU on a 2-core machine and holds the
    child's mmap lock while it walks its pages: on a run of under a second (many small ops) it
    added 0.03 s (0.756 vs 0.722 s, 9 runs each at load 1.6) to 0.1 s (at load ~3) to the wall
    (bench/README.md, issue 31). Walls of short runs are taken without it, peaks in runs of their
    own.
    """
    subreaper = _become_subreaper()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.NamedTemporaryFile("r", suffix=".rss") as rss_file:
        # Linux records the high-water RSS of the address space a child leaves at exec: a child
        # forked (or vforked) from this harness would report at least the harness's own RSS. GNU
        # time is small: exec'ed by it, the command's peak is its own.
        wrapper = ["/usr/bin/time", "-f", "%M", "-o", rss_file.name] if _GNU_TIME else []
        start = time.perf_counter()
        proc = subprocess.Popen(wrapper + list(cmd), stdout=out, stderr=err, env=env or bench_env(), cwd=cwd)
        sampler = TreePss(skip=[proc.pid] if wrapper else []) if pss else None
        if sampler is not None:
            sampler.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)   # reaped here: tell Popen
        orphan_cpu, waited = _reap_orphans() if subreaper else (0.0, 0.0)
        pss_mb = sampler.stop() if sampler is not None else float("nan")
        out.seek(0)
        err.seek(0)
        rss_kb = usage.ru_maxrss
        if wrapper:
            lines = rss_file.read().split()
            rss_kb = int(lines[-1]) if lines and lines[-1].isdigit() else rss_kb
        run = ChildRun(list(cmd), wall, usage.ru_utime, usage.ru_stime, rss_kb / 1024,
                       proc.returncode, out.read().decode(errors="replace"),
                       err.read().decode(errors="replace"), waited,
                       usage.ru_utime + usage.ru_stime + orphan_cpu, pss_mb)
    if wait_detached:
        run.detached_s += wait_for_same_cmdline(cmd)
    return run


def wait_for_same_cmdline(cmd: Sequence[str], timeout: float = 600.0) -> float:
    """Seconds spent waiting until no process runs exactly ``cmd`` (a forked copy keeps its
    parent's command line). Linux /proc only; elsewhere returns at once."""
    target = ("\0".join(cmd) + "\0").encode()
    proc = Path("/proc")
    start = time.perf_counter()
    while proc.is_dir() and time.perf_counter() - start < timeout:
        alive = False
        for entry in proc.iterdir():
            if entry.name.isdigit():
                try:
                    alive = (entry / "cmdline").read_bytes() == target
                except OSError:
                    continue
                if alive:
                    break
        if not alive:
            break
        time.sleep(0.05)
    return time.perf_counter() - start


def pshell_cmd(ws: Path, command: str, *extra: str) -> list[str]:
    """``python -m precision_shell WS -c COMMAND --format json`` (batch mode, one JSON per command)."""
    return [sys.executable, "-m", "precision_shell", str(ws), "-c", command, "--format", "json", *extra]


def last_json(text: str):
    """The last line of ``text`` that parses as JSON (batch mode prints one document per line)."""
    for line in reversed(text.strip().splitlines()):
        try:
            return json.loads(line)
        except ValueError:
            continue
    return None


# ------------------------------------------------------------------------------------------------
# statistics

@dataclass
class Series:
    """Repeated samples of one quantity."""

    values: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else float("nan")

    def as_json(self, digits: int = 4) -> dict:
        return {"median": round(self.median, digits), "min": round(min(self.values), digits) if self.values else None,
                "max": round(max(self.values), digits) if self.values else None,
                "runs": [round(v, digits) for v in self.values]}


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..1) of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def median_time(fn: Callable[[], object], repeat: int) -> float:
    """Median wall seconds of ``repeat`` calls of ``fn``."""
    return statistics.median(timed(fn)[0] for _ in range(repeat))


def median_wall_cpu(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    """(wall, CPU) medians: on a shared box the CPU time is the steadier of the two."""
    wall, cpu = [], []
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return statistics.median(wall), statistics.median(cpu)


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


# ------------------------------------------------------------------------------------------------
# sample workspaces

@dataclass
class BenchWorkspace:
    name: str                    # "scale_1000" | "files_50000"
    path: Path
    manifest: dict
    generated: bool              # written by this run (False: an existing one was reused)
    generate_seconds: float | None = None

    @property
    def totals(self) -> dict:
        return self.manifest["totals"]

    @property
    def data_bytes(self) -> int:
        """NPU dump + golden .npy bytes on disk: the denominator of every MB/s figure."""
        return self.totals["npu_dump_bytes"] + self.totals["golden_bytes"]


def _wanted_options(scale_mb: float | None, files: int | None, seed: int) -> dict:
    return {"seed": seed, "scale_mb": float(scale_mb) if scale_mb is not None else None, "files": files}


def manifest_matches(manifest: dict, scale_mb: float | None, files: int | None, seed: int = 0,
                     small_tensors: bool = False) -> bool:
    options = manifest.get("options", {})
    if bool(options.get("small_tensors")) != small_tensors:
        return False
    wanted = _wanted_options(scale_mb, files, seed)
    defaults = {"name_fields": 5, "opdebug_layout": "old", "fusion_shape": 1, "variant": "convnet"}
    return (all(options.get(k) == v for k, v in wanted.items())
            and all(options.get(k, v) == v for k, v in defaults.items()))


def ensure_workspace(parent: Path, *, scale_mb: float | None = None, files: int | None = None,
                     seed: int = 0, log: Callable[[str], None] = print,
                     small_tensors: bool = False) -> BenchWorkspace:
    """``parent/scale_MB`` or ``parent/files_N`` (``small_MB`` with ``small_tensors``: the
    generator's ``--small-tensors``, many ~0.35 MB ops): reused when its manifest records the same
    generator options (and the dumps are still there), else (re)generated in a child process."""
    name = f"scale_{scale_mb:g}" if scale_mb is not None else f"files_{files}"
    if small_tensors:
        name = f"small_{scale_mb:g}"
    path = Path(parent) / name
    manifest_path = path / MANIFEST
    if manifest_path.exists() and (path / "precision_data").is_dir():
        try:
            manifest = json.loads(manifest_path.read_text())
        except ValueError:
            manifest = {}
        if manifest_matches(manifest, scale_mb, files, seed, small_tensors):
            return BenchWorkspace(name, path, manifest, generated=False)
    size = ["--scale", f"{scale_mb:g}"] if scale_mb is not None else ["--files", str(files)]
    size += ["--small-tensors"] if small_tensors else []
    log(f"generating {path} ({' '.join(size)}) ...")
    run = run_child([sys.executable, "-m", "precision_shell.samples", str(path), *size,
                     "--seed", str(seed), "--force"])
    if not run.ok:
        raise SystemExit(f"sample generator failed for {path}:\n{run.stderr.strip()}")
    manifest = json.loads(manifest_path.read_text())
    return BenchWorkspace(name, path, manifest, generated=True, generate_seconds=run.wall)


def remove_workspace(ws: BenchWorkspace) -> None:
    shutil.rmtree(ws.path, ignore_errors=True)


def drop_pshell_cache(ws_path: Path) -> bool:
    """Delete pshell's start-up cache of this workspace; True if there was one."""
    cache = Path(ws_path) / PSHELL_CACHE
    if cache.exists():
        shutil.rmtree(cache, ignore_errors=True)
        return True
    return False


# ------------------------------------------------------------------------------------------------
# page cache (no root needed)

def workspace_files(ws_path: Path) -> list[Path]:
    """Every input file of the workspace (pshell's own output folder excluded)."""
    out = []
    skip = Path(ws_path) / "precision_data" / "temp" / "pshell"
    for dirpath, dirnames, filenames in os.walk(Path(ws_path) / "precision_data"):
        if Path(dirpath) == skip.parent:
            dirnames[:] = [d for d in dirnames if d != "pshell"]
        out.extend(Path(dirpath) / f for f in filenames)
    return out


def evict_page_cache(paths: Iterable[Path]) -> int:
    """Drop these files' pages from the page cache: ``fsync`` (written pages must be clean to
    be dropped) then ``posix_fadvise(DONTNEED)``. Works as any user, touches only these files,
    unlike ``/proc/sys/vm/drop_caches`` (root, and it would slow everyone on a shared box).
    Returns the number of files advised."""
    count = 0
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            try:
                os.fsync(fd)
            except OSError:
                pass
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            count += 1
        finally:
            os.close(fd)
    return count


def warm_page_cache(paths: Iterable[Path]) -> int:
    """Read every file once so the next runs find it in the page cache; returns bytes read."""
    total = 0
    for path in paths:
        with open(path, "rb", buffering=0) as fh:
            while chunk := fh.read(16 << 20):
                total += len(chunk)
    return total


_libc = None


def resident_fraction(paths: Sequence[Path], sample: int = 200) -> float | None:
    """Fraction of the pages of (up to ``sample`` of) ``paths`` that are in the page cache,
    via ``mincore``; None where that is unavailable. Used to check that eviction worked."""
    global _libc
    if not sys.platform.startswith("linux"):
        return None
    try:
        import numpy as np
        _libc = _libc or ctypes.CDLL(None, use_errno=True)
    except (ImportError, OSError):
        return None
    step = max(1, len(paths) // sample)
    page = mmap.PAGESIZE
    resident = total = 0
    for path in list(paths)[::step]:
        size = path.stat().st_size
        if size == 0:
            continue
        pages = (size + page - 1) // page
        vec = (ctypes.c_ubyte * pages)()
        with open(path, "rb") as fh, mmap.mmap(fh.fileno(), size, prot=mmap.PROT_READ) as mapped:
            view = np.frombuffer(mapped, dtype=np.uint8)   # zero-copy: only to learn the address
            failed = _libc.mincore(ctypes.c_void_p(view.ctypes.data), ctypes.c_size_t(size), vec)
            del view
        if failed:
            return None
        resident += sum(v & 1 for v in vec)
        total += pages
    return resident / total if total else None


# ------------------------------------------------------------------------------------------------
# the machine

def machine_info() -> dict:
    import numpy

    info = {"cpu_count": os.cpu_count(), "python": platform.python_version(), "numpy": numpy.__version__,
            "platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "load_average": [round(v, 2) for v in os.getloadavg()]}
    try:
        import google.protobuf
        from google.protobuf.internal import api_implementation
        info["protobuf"] = f"{google.protobuf.__version__} ({api_implementation.Type()})"
    except ImportError:
        pass
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith(("MemTotal:", "MemAvailable:")):
                    key, value = line.split(":")
                    info[key.lower()+"_gb"] = round(int(value.split()[0]) / 1024 ** 2, 1)
    except OSError:
        pass
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    info["cpu_model"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return info


def code_version() -> dict:
    """The commit measured and the files that differ from it (the tree may be edited while a
    long run goes on: recorded at start and end). Read-only git calls (no index refresh)."""
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", "--no-optional-locks", "-C", str(ROOT), *args], capture_output=True,
                                  text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    changed = [line[3:] for line in git("status", "--porcelain").splitlines() if line[3:].startswith("precision_shell")]
    return {"commit": git("rev-parse", "--short", "HEAD") or None, "uncommitted": changed}
