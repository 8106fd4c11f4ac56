"""The benchmark harness: pshell next to a naive baseline (and the vendor engine if installed).

    python bench/run.py [--sizes 1000,5000] [--files 50000] [--runs 3] [--jobs 2] [--out DIR]
                        [--keep] [--quick]
    python bench/run.py --compare [--sizes 400,2000] [--runs 3] [--vendor-runs 3,1] [--workdir DIR]

``--compare``: only issue 16's table (``compare_throughput.py``): ``vc`` and ``ac`` with the C
kernel and the numpy path and the vendor engine, side by side on the same files.

For each generated workspace (``--sizes`` MB of NPU dumps each, plus one of ``--files`` small dump
files) every measurement is a whole process, repeated ``--runs`` times, pshell and baseline
interleaved so that load changes on a shared machine hit both: cold and warm start-up to a usable
session (``info``), ``ac``, ``vc -j N``, ``vcs``, ``ni OP``, ``pt OP:output:0[0, :4]``; then
completion latency over 100k names. Medians, every run, and the peak RSS of each child go to
``OUT/results.json``; a markdown table is printed and written to ``OUT/results.md``. See
bench/README.md for what each number means.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from baseline import vendor_compare_cmd, vendor_engine  # noqa: E402
from common import (  # noqa: E402
    ROOT, BenchWorkspace, ChildRun, Series, code_version, drop_pshell_cache, ensure_workspace, evict_page_cache,
    last_json, machine_info, pshell_cmd, remove_workspace, resident_fraction, run_child,
    warm_page_cache, workspace_files,
)

BENCH = ROOT / "bench"
BASELINE = [sys.executable, str(BENCH / "baseline.py")]
# workspaces larger than this (MB of NPU dumps) are deleted after their measurements unless --keep
KEEP_BELOW_MB = 2000
VENDOR_MB_S = 886 * 1.048576 / 35      # formats.md A.9: 886 MiB in ~35 s, one worker


@dataclass
class Side:
    """One program's repeated runs of one measurement."""

    runs: list[ChildRun] = field(default_factory=list)
    note: str = ""

    @property
    def wall(self) -> Series:
        return Series([r.wall for r in self.runs if r.ok])

    @property
    def rss(self) -> Series:
        return Series([r.rss_mb for r in self.runs if r.ok])

    @property
    def failed(self) -> str | None:
        bad = [r for r in self.runs if not r.ok]
        if not bad:
            return None
        lines = (bad[0].stderr or bad[0].stdout).strip().splitlines()
        return f"exit {bad[0].returncode}: {lines[-1] if lines else '(no output)'}"

    @property
    def output(self):
        good = [r for r in self.runs if r.ok]
        return last_json(good[-1].stdout) if good else None

    def as_json(self) -> dict:
        return {"wall_s": self.wall.as_json(), "peak_rss_mb": self.rss.as_json(1),
                "tree_cpu_s": Series([r.tree_cpu for r in self.runs if r.ok]).as_json(3),
                "peak_tree_pss_mb": Series([r.pss_mb for r in self.runs if r.ok]).as_json(1),
                "runs": [r.brief() for r in self.runs], "failed": self.failed, "note": self.note}


@dataclass
class Measurement:
    workspace: str
    name: str
    command: str
    pshell: Side
    baseline: Side | None
    data_bytes: int | None = None      # bytes the command has to read: MB/s = this / wall
    extra: dict = field(default_factory=dict)

    @property
    def ratio(self) -> float | None:
        if self.baseline is None or not self.pshell.wall.values or not self.baseline.wall.values:
            return None
        return self.baseline.wall.median / self.pshell.wall.median

    def mb_per_s(self, side: Side | None) -> float | None:
        if side is None or not self.data_bytes or not side.wall.values:
            return None
        return self.data_bytes / 1e6 / side.wall.median

    def as_json(self) -> dict:
        out = {"workspace": self.workspace, "name": self.name, "command": self.command,
               "pshell": self.pshell.as_json(), "baseline": self.baseline.as_json() if self.baseline else None,
               "ratio_baseline_over_pshell": _round(self.ratio, 3), "data_bytes": self.data_bytes,
               "pshell_mb_per_s": _round(self.mb_per_s(self.pshell), 1),
               "baseline_mb_per_s": _round(self.mb_per_s(self.baseline), 1)}
        return {**out, **self.extra}


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def log(text: str) -> None:
    print(text, flush=True)


