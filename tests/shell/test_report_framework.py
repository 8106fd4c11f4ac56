"""``report`` on a framework session (the committed msprobe sample): the page names the designed
first divergence, lists every failing entry, draws each root's dataflow neighbourhood and value
histograms; in headless Chromium when one is installed (as test_report_browser does)."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from conftest import json_docs, run_cli
from framework_dumps import sample
from tests.shell.test_report_browser import BROWSER, Dom, _chromium, _console

pytestmark = pytest.mark.skipif(importlib.util.find_spec("jinja2") is None,
                                reason="the report extra is not installed: pip install -e '.[report]'")


def _report(capsys, tmp_path, target="target_bf16", golden="golden_fp32", before="vcs -l 0 --format json"):
    page = tmp_path / "r.html"
    rc, out, err = run_cli(capsys, sample() / target, "--golden", sample() / golden, "-o", tmp_path / "out",
                           "-c", before, "-c", f"report -o {page}")
    assert rc == 0, err
    return page, json_docs(out.splitlines()[0])[0]


def _check_page(html: str, suspects: list[dict], root: str) -> Dom:
    dom = Dom()
    dom.feed(html)
    roots = [s["op"] for s in suspects if s["role"] == "root"]
    markers = dom.find("g", "root-marker")
    assert [a["data-op"] for a, _ in markers] == roots and roots[0] == root
    assert "first-divergence" in markers[0][0]["class"].split()

    def rows(table_id):
        return [a for a, inside in dom.find("tr") if any(t == "table" and at.get("id") == table_id
                                                          for t, at in inside) and
                any(t == "tbody" for t, _ in inside)]
    assert len(rows("suspect-table")) == len(suspects)
    assert [a["data-op"] for a, _ in dom.find("section", "root")] == roots
    assert [a["data-center"] for a, _ in dom.find("svg", "hood")] == roots
    assert [a["data-op"] for a, _ in dom.find("g", "center")] == roots
    assert len(dom.find("svg", "hist")) == 2 * len(roots)
    return dom


def test_framework_report_names_the_first_divergence(capsys, tmp_path):
    truth = json.loads((sample() / "truth.json").read_text())["precision_loss"]
    page, suspects = _report(capsys, tmp_path)
    html = page.read_text()
    _check_page(html, suspects, truth["root"])
    assert "first divergence" in html and truth["root"] in html
    # the root's neighbourhood draws its producer: the entry whose output has its input's values
    from precision_shell.model.framework_session import FrameworkSession

    session = FrameworkSession.open(sample() / "target_bf16")
    run = session.run
    edge = run.producers(truth["root"])[0]
    np.testing.assert_array_equal(run.load(edge.src), run.load(edge.dst))
    assert f'data-op="{edge.src_op}"' in html


def test_framework_report_on_statistics_dumps(capsys, tmp_path):
    """No values: no cosine chart, no histograms; the suspect table and roots still render."""
    truth = json.loads((sample() / "truth.json").read_text())["precision_loss"]
    page, suspects = _report(capsys, tmp_path, "stats_target_bf16", "stats_golden_fp32")
    html = page.read_text()
    dom = Dom()
    dom.feed(html)
    roots = [s["op"] for s in suspects if s["role"] == "root"]
    assert roots[0] == truth["root"]
    assert [a["data-op"] for a, _ in dom.find("section", "root")] == roots
    assert "statistics mode: no cosine to chart" in html and "statistics only, no values dumped" in html


@pytest.mark.skipif(BROWSER is None, reason="no chromium binary (apt-get install chromium)")
def test_framework_report_renders_in_chromium(capsys, tmp_path):
    truth = json.loads((sample() / "truth.json").read_text())["precision_loss"]
    page, suspects = _report(capsys, tmp_path)
    proc = _chromium(tmp_path, "--virtual-time-budget=10000", "--dump-dom", page.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _console(proc.stderr) == []
    dom = _check_page(proc.stdout, suspects, truth["root"])
    assert dom.find("body", data_ready="1"), "the page's script did not run to its end"
    assert all(a.get("href", "").startswith("blob:") for a, _ in dom.find("a", "export"))
