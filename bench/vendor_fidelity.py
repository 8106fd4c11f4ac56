"""Cell-by-cell check of ``vc`` against the vendor engine (``msaccucmp compare -f``).

    python bench/vendor_fidelity.py WS [WS ...] [--vendor PATH] [--out DIR] [--show N]
    python bench/vendor_fidelity.py --generate bf16-amp --out /tmp/fid    # generate, then check

For each workspace (a folder holding ``precision_data/`` and the generator's manifest): writes
the GE graph as the JSON fusion rule ``-f`` reads (``baseline.write_vendor_rule``, what
``atc --mode=5`` writes), runs the vendor engine on the manifest's NPU dump leaf and golden
folder, runs ``python -m precision_shell WS -c vc -o OUT`` (pshell writes only under ``OUT``),
and compares every cell of the two result CSVs: rows matched by ``TensorIndex`` (``NPUDump`` for
rows without a tensor), numbers equal to ``--tol`` (NaN equals NaN), text cells equal. Prints a
summary per workspace and per column, and the first ``--show`` differing cells. Exit 0 when no
cell differs outside the columns listed in ``KNOWN_DIFFERENT``, 1 otherwise.

The vendor engine is set up once with ``bash ../shared/tools/vendor-engine/setup.sh``. It exits
2 when the graph has ops without dumps (Data/Const) even though it compared everything; its CSV
is what counts.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from baseline import write_vendor_rule  # noqa: E402
from common import ROOT, bench_env  # noqa: E402

DEFAULT_VENDOR = Path.home() / ".cache" / "pshell-vendor-engine" / "msaccucmp"
TOLERANCE = 1e-6
# Columns whose text differs by design: the vendor's NPU Address is the device address from the
# dump header (pshell's CSV has the column, without an address to put in it), its Index the
# fusion-op id of the rule (pshell's: the op's execution position).
KNOWN_DIFFERENT = ("Address", "Index")
# Rows the vendor prints and pshell leaves out on purpose: graph ops without a dump (Data, Const,
# NetOutput) get an all-NaN row "There is no dump file for my output operator" (formats.md A.8.5).
NO_DUMP_TYPES = frozenset({"Data", "Const", "NetOutput", "Variable"})


@dataclass
class Table:
    header: list[str]
    rows: dict[str, dict[str, str]]     # row key -> column -> cell

    @classmethod
    def read(cls, path: Path) -> "Table":
        with path.open(newline="", encoding="utf-8-sig") as f:
            lines = list(csv.reader(f))
        header = _side_names(lines[0])
        rows: dict[str, dict[str, str]] = {}
        for cells in lines[1:]:
            if not any(c.strip() for c in cells):
                continue
            row = dict(zip(header, (c.strip() for c in cells)))
            key = row["TensorIndex"] if row.get("TensorIndex", "NaN") != "NaN" else f"{row['NPUDump']} (no tensor)"
            rows[key] = row
        return cls(header, rows)


def _side_names(header: list[str]) -> list[str]:
    """The two DataType/Address columns named by side, as ``formats.compare_csv`` does."""
    names, side = [], ""
    for name in (h.strip() for h in header):
        if name in ("NPUDump", "GroundTruth"):
            side = name
        names.append(f"{side}.{name}" if name in ("DataType", "Address") and side else name)
    return names


def _number(cell: str) -> float | None:
    try:
        return float(cell)
    except ValueError:
        return None


def cells_equal(a: str, b: str, tol: float = TOLERANCE) -> bool:
    """Numbers within ``tol`` (NaN == NaN, inf == inf); anything else as text. A
    StandardDeviation cell ``(m;s),(m;s)`` is compared number by number."""
    if a == b:
        return True
    x, y = _number(a), _number(b)
    if x is not None and y is not None:
        if math.isnan(x) or math.isnan(y):
            return math.isnan(x) and math.isnan(y)
        return x == y or abs(x - y) <= tol
    if a.startswith("(") and b.startswith("("):
        split = lambda s: s.replace("(", "").replace(")", "").replace(";", ",").split(",")  # noqa: E731
        pa, pb = split(a), split(b)
        return len(pa) == len(pb) and all(cells_equal(p, q, tol) for p, q in zip(pa, pb))
    return False


@dataclass
class Diff:
    compared_rows: int = 0
    compared_cells: int = 0
    only_vendor: list[str] = field(default_factory=list)
    only_pshell: list[str] = field(default_factory=list)
    cells: list[tuple[str, str, str, str]] = field(default_factory=list)   # key, column, vendor, pshell

    def by_column(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for _, column, _, _ in self.cells:
            counts[column] = counts.get(column, 0) + 1
        return counts

    def unexpected(self) -> list[tuple[str, str, str, str]]:
        return [c for c in self.cells if c[1].rsplit(".", 1)[-1] not in KNOWN_DIFFERENT]


def diff_tables(vendor: Table, pshell: Table, tol: float = TOLERANCE) -> Diff:
    """Every cell of the rows both CSVs have, in the columns both have."""
    d = Diff()
    columns = [c for c in vendor.header if c in pshell.header]
    for key, vrow in vendor.rows.items():
        prow = pshell.rows.get(key)
        if prow is None:
            d.only_vendor.append(key)
            continue
        d.compared_rows += 1
        for column in columns:
            d.compared_cells += 1
            if not cells_equal(vrow[column], prow[column], tol):
                d.cells.append((key, column, vrow[column], prow[column]))
    d.only_pshell = [key for key in pshell.rows if key not in vendor.rows]
    return d


def expected_only_vendor(vendor: Table, keys: list[str]) -> list[str]:
    """Of the vendor-only rows, those pshell should have had (not a graph-only op)."""
    return [k for k in keys if vendor.rows[k].get("OpType") not in NO_DUMP_TYPES]


def run_vendor(vendor: Path, ws: Path, manifest: dict, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    rule = write_vendor_rule(ws / manifest["paths"]["graph_file"], out / "fusion_rule.json")
    cmd = [str(vendor), "compare", "-m", str(ws / manifest["paths"]["npu_dump_dir"]),
           "-g", str(ws / manifest["paths"]["golden_dir"]), "-f", str(rule), "-out", str(out)]
    run = subprocess.run(cmd, capture_output=True, text=True)
    found = sorted(out.glob("result_*.csv"), key=lambda p: p.stat().st_mtime)
    if run.returncode not in (0, 2) or not found:
        tail = "\n".join((run.stdout + run.stderr).splitlines()[-15:])
        raise RuntimeError(f"vendor compare failed (rc {run.returncode}):\n{tail}")
    return found[-1]


def run_pshell(ws: Path, out: Path) -> Path:
    cmd = [sys.executable, "-m", "precision_shell", str(ws), "-c", "vc", "--format", "json", "-o", str(out)]
    run = subprocess.run(cmd, capture_output=True, text=True, env=bench_env(), cwd=ROOT)
    for line in reversed(run.stdout.splitlines()):
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and doc.get("csv"):
            return Path(doc["csv"])
    raise RuntimeError(f"pshell vc wrote no CSV (rc {run.returncode}): {run.stderr.strip()[-500:]}")


def check(ws: Path, vendor: Path, out: Path, tol: float, show: int) -> bool:
    manifest = json.loads((ws / "pshell_sample_manifest.json").read_text())
    vendor_csv = run_vendor(vendor, ws, manifest, out / "vendor")
    pshell_csv = run_pshell(ws, out / "pshell")
    v, p = Table.read(vendor_csv), Table.read(pshell_csv)
    d = diff_tables(v, p, tol)
    missing = expected_only_vendor(v, d.only_vendor)
    bad = d.unexpected()
    print(f"== {ws}\n   vendor {vendor_csv}\n   pshell {pshell_csv}")
    print(f"   rows: {d.compared_rows} in both, {len(d.only_vendor)} vendor only "
          f"({len(d.only_vendor) - len(missing)} graph-only ops), {len(d.only_pshell)} pshell only")
    print(f"   cells: {d.compared_cells} compared, {len(d.cells)} differ "
          f"({len(d.cells) - len(bad)} in {'/'.join(KNOWN_DIFFERENT)}, {len(bad)} elsewhere)")
    for column, n in sorted(d.by_column().items()):
        print(f"     {column}: {n}")
    for key in missing + d.only_pshell:
        print(f"   row only in {'vendor' if key in v.rows else 'pshell'}: {key}")
    for key, column, a, b in bad[:show]:
        print(f"   {key} {column}: vendor {a!r} pshell {b!r}")
    return not bad and not missing and not d.only_pshell


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("workspaces", nargs="*", type=Path)
    ap.add_argument("--generate", action="append", default=[], metavar="VARIANT",
                    help="generate a sample workspace of this variant under --out and check it "
                         "(default, bf16-amp)")
    ap.add_argument("--vendor", type=Path, default=DEFAULT_VENDOR)
    ap.add_argument("--out", type=Path, default=Path("/tmp/pshell_vendor_fidelity"))
    ap.add_argument("--tol", type=float, default=TOLERANCE)
    ap.add_argument("--show", type=int, default=40, help="differing cells printed per workspace")
    args = ap.parse_args(argv)
    if not args.vendor.exists():
        print(f"vendor engine not found at {args.vendor}: bash ../shared/tools/vendor-engine/setup.sh",
              file=sys.stderr)
        return 2
    workspaces = list(args.workspaces)
    for variant in args.generate:
        ws = args.out / f"ws_{variant}"
        gen = [sys.executable, "-m", "precision_shell.samples", str(ws), "--force"]
        if variant != "default":
            gen += ["--variant", variant]
        subprocess.run(gen, check=True, env=bench_env(), cwd=ROOT, stdout=subprocess.DEVNULL)
        workspaces.append(ws)
    if not workspaces:
        ap.error("give a workspace or --generate VARIANT")
    ok = True
    for i, ws in enumerate(workspaces):
        ok &= check(ws.resolve(), args.vendor, args.out / f"run{i}_{ws.name}", args.tol, args.show)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
