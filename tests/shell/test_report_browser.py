"""The report in a real browser: headless Chromium renders it, the DOM after the script ran holds
the chart with the designed root marked first, the tables and a graph per root, a screenshot is
taken, and any console message (a JS error included) fails the test.

Skipped only when no Chromium binary is found (``.ci/run`` installs Debian's ``chromium``).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
from html.parser import HTMLParser

import pytest

from tests.conftest import json_docs, run_cli

BROWSER = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome")
                if shutil.which(b)), None)
pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("jinja2") is None,
                       reason="the report extra is not installed: pip install -e '.[report]'"),
    pytest.mark.skipif(BROWSER is None, reason="no chromium binary (apt-get install chromium)")]


class Dom(HTMLParser):
    """Start tags in document order, each with its attributes and the ids/classes it is inside."""

    VOID = {"meta", "link", "br", "img", "input", "hr", "path", "rect", "circle", "line",
            "polyline", "stop"}

    def __init__(self):
        super().__init__()
        self.elements: list[tuple[str, dict, tuple]] = []
        self._open: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.elements.append((tag, attrs, tuple(self._open)))
        if tag not in self.VOID:
            self._open.append((tag, attrs))

    def handle_startendtag(self, tag, attrs):
        self.elements.append((tag, dict(attrs), tuple(self._open)))

    def handle_endtag(self, tag):
        for i in range(len(self._open) - 1, -1, -1):
            if self._open[i][0] == tag:
                del self._open[i:]
                break

    def find(self, tag, cls=None, **attrs):
        return [(a, inside) for t, a, inside in self.elements if t == tag
                and (cls is None or cls in (a.get("class") or "").split())
                and all(a.get(k.replace("_", "-")) == v for k, v in attrs.items())]


def _chromium(tmp_path, *args) -> subprocess.CompletedProcess:
    return subprocess.run([BROWSER, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run",
                           f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0",
                           *args], capture_output=True, text=True, timeout=60)


def _console(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]


def test_report_renders_in_chromium(sample_ws, capsys, tmp_path):
    root, manifest = sample_ws
    page = tmp_path / "r.html"
    rc, out, err = run_cli(capsys, root, "-o", tmp_path, "-c", f"vcs --format json; ac -l 0; report -o {page}")
    assert rc == 0, err
    suspects = json_docs(out.splitlines()[0])[0]
    roots = [s["op"] for s in suspects if s["role"] == "root"]

    # the virtual time budget lets the script's promises (unpacking the exports) settle first
    proc = _chromium(tmp_path, "--virtual-time-budget=10000", "--dump-dom", page.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _console(proc.stderr) == []
    dom = Dom()
    dom.feed(proc.stdout)
    assert dom.find("body", data_ready="1"), "the page's script did not run to its end"

    assert len(dom.find("svg", id="metric-chart")) == 1
    markers = dom.find("g", "root-marker")
    assert [a["data-op"] for a, _ in markers] == roots
    assert markers[0][0]["data-op"] == manifest["lossy"]["op"]
    assert "first-divergence" in markers[0][0]["class"].split()

    def rows(table_id):
        return [a for a, inside in dom.find("tr") if any(t == "table" and at.get("id") == table_id
                                                          for t, at in inside) and
                any(t == "tbody" for t, _ in inside)]
    assert len(rows("suspect-table")) == len(suspects)
    assert len(rows("overflow-table")) == 1 + len(manifest["overflow"]["downstream_non_finite"])
    headers = [a for a, inside in dom.find("th") if any(at.get("id") == "suspect-table" for _, at in inside)]
    assert headers and all(a.get("title") == "click to sort" for a in headers)   # set by the script

    sections = dom.find("section", "root")
    assert [a["data-op"] for a, _ in sections] == roots
    graphs = dom.find("svg", "hood")
    assert [a["data-center"] for a, _ in graphs] == roots
    centre_nodes = dom.find("g", "center")
    assert [a["data-op"] for a, _ in centre_nodes] == roots
    assert len(dom.find("svg", "hist")) == 2 * len(roots)
    links = dom.find("a", "export")
    assert [a["download"] for a, _ in links][:2] == ["suspects.csv", "suspects.json"]
    assert all(a.get("href", "").startswith("blob:") for a, _ in links)    # unpacked by the script

    shot = tmp_path / "report.png"
    proc = _chromium(tmp_path, "--hide-scrollbars", "--window-size=1280,2000", f"--screenshot={shot}",
                     page.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _console(proc.stderr) == []
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


def test_report_tables_fit_a_1400_px_window(sample_ws, capsys, tmp_path):
    """At 1400 px the suspects table scrolled sideways and cut the golden column; the replay advice
    line ran off the edge (issue 30). The test measures the laid-out page in Chromium: a script
    appended to a copy of the report records each section's overflow once the page is ready."""
    root, _ = sample_ws
    page = tmp_path / "r.html"
    rc, _, err = run_cli(capsys, root, "-o", tmp_path, "-c", f"vcs; vcs --replay; report -o {page}")
    assert rc == 0, err
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", """<script>
setTimeout(() => { document.body.dataset.overflow = JSON.stringify([...document.querySelectorAll('section')]
  .map(s => [s.id || s.className, s.scrollWidth - s.clientWidth]).filter(p => p[1] > 0)); }, 500);
</script></body>"""), encoding="utf-8")
    proc = _chromium(tmp_path, "--window-size=1400,2000", "--virtual-time-budget=10000", "--dump-dom",
                     probe.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = Dom()
    dom.feed(proc.stdout)
    body = dom.find("body")
    assert body and "data-overflow" in body[0][0], "the probe did not run"
    assert json.loads(body[0][0]["data-overflow"]) == []