# ------------------------------------------------------------------------------------------------
# one workspace

def probe_tensor(manifest: dict) -> str:
    """A tower block in the middle of the run (NC1HWC0 output: ``pt`` must restore the layout)."""
    ops = manifest["ops"]
    tower = [op for op in ops if "tower_block" in op] or [op for op in ops if op.get("dump_file")]
    return tower[len(tower) // 2]["name"]


def _alternate(runs: int, pshell: list[str], baseline: list[str] | None, before=None) -> tuple[Side, Side | None]:
    """``runs`` rounds of (pshell, baseline), ``before()`` ahead of each child."""
    p, b = Side(), Side() if baseline else None
    for _ in range(runs):
        for side, cmd in ((p, pshell), (b, baseline)):
            if side is None:
                continue
            if before:
                before()
            side.runs.append(run_child(cmd, wait_detached=side is p))
    return p, b


def _agree(name: str, ours, theirs) -> dict:
    """What both sides reported that must be equal (proof that they did the same work)."""
    if not isinstance(theirs, dict) or ours is None:
        return {}
    if name.startswith("start-up"):
        pair = (ours.get("ops"), theirs.get("ops"))
    elif name == "ac":
        pair = (len({row["op"] for row in ours}), theirs.get("non_finite_ops"))
    elif name.startswith("vc"):
        pair = (ours.get("compared"), theirs.get("compared"))
    elif name == "pt":
        pair = ((ours.get("stats") or {}).get("max"), theirs.get("max"))
    else:
        return {}
    return {"check": {"pshell": pair[0], "baseline": pair[1], "agree": pair[0] == pair[1]}}


def measure_workspace(ws: BenchWorkspace, opts, vendor) -> list[Measurement]:
    files = workspace_files(ws.path)
    runs, name = opts.runs, ws.name
    out: list[Measurement] = []

    def add(m: Measurement) -> None:
        out.append(m)
        log("  " + table_row(m, with_workspace=False))

    # start-up: cold = no pshell cache and the workspace's pages evicted; warm = right after
    cold_p, warm_p, cold_b, warm_b = Side(), Side(), Side(), Side()
    resident = []
    for _ in range(runs):
        drop_pshell_cache(ws.path)
        evict_page_cache(files)
        resident.append(resident_fraction(files))
        cold_p.runs.append(run_child(pshell_cmd(ws.path, "info"), wait_detached=True))
        warm_p.runs.append(run_child(pshell_cmd(ws.path, "info"), wait_detached=True))
        evict_page_cache(files)
        cold_b.runs.append(run_child(BASELINE + ["startup", str(ws.path)]))
        warm_b.runs.append(run_child(BASELINE + ["startup", str(ws.path)]))
    cache_note = {"page_cache_resident_before_cold_run": [None if r is None else round(r, 4) for r in resident]}
    add(Measurement(name, "start-up cold", "info", cold_p, cold_b, extra={**cache_note, **_agree(
        "start-up", cold_p.output, cold_b.output)}))
    add(Measurement(name, "start-up warm", "info", warm_p, warm_b, extra=_agree("start-up", warm_p.output,
                                                                             warm_b.output)))

    warm_page_cache(files)          # product.md §8: throughput is specified with a warm page cache
    npu_bytes, all_bytes = ws.totals["npu_dump_bytes"], ws.data_bytes
    op = probe_tensor(ws.manifest)
    tensor = f"{op}:output:0[0, :4]"
    for label, command, base, nbytes in (("ac", "ac -l 0", ["ac"], npu_bytes),
                                         (f"vc -j {opts.jobs}", f"vc -j {opts.jobs}", ["compare"], all_bytes),
                                         ("ni", f"ni {op}", ["ni", op], None),
                                         ("pt", f"pt {tensor}", ["pt", tensor], None)):
        p, b = _alternate(runs, pshell_cmd(ws.path, command), BASELINE + [base[0], str(ws.path), *base[1:]])
        extra = _agree(label, p.output, b.output)
        if label.startswith("vc") and isinstance(p.output, dict):
            extra["pshell_compare_only"] = {k: p.output.get(k) for k in ("seconds", "mb_per_s", "workers",
                                                                         "compared", "failing_ops")}
        add(Measurement(name, label, command, p, b, nbytes, extra))
        if label.startswith("vc"):
            compare_baseline = b
            # vcs in a fresh process compares first (no result kept between processes), then
            # summarises: its baseline is the same naive compare (the summary is a sort).
            p_vcs, _ = _alternate(runs, pshell_cmd(ws.path, "vcs"), None)
            vcs_base = Side(compare_baseline.runs, note="the naive compare's runs (vcs = compare + a sort)")
            add(Measurement(name, "vcs", "vcs", p_vcs, vcs_base, all_bytes))

    if vendor[0] is not None and "files" not in name:
        out.append(measure_vendor(ws, opts, vendor[0], next(m for m in out if m.name.startswith("vc -j"))))
    return out


def measure_vendor(ws: BenchWorkspace, opts, script: Path, vc: Measurement) -> Measurement:
    """msaccucmp compare on the same dump and golden folders, as the baseline of pshell's vc runs."""
    v = Side(note="msaccucmp compare -f, its own worker count (half the cores)")
    try:
        folder = Path(opts.out) / "vendor" / ws.name
        cmd = vendor_compare_cmd(script, ws.path, ws.manifest, folder)
        for _ in range(opts.runs):
            started = time.time()
            run = run_child(cmd)
            # msaccucmp exits 2 when graph ops have no dump (Data/Const, formats.md A.8.5) even
            # though it compared everything else: a fresh result CSV is what counts
            if run.returncode == 2 and any(f.stat().st_mtime >= started for f in folder.rglob("result_*.csv")):
                run.returncode = 0
            v.runs.append(run)
    except Exception as exc:          # a broken optional engine must not end the benchmark
        v.note = f"could not run: {exc}"
    m = Measurement(ws.name, "vc vs vendor msaccucmp", vc.command, vc.pshell, v, vc.data_bytes)
    log("  " + (table_row(m, with_workspace=False) if v.wall.values and not v.failed else
                f"vendor engine: failed ({v.failed or v.note}) (skipped)"))
    return m


def measure_completion(opts) -> Measurement:
    cmd = [sys.executable, str(BENCH / "completer_latency.py"), "--json", "--naive", "--ops", str(opts.names)]
    run = run_child(cmd)
    result = last_json(run.stdout) if run.ok else None
    p, b = Side([run], note="per keystroke"), Side([run], note="per keystroke, same child")
    m = Measurement(f"{opts.names // 1000}k names", "completion", "completer_latency.py", p, b)
    if isinstance(result, dict):
        m.extra = {"completion": result}
    return m


# ------------------------------------------------------------------------------------------------
# output

def _fmt_s(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value * 1000:.1f} ms" if value < 1 else f"{value:.2f} s"


def _completion_cells(m: Measurement) -> tuple[str, str, str] | None:
    c = m.extra.get("completion")
    if not c or "baseline" not in c:
        return None
    ours, theirs = c["pshell"]["all"], c["baseline"]["all"]
    return (f"{ours['median_ms']:.2f} ms (p95 {ours['p95_ms']:.1f}, max {ours['max_ms']:.1f})",
            f"{theirs['median_ms']:.1f} ms (p95 {theirs['p95_ms']:.0f})",
            f"{theirs['median_ms'] / ours['median_ms']:.0f}x" if ours["median_ms"] else "—")


def table_row(m: Measurement, with_workspace: bool = True) -> str:
    cells = [m.workspace] if with_workspace else []
    comp = _completion_cells(m) if m.name == "completion" else None
    if comp:
        pshell, base, ratio = comp
    else:
        pshell = m.pshell.failed and f"FAILED ({m.pshell.failed})" or _fmt_s(m.pshell.wall.median)
        base = "—" if m.baseline is None else (m.baseline.failed and "FAILED" or _fmt_s(m.baseline.wall.median))
        ratio = f"{m.ratio:.1f}x" if m.ratio is not None else "—"
    rss_p = f"{m.pshell.rss.median:.0f} MB" if m.pshell.rss.values else "—"
    rss_b = f"{m.baseline.rss.median:.0f} MB" if m.baseline and m.baseline.rss.values else "—"
    speeds = [m.mb_per_s(s) for s in (m.pshell, m.baseline)]
    speed = " / ".join("—" if v is None else f"{v:.0f}" for v in speeds) if m.data_bytes else ""
    check = m.extra.get("check")
    note = "" if not check or check["agree"] else f" ⚠ differ: {check['pshell']} vs {check['baseline']}"
    cells += [m.name, pshell, base, ratio, rss_p, rss_b, speed, str(len(m.pshell.runs)) + note]
    return "| " + " | ".join(cells) + " |"


HEADER = ("| workspace | measurement | pshell (median) | baseline (median) | baseline / pshell "
          "| pshell peak RSS | baseline peak RSS | MB/s pshell / baseline | runs |\n"
          "|---|---|---|---|---|---|---|---|---|")


def targets(measurements: list[Measurement]) -> list[str]:
    """product.md §8 / issue 7 targets, each with the figure that decides it."""
    lines = []

    def verdict(ok: bool) -> str:
        return "met" if ok else "NOT met"

    for m in measurements:
        if not m.pshell.wall.values:
            continue
        base = f"; baseline {_fmt_s(m.baseline.wall.median)}" if m.baseline and m.baseline.wall.values else ""
        if m.name.startswith("vc -j") and "scale" in m.workspace:
            speed = m.mb_per_s(m.pshell)
            lines.append(f"- `{m.command}` on {m.workspace}: {speed:.0f} MB/s whole process (target >= 1000: "
                         f"{verdict(speed >= 1000)}); {m.ratio or float('nan'):.1f}x the naive baseline; "
                         f"{speed / VENDOR_MB_S:.0f}x the vendor's ~{VENDOR_MB_S:.0f} MB/s (formats.md A.9, "
                         f"not rerun); peak RSS {m.pshell.rss.median:.0f} MB")
        elif m.name.startswith("start-up") and "files" in m.workspace:
            limit = 3.0 if "cold" in m.name else 1.0
            lines.append(f"- {m.name} on {m.workspace}: {_fmt_s(m.pshell.wall.median)} (target < {limit:g} s: "
                         f"{verdict(m.pshell.wall.median < limit)}){base}")
        elif m.name == "completion" and m.extra.get("completion"):
            worst = m.extra["completion"]["pshell"]["all"]["max_ms"]
            lines.append(f"- completion over {m.extra['completion']['names']:,} names: worst keystroke "
                         f"{worst:.1f} ms (target < 50 ms: {verdict(worst < 50)})")
    rss = [(m.workspace, m.pshell.rss.median) for m in measurements
           if m.name.startswith("vc -j") and "scale" in m.workspace and m.pshell.rss.values]
    if len(rss) > 1:
        lines.append("- vc peak RSS by workspace size (target: about equal): "
                     + ", ".join(f"{n} {v:.0f} MB" for n, v in rss))
    return lines


def notes(measurements: list[Measurement]) -> list[str]:
    lines = ["- every figure is a whole process (interpreter start included), median of the runs; "
             "ratio = baseline median / pshell median; MB/s = bytes on disk the command must read "
             "(ac: NPU dumps; vc/vcs: NPU dumps + golden .npy) / wall",
             "- baseline = bench/baseline.py: single process, np.fromfile + protobuf header + np.load + "
             "one numpy expression per metric; its compare takes the NPU->golden pairs from pshell's "
             "mapping, so both sides compare the same pairs (checked: counts agree unless marked ⚠)",
             "- vcs baseline = the naive compare's runs (in a fresh process vcs compares first; the "
             "summary itself is a sort)"]
    for m in measurements:
        only = m.extra.get("pshell_compare_only")
        if only and only.get("seconds"):
            lines.append(f"- {m.workspace} `{m.command}`: the compare phase alone (last run, pshell's own "
                         f"timer) {only['seconds']:.2f} s, {only['mb_per_s']:.0f} MB/s of tensor bytes read, "
                         f"{only['workers']} worker(s), {only['compared']} tensors compared")
        comp = m.extra.get("completion")
        if comp:
            lines.append(f"- completion: {comp['names']:,} synthetic names, index built once in "
                         f"{comp['index_build_ms']:.0f} ms; baseline = a fresh subsequence regex and a linear "
                         f"scan per keystroke (bench/completer_latency.py --naive)")
    return lines


def _code_line(code: dict) -> str:
    def one(v: dict) -> str:
        dirty = f" + {len(v['uncommitted'])} uncommitted file(s) in precision_shell/" if v["uncommitted"] else ""
        return f"{v['commit']}{dirty}"
    start, end = code["start"], code.get("end")
    text = f"pshell measured at commit {one(start)}"
    if end and end != start:
        text += f" -> {one(end)} at the end (the tree changed during the run)"
    return text + "."


def write_results(out: Path, payload: dict, measurements: list[Measurement],
                  workspaces: list[BenchWorkspace]) -> str:
    payload["measurements"] = [m.as_json() for m in measurements]
    (out / "results.json").write_text(json.dumps(payload, indent=1))
    mi = payload["machine"]
    lines = ["# pshell benchmark", "",
             f"{mi['cpu_count']} CPUs ({mi.get('cpu_model', '?')}), {mi.get('memtotal_gb', '?')} GB, "
             f"Python {mi['python']}, numpy {mi['numpy']}, protobuf {mi.get('protobuf', '?')}; load average "
             f"at start {mi['load_average']} (shared machine: medians of {payload['options']['runs']} runs).",
             "", _code_line(payload["code"]), ""]
    for ws in workspaces:
        t = ws.totals
        lines.append(f"- {ws.name}: {t['npu_dump_files']} NPU dumps ({t['npu_dump_bytes'] / 1e6:.0f} MB) + "
                     f"{t['golden_files']} golden .npy ({t['golden_bytes'] / 1e6:.0f} MB)")
    lines += ["", HEADER, *(table_row(m) for m in measurements), "", "Targets:", *targets(measurements),
              "", "Notes:", *notes(measurements),
              f"- vendor engine: {payload['vendor']}.", f"- page cache: {payload['page_cache']}"]
    text = "\n".join(lines) + "\n"
    (out / "results.md").write_text(text)
    return text


# ------------------------------------------------------------------------------------------------

def parse_args(argv: list[str] | None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default=None, help="MB of NPU dumps per workspace, comma-separated "
                                                 "('' for none; default 1000,5000, with --compare 400,2000)")
    p.add_argument("--files", type=int, default=50000, help="dump files of the many-files workspace (0: none)")
    p.add_argument("--runs", type=int, default=3, help="runs per measurement (medians reported)")
    p.add_argument("--jobs", type=int, default=2, help="workers for vc (default 2)")
    p.add_argument("--names", type=int, default=100_000, help="op names for the completion benchmark")
    p.add_argument("--out", default=str(BENCH / "out"), help="workspaces and results (default bench/out)")
    p.add_argument("--keep", action="store_true", help=f"keep workspaces over {KEEP_BELOW_MB} MB afterwards")
    p.add_argument("--quick", action="store_true", help="tiny sizes, one run: checks the harness works")
    p.add_argument("--compare", action="store_true",
                   help="only the compare table (C kernel, numpy path, vendor engine): compare_throughput.py")
    p.add_argument("--vendor-runs", default="3,1", help="with --compare: vendor runs per size (last repeated)")
    p.add_argument("--workdir", default="/work/bench_ws", help="with --compare: where the workspaces are")
    p.add_argument("--against", default=None, help="with --compare: a pshell source tree whose output must be "
                                                   "byte-identical (before/after)")
    opts = p.parse_args(argv)
    if opts.sizes is None:
        opts.sizes = "400,2000" if opts.compare else "1000,5000"
    if opts.quick:
        opts.sizes, opts.files, opts.runs, opts.names = "50", 2000, 1, 10_000
    opts.size_list = [float(s) for s in opts.sizes.split(",") if s.strip()]
    return opts


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    if opts.compare:
        import compare_throughput

        return compare_throughput.main(["--sizes", opts.sizes, "--runs", str(opts.runs), "--jobs", str(opts.jobs),
                                        "--vendor-runs", opts.vendor_runs, "--workdir", opts.workdir,
                                        "--out", str(Path(opts.out) / "compare")]
                                       + (["--against", opts.against] if opts.against else []))
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    script, why = vendor_engine()
    vendor_status = f"found {script}" if script else f"{why} (skipped)"
    log(f"vendor engine: {vendor_status}")
    payload = {"machine": machine_info(), "code": {"start": code_version()}, "vendor": vendor_status,
               "options": {k: v for k, v in vars(opts).items() if k != "size_list"},
               "page_cache": "cold runs follow fsync + posix_fadvise(DONTNEED) on every workspace file "
                             "(no root needed; /proc/sys/vm/drop_caches not used: root-only and it would slow "
                             "the whole shared machine); mincore-measured resident fraction in results.json. "
                             "Other runs follow a full read of the workspace (warm).",
               "workspaces": []}
    measurements: list[Measurement] = []
    workspaces: list[BenchWorkspace] = []
    specs = [{"scale_mb": s} for s in opts.size_list] + ([{"files": opts.files}] if opts.files else [])
    for spec in specs:
        ws = ensure_workspace(out, log=log, **spec)
        workspaces.append(ws)
        payload["workspaces"].append({"name": ws.name, "path": str(ws.path), "generated": ws.generated,
                                      "generate_s": _round(ws.generate_seconds, 2), **ws.totals})
        log(f"{ws.name}: {ws.totals['npu_dump_files']} NPU dumps ({ws.totals['npu_dump_bytes'] / 1e6:.0f} MB), "
            f"{ws.totals['golden_files']} golden ({ws.totals['golden_bytes'] / 1e6:.0f} MB)"
            + (f", generated in {ws.generate_seconds:.0f} s" if ws.generated else ", reused"))
        measurements += measure_workspace(ws, opts, (script, why))
        write_results(out, payload, measurements, workspaces)     # partial results survive a crash
        if not opts.keep and spec.get("scale_mb", 0) > KEEP_BELOW_MB:
            remove_workspace(ws)
            log(f"  deleted {ws.path} (use --keep to keep it)")
    if opts.names:
        log(f"completion over {opts.names:,} names ...")
        measurements.append(measure_completion(opts))
    payload["elapsed_s"] = round(time.perf_counter() - started, 1)
    payload["machine"]["load_average_end"] = machine_info()["load_average"]
    payload["code"]["end"] = code_version()
    print(write_results(out, payload, measurements, workspaces))
    log(f"written {out / 'results.md'} and {out / 'results.json'} in {payload['elapsed_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
