"""Compare throughput side by side on the same files, in one run (issue 16's table).

For each workspace (generated or reused: ``python -m precision_shell.samples DIR --scale MB``),
page cache warm, each run a fresh process, the sides alternating round by round so that load
changes on a shared machine hit all of them:

* ``vc -j N`` with the C metrics kernel, and the same with the numpy path (``PSHELL_NO_EXT=1``);
* ``ac -l 0`` with both paths;
* the vendor engine (``msaccucmp compare -f``, ``~/.cache/pshell-vendor-engine``, set up by
  ``../shared/tools/vendor-engine/setup.sh``) on the same dump and golden folders.

Per side: median wall, GB/s (vc: NPU dump + golden .npy bytes on disk; ac: NPU dump bytes),
CPU seconds of the whole process tree (pool workers and forkserver children included: the
harness is their subreaper, see ``common.run_child``), cores busy (tree CPU / wall), peak summed
PSS of the tree (``/proc/PID/smaps_rollup`` of every descendant every 20 ms, in ``--pss-runs``
rounds of their own: sampling slows a run of under a second, so the timed runs do not), and the ratios
vendor / pshell and numpy / C. The C and numpy runs must write byte-identical CSVs and print the
same JSON (timings aside): checked on every workspace, a difference is printed as ``DIFFER``.

    python bench/compare_throughput.py --sizes 400,2000 --runs 3 --vendor-runs 3,1
    python bench/compare_throughput.py --small-tensors --sizes 740 --runs 5 --vendor-runs 0 --against /work/main
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from baseline import VENDOR_LAUNCHER as VENDOR, vendor_compare_cmd  # noqa: E402
from common import (  # noqa: E402
    BenchWorkspace, ChildRun, Series, bench_env, ensure_workspace, last_json, resident_fraction, run_child,
    warm_page_cache, workspace_files,
)

# timing fields of the JSON summaries: the only ones allowed to differ between the C and numpy runs
TIMING_KEYS = ("seconds", "mb_per_s", "csv")


@dataclass
class Side:
    label: str
    cmd: list[str]
    env: dict[str, str]
    nbytes: int                               # bytes the command has to read (GB/s = this / wall)
    runs: list[ChildRun] = field(default_factory=list)
    memory_runs: list[ChildRun] = field(default_factory=list)   # PSS sampled (``runs``: not, see --pss-runs)
    ok_codes: tuple[int, ...] = (0,)
    cwd: Path | None = None                   # where the command starts (another tree: its root)

    def good(self) -> list[ChildRun]:
        return [r for r in self.runs if r.returncode in self.ok_codes]

    def series(self, attr: str) -> Series:
        runs = self.good()
        if attr == "pss_mb":   # peaks from the runs that sampled them
            runs = [r for r in runs + [r for r in self.memory_runs if r.returncode in self.ok_codes]
                    if r.pss_mb == r.pss_mb]
        return Series([getattr(r, attr) for r in runs])

    @property
    def wall(self) -> float:
        return self.series("wall").median

    def as_json(self) -> dict:
        return {"label": self.label, "cmd": self.cmd, "bytes": self.nbytes,
                "wall_s": self.series("wall").as_json(), "tree_cpu_s": self.series("tree_cpu").as_json(3),
                "peak_pss_mb": self.series("pss_mb").as_json(1), "runs": [r.brief() for r in self.runs],
                "memory_runs": [r.brief() for r in self.memory_runs],
                "failed": [r.returncode for r in self.runs if r.returncode not in self.ok_codes]}


def pshell_side(label: str, ws: Path, command: str, out: Path, nbytes: int, numpy_path: bool,
                tree: Path | None = None) -> Side:
    """``tree``: run the pshell of that source tree (e.g. the main branch) instead of this one."""
    env = bench_env(**({"PSHELL_NO_EXT": "1"} if numpy_path else {}))
    if not numpy_path:
        env.pop("PSHELL_NO_EXT", None)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    cmd = [sys.executable, "-m", "precision_shell", str(Path(ws).resolve()), "-o", str(Path(out).resolve()), "-c",
           command, "--format", "json"]
    # `python -m` puts the working folder first on sys.path, before PYTHONPATH: another tree's side
    # starts in that tree, or it would run the checkout the bench was started from
    return Side(label, cmd, env, nbytes, cwd=tree)


def vendor_side(ws: BenchWorkspace, out: Path) -> Side | None:
    if not VENDOR.exists():
        return None
    cmd = vendor_compare_cmd(VENDOR, ws.path, ws.manifest, out)
    # it exits 2 when graph ops (Data/Const) have no dump, although it compared everything else
    return Side("vendor msaccucmp", cmd, bench_env(), ws.data_bytes, ok_codes=(0, 2))


def _json_without_timing(run: ChildRun):
    doc = last_json(run.stdout)
    if isinstance(doc, dict):
        return {k: v for k, v in doc.items() if k not in TIMING_KEYS}
    return doc


def identical_outputs(c: Side, numpy_side: Side) -> str:
    """"" when the last good C and numpy runs printed the same JSON (timings aside) and wrote
    byte-identical CSVs; else what differs."""
    a, b = c.good(), numpy_side.good()
    if not a or not b:
        return "no successful run to check"
    if _json_without_timing(a[-1]) != _json_without_timing(b[-1]):
        return "JSON differs"
    docs = [last_json(r.stdout) for r in (a[-1], b[-1])]
    csvs = [d.get("csv") if isinstance(d, dict) else None for d in docs]
    if all(csvs) and Path(csvs[0]).read_bytes() != Path(csvs[1]).read_bytes():
        return f"CSV differs: {csvs[0]} vs {csvs[1]}"
    return ""


def measure_workspace(ws: BenchWorkspace, runs: int, vendor_runs: int, jobs: int, out: Path,
                      log=print, against: Path | None = None, pss_runs: int = 2) -> dict:
    """Every side of one workspace, alternating; returns the JSON-able record."""
    files = workspace_files(ws.path)
    warm_page_cache(files)
    npu_bytes, all_bytes = ws.totals["npu_dump_bytes"], ws.data_bytes
    work = out / ws.name
    shutil.rmtree(work, ignore_errors=True)
    vc = f"vc -j {jobs}"
    sides = [pshell_side(f"pshell {vc} (C)", ws.path, vc, work / "c", all_bytes, False),
             pshell_side(f"pshell {vc} (numpy)", ws.path, vc, work / "numpy", all_bytes, True),
             pshell_side("pshell ac -l 0 (C)", ws.path, "ac -l 0", work / "c", npu_bytes, False),
             pshell_side("pshell ac -l 0 (numpy)", ws.path, "ac -l 0", work / "numpy", npu_bytes, True)]
    before = None
    if against is not None:   # before/after: the other tree's vc, timed in the same rounds
        before = pshell_side(f"{sides[0].label} of {against}", ws.path, vc, work / "against", all_bytes, False,
                             against)
        sides.insert(1, before)
    vendor = vendor_side(ws, work / "vendor") if vendor_runs else None
    load = [os.getloadavg()[0]]
    # pshell's timed runs sample no PSS (the sampler slows a run of under a second: see
    # common.run_child); its peaks come from pss_runs rounds of their own, after the timed ones.
    # The vendor's runs (~30 s) sample theirs: 50 reads a second cost it well under 1%.
    for round_no in range(max(runs, vendor_runs if vendor else 0)):
        for side in sides + ([vendor] if vendor else []):
            if round_no < (vendor_runs if side is vendor else runs):
                side.runs.append(run_child(side.cmd, env=side.env, cwd=side.cwd, pss=side is vendor))
        load.append(os.getloadavg()[0])
        log(f"  {ws.name}: round {round_no + 1} done (load average {load[-1]:.2f})")
    for round_no in range(pss_runs):
        for side in sides:
            side.memory_runs.append(run_child(side.cmd, env=side.env, cwd=side.cwd))
        log(f"  {ws.name}: memory round {round_no + 1} done")
    mine = [s for s in sides if s is not before]
    checks = {"vc": identical_outputs(mine[0], mine[1]), "ac": identical_outputs(mine[2], mine[3])}
    if against is not None:   # before/after: vc timed above, ac one run by the other tree's pshell
        checks[f"vc vs {against}"] = identical_outputs(mine[0], before)
        command = mine[2].cmd[mine[2].cmd.index("-c") + 1]
        other = pshell_side(f"ac of {against}", ws.path, command, work / "against", 0, False, against)
        other.runs.append(run_child(other.cmd, env=other.env, cwd=other.cwd))
        checks[f"ac vs {against}"] = identical_outputs(mine[2], other)
    resident = resident_fraction(files)     # after the runs: did the workspace stay in the page cache?
    return {"workspace": ws.name, "npu_bytes": npu_bytes, "data_bytes": all_bytes,
            "sides": [s.as_json() for s in sides + ([vendor] if vendor else [])],
            "vendor": "ran" if vendor else ("skipped" if not vendor_runs else f"not found at {VENDOR}"),
            "c_vs_numpy": checks, "load_average": load, "page_cache_resident_after": resident}


def _gb_s(side: dict) -> float:
    wall = side["wall_s"]["median"]
    return side["bytes"] / 1e9 / wall if wall and wall == wall else float("nan")


def _percent(fraction: float | None) -> str:
    return "unknown" if fraction is None else f"{100 * fraction:.0f}%"


def table(records: list[dict]) -> str:
    """The markdown table of the issue: one line per side per workspace, then the ratios."""
    lines = ["| workspace | side | wall (median) | GB/s | tree CPU s | cores busy | peak PSS MB | runs |",
             "|---|---|---|---|---|---|---|---|"]
    notes = []
    for rec in records:
        by_label = {s["label"]: s for s in rec["sides"]}
        for s in rec["sides"]:
            wall, cpu = s["wall_s"]["median"], s["tree_cpu_s"]["median"]
            failed = f" ({len(s['failed'])} failed)" if s["failed"] else ""
            lines.append(f"| {rec['workspace']} ({rec['data_bytes'] / 1e9:.2f} GB) | {s['label']} | {wall:.2f} s "
                         f"| {_gb_s(s):.2f} | {cpu:.2f} | {cpu / wall if wall else float('nan'):.2f} "
                         f"| {s['peak_pss_mb']['median']:.0f} | {len(s['runs'])}{failed} |")
        c = next((s for label, s in by_label.items() if label.startswith("pshell vc") and label.endswith("(C)")),
                 None)
        before = next((s for label, s in by_label.items() if label.startswith("pshell vc") and " of " in label), None)
        n = next((s for label, s in by_label.items() if label.startswith("pshell vc") and "numpy" in label
                  and " of " not in label), None)
        v = by_label.get("vendor msaccucmp")
        ratios = []
        if c and before:
            ratios.append(f"before / after: wall {before['wall_s']['median'] / c['wall_s']['median']:.2f}x, "
                          f"CPU {before['tree_cpu_s']['median']:.2f} -> {c['tree_cpu_s']['median']:.2f} s")
        if c and n:
            ratios.append(f"numpy / C {n['wall_s']['median'] / c['wall_s']['median']:.2f}x")
        if c and v:
            ratios.append(f"vendor / pshell C {v['wall_s']['median'] / c['wall_s']['median']:.1f}x")
        if n and v:
            ratios.append(f"vendor / pshell numpy {v['wall_s']['median'] / n['wall_s']['median']:.1f}x")
        same = ", ".join(f"{k} {'identical' if not why else 'DIFFER: ' + why}" for k, why in rec["c_vs_numpy"].items())
        notes.append(f"- {rec['workspace']}: {'; '.join(ratios) or 'no ratio'}; C vs numpy outputs: {same}; "
                     f"vendor {rec['vendor']}; load average during the runs "
                     f"{min(rec['load_average']):.2f}-{max(rec['load_average']):.2f}; workspace in the page "
                     f"cache after the runs: {_percent(rec['page_cache_resident_after'])}")
    return "\n".join(lines + [""] + notes)


def parse_args(argv: list[str] | None = None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="400,2000",
                   help="MB of NPU dumps per workspace (default 400,2000: ~1 and ~5 GB of dump + golden bytes)")
    p.add_argument("--workdir", default="/work/bench_ws", help="where the workspaces are (re)used or made")
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "out" / "compare"),
                   help="pshell's and the vendor's outputs, results.json/.md")
    p.add_argument("--runs", type=int, default=3, help="runs of each pshell side (medians)")
    p.add_argument("--vendor-runs", default="3,1",
                   help="runs of the vendor engine per size, comma-separated, last one repeated; 0 = skip "
                        "(it takes ~50 s per GB)")
    p.add_argument("--pss-runs", type=int, default=2,
                   help="rounds of each pshell side that sample the peak PSS (the timed --runs do not: "
                        "the sampler's reads slow a short run)")
    p.add_argument("--jobs", type=int, default=2, help="vc -j")
    p.add_argument("--small-tensors", action="store_true",
                   help="many small ops instead (issue 31): the generator's --small-tensors at each size "
                        "(--sizes 740: ~1,000 ops, ~4,000 tensors of 0.35-0.56 MB, 1.85 GB with goldens)")
    p.add_argument("--against", type=Path, default=None,
                   help="a pshell source tree (e.g. /work/main): its vc (C) is timed in the same rounds "
                        "(before/after a change), its vc and ac output must be byte-identical to this one's")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    sizes = [float(s) for s in opts.sizes.split(",") if s.strip()]
    vendor_runs = [int(v) for v in opts.vendor_runs.split(",")]
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    records = []
    for i, size in enumerate(sizes):
        ws = ensure_workspace(Path(opts.workdir), scale_mb=size, small_tensors=opts.small_tensors)
        print(f"{ws.name}: {ws.totals['npu_dump_files']} dumps ({ws.totals['npu_dump_bytes'] / 1e9:.2f} GB) + "
              f"{ws.totals['golden_files']} golden ({ws.totals['golden_bytes'] / 1e9:.2f} GB)", flush=True)
        records.append(measure_workspace(ws, opts.runs, vendor_runs[min(i, len(vendor_runs) - 1)], opts.jobs,
                                         out, log=lambda text: print(text, flush=True), against=opts.against,
                                         pss_runs=opts.pss_runs))
        (out / "results.json").write_text(json.dumps(records, indent=1))
    text = (f"{os.cpu_count()} CPUs; medians; elapsed {time.perf_counter() - started:.0f} s\n\n"
            + table(records) + "\n")
    (out / "results.md").write_text(text)
    print(text)
    return 0 if all(not why for rec in records for why in rec["c_vs_numpy"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
