"""Issue 30 (daily use III): what a newcomer tripped on, each checked where it bit (a pty where the
terminal matters)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

pexpect = pytest.importorskip("pexpect")
from tests.shell.test_terminal import PROMPT  # noqa: E402


def expect_prompt(child) -> str:
    """Wait for the prompt, answering the cursor-position query a real terminal answers; returns
    everything printed before it."""
    seen = ""
    while child.expect([re.escape("\x1b[6n"), PROMPT]) == 0:
        seen += child.before
        child.send("\x1b[1;1R")
    return seen + child.before

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")


def _env(home: Path) -> dict:
    env = dict(os.environ)
    env.pop("NO_COLOR", None)
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / "config"), XDG_DATA_HOME=str(home / "data"),
               XDG_STATE_HOME=str(home / "state"), XDG_CACHE_HOME=str(home / "cache"),
               TERM="xterm-256color", PAGER="cat", PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    return env


def _spawn(args: list[str], cwd: Path, home: Path, cols: int = 80, rows: int = 24):
    return pexpect.spawn(sys.executable, ["-m", "precision_shell", *args], cwd=str(cwd), env=_env(home),
                         encoding="utf-8", timeout=60, dimensions=(rows, cols))


def _screen_lines(text: str) -> list[str]:
    return [line for line in ANSI.sub("", text).split("\n")]


@pytest.mark.terminal
def test_banner_is_wrapped_at_word_boundaries_at_80_columns(sample_ws, tmp_path):
    root, _ = sample_ws
    import json as jsonlib
    from precision_shell.cli import main as cli_main
    import contextlib
    import io
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        cli_main([str(root), "-o", str(tmp_path / "out"), "-c", "info", "--format", "json"])
    source = Path(jsonlib.loads(buffer.getvalue().splitlines()[0])["graphs"][0]["source"])
    graph_file = source.relative_to(root) if source.is_absolute() else source   # as shown from root
    child = _spawn([], cwd=root, home=tmp_path)
    lines = _screen_lines(expect_prompt(child))
    child.sendline("quit")
    child.expect(pexpect.EOF)
    assert max(len(line) for line in lines) <= 80
    text = "\n".join(lines)
    assert f"[{graph_file}]" in text, text        # the path whole on one line, not cut at the edge
    from precision_shell.shell.repl import HINT
    tokens = text.split()
    hint_at = tokens.index(HINT.split()[0])
    assert tokens[hint_at:hint_at + len(HINT.split())] == HINT.split()   # wrapped between words only


@pytest.mark.terminal
def test_start_up_cache_is_reused_from_another_launch_folder(sample_ws, tmp_path):
    """The README's two flows: `pshell WS` from the parent folder, then `cd WS && pshell`: the
    second launch reuses the cache entry without a word (it was 'cache entry ignored: ... not a
    graph file of the key' on every switch)."""
    import shutil
    ws = tmp_path / "convnet"
    shutil.copytree(sample_ws[0], ws, ignore=shutil.ignore_patterns("temp"))
    first = _spawn([str(ws.name), "-c", "info"], cwd=tmp_path, home=tmp_path)
    first.expect(pexpect.EOF)
    cache = ws / "precision_data" / "temp" / "pshell" / "cache"
    entries = sorted(p.name for p in cache.iterdir() if p.name.startswith("graph-"))
    assert entries, "the first launch wrote a graph cache entry"
    for cwd, args in ((ws, []), (tmp_path, [ws.name])):     # into the workspace, and back
        child = _spawn(args, cwd=cwd, home=tmp_path)
        screen = ANSI.sub("", expect_prompt(child))
        child.sendline("ni ln1/add_1/LayerNorm")
        child.expect("te_layernorm")      # the kernel's name: the op is read through the cached entry
        child.sendline("quit")
        child.expect(pexpect.EOF)
        assert "warning" not in screen and "cache entry ignored" not in screen
    assert sorted(p.name for p in cache.iterdir() if p.name.startswith("graph-")) == entries


FRAMEWORK = Path(__file__).resolve().parents[2] / "sample_data" / "framework"


def _typed(child, line: str, until: str) -> str:
    """Type ``line`` at the prompt; the screen up to ``until`` (a regex)."""
    child.sendline(line)
    child.expect(until)
    return ANSI.sub("", child.before + child.after)


@pytest.mark.terminal
def test_an_empty_list_keeps_the_finding_list_and_plot_keeps_the_cursor(tmp_path):
    """`vcs; next; ac` where ac finds nothing: `next` goes on along the compare list (it said
    'finding list replaced ... (0; was ...)' and then 'end of the framework overflow list')."""
    child = pexpect.spawn(sys.executable, ["-m", "precision_shell", str(FRAMEWORK / "target_bf16"), "--golden",
                                           str(FRAMEWORK / "golden_fp32"), "-o", str(tmp_path / "out")],
                          cwd=str(tmp_path), env=_env(tmp_path), encoding="utf-8", timeout=60,
                          dimensions=(48, 160))
    expect_prompt(child)
    listing = _typed(child, "vcs -l 0", r"failing = ")
    total = int(re.search(r"(\d+) failing", listing).group(1))
    first = _typed(child, "next", rf"\[1/{total}\] \S+")
    expect_prompt(child)
    _typed(child, "vcs --plot", r"cosine")          # a chart: the cursor stays on item 1
    expect_prompt(child)
    empty = _typed(child, "ac", r"this list is empty")
    assert "still walks the framework compare list (framework compare 1/" in empty
    expect_prompt(child)
    second = _typed(child, "next", rf"\[2/{total}\] \S+")
    assert second.split("[2/")[1] != first.split("[1/")[1]
    expect_prompt(child)
    child.sendline("quit")
    child.expect(pexpect.EOF)


def test_every_list_command_takes_the_configured_row_limit(sample_ws, capsys, tmp_path):
    """ac showed 3 rows whatever `config` said (20 by default); now ac, vcs and ls share one
    default: the config limit."""
    from tests.conftest import json_docs, run_cli
    root, _ = sample_ws
    out_dir = tmp_path / "out"
    rc, out, _ = run_cli(capsys, root, "-o", out_dir, "-c", "ac", "--format", "json")
    findings = json_docs(out)[0]
    assert rc == 0 and len(findings) > 3           # the default 3 would hide some
    rc, out, _ = run_cli(capsys, root, "-o", out_dir, "-c", "vcs", "--format", "json")
    suspects = json_docs(out)[0]
    for limit, command, total in ((0, "ac", len(findings)), (2, "ac", len(findings)),
                                  (2, "vcs", len(suspects)), (0, "vcs", len(suspects))):
        rc, out, err = run_cli(capsys, root, "-o", out_dir, "-c", f"config set limit {limit}; {command}")
        assert rc == 0, err
        rows = [line for line in out.splitlines() if re.match(r"\d+\s+\d+\s", line)]   # '#  order ...'
        hidden = re.search(r"\.\.\. (\d+) more not shown", out)
        assert len(rows) == (total if limit == 0 else limit)
        assert (int(hidden.group(1)) if hidden else 0) == total - len(rows)


def test_replay_and_the_suspects_json_name_golden_tensors_so_they_paste(sample_ws, tmp_path, capsys):
    """replay listed golden inputs as `fc1/BiasAdd:0` (pt read the NPU op, or suggested a wrong
    name) and the JSON export wrote `ln1/add_1:0` where the CSV wrote `golden:ln1_add_1:0`."""
    import json as jsonlib

    import numpy as np

    from precision_shell.formats.golden_npy import load_npy
    from precision_shell.model.session import Session
    from precision_shell.model.tensor_resolve import resolve_tensor
    from tests.conftest import json_docs, run_cli
    root, manifest = sample_ws
    op = manifest["lossy"]["op"]
    out_dir = tmp_path / "out"
    rc, out, err = run_cli(capsys, root, "-o", out_dir, "-c", f"replay {op}")
    assert rc == 0, err
    table = out.split("\ninputs\n", 1)[1].split("\nevidence\n", 1)[0].splitlines()[2:]
    printed = [line.split()[:2] for line in table]
    session = Session.open(root, output=out_dir)
    for npu, golden in printed:
        assert golden.startswith("golden:")
        assert resolve_tensor(session, npu).label == npu and resolve_tensor(session, golden).label == golden
    rc, out, err = run_cli(capsys, root, "-o", out_dir, "-c", f"replay {op}", "--format", "json")
    for item, (npu, golden) in zip(json_docs(out)[0]["inputs"], printed):
        assert resolve_tensor(session, item["golden"]).label == golden     # long form, same tensor
        assert resolve_tensor(session, item["tensor"]).label == npu
    rc, out, err = run_cli(capsys, root, "-o", out_dir, "-c",
                           f"vcs; export suspects --format json -o {tmp_path}/s.json; export suspects -o {tmp_path}/s.csv")
    assert rc == 0, err
    row = next(r for r in jsonlib.loads((tmp_path / "s.json").read_text()) if r["op"] == op)
    csv_text = (tmp_path / "s.csv").read_text()
    json_golden = resolve_tensor(session, row["golden_tensor"])
    assert json_golden.label in csv_text                     # the CSV's printed name, the same tensor
    np.testing.assert_array_equal(json_golden.loader(), load_npy(json_golden.path))


@pytest.mark.terminal
def test_framework_ni_shows_the_users_own_frames_first(tmp_path):
    """ni showed eight torch-internal frames and hid the user's `File mlp.py, line 8, in <module>`
    under '... 6 more'."""
    import json as jsonlib
    stacks = jsonlib.loads((FRAMEWORK / "target_bf16" / "step0" / "rank0" / "stack.json").read_text())
    entry = "Functional.softmax.0.forward"
    recorded = next(frames for names, frames in stacks.values() if entry in names)   # msprobe's stack.json
    own = [f for f in recorded if "site-packages" not in f.split(",")[0]]
    assert own and len(recorded) > 8                    # the sample has both kinds, more than 8
    child = pexpect.spawn(sys.executable, ["-m", "precision_shell", str(FRAMEWORK / "target_bf16"), "--golden",
                                           str(FRAMEWORK / "golden_fp32"), "-o", str(tmp_path / "out")],
                          cwd=str(tmp_path), env=_env(tmp_path), encoding="utf-8", timeout=60,
                          dimensions=(60, 250))
    expect_prompt(child)
    screen = _typed(child, f"ni {entry}", r"\.\.\. \d+ more[^\r\n]*")
    expect_prompt(child)
    child.sendline("quit")
    child.expect(pexpect.EOF)
    shown = [line.strip() for line in screen.split("stack", 1)[1].splitlines() if line.strip().startswith("File")]
    assert [" ".join(f.split()) for f in own] == shown[:len(own)]      # every own frame, first, in order
    assert all("site-packages" in line for line in shown[len(own):])


@pytest.mark.parametrize("kind", ["graph", "framework"])
def test_panel_metrics_have_a_labelled_verdict_column(kind, sample_ws, tmp_path, capsys):
    """next/goto panels had an unlabelled FAIL column and an always-empty 'not compared' one."""
    from tests.conftest import json_docs, run_cli
    args = ([sample_ws[0]] if kind == "graph" else
            [FRAMEWORK / "target_bf16", "--golden", FRAMEWORK / "golden_fp32"])
    rc, out, err = run_cli(capsys, *args, "-o", tmp_path / "out", "-c", "vcs; next")
    assert rc == 0, err
    rc2, doc, _ = run_cli(capsys, *args, "-o", tmp_path / "out", "-c", "vcs", "--format", "json")
    first = json_docs(doc)[0][0]
    lines = out.split("\nmetrics\n", 1)[1].splitlines()
    header = lines[0].split()
    assert header[-1] == "verdict" and "not" not in header and header.count("") == 0
    body = lines[2:]
    body = body[:next((i for i, line in enumerate(body) if not line.startswith(" ") and " " not in line.strip()),
                      len(body))]                              # up to the next section's title
    cells = {line.split()[0]: line.split()[-1] for line in body if line.strip()}
    failed = set(first["failed_outputs"]) | set(first["failed_inputs"])
    from precision_shell.model.tensor_ref import name_of
    assert {name for name, verdict in cells.items() if verdict == "FAIL"} == {name_of(t) for t in failed}
    assert cells and set(cells.values()) <= {"FAIL", "ok"}     # every tensor of the sample's root compared


def test_pt_at_prints_integral_fp16_values_exactly(sample_ws, tmp_path, capsys):
    """`pt --at` printed an fp16 8192 as `8190.` (numpy's shortest round-trip string) while the
    header said 8192.0."""
    import numpy as np

    from tests.conftest import run_cli
    # within numpy's positional range (largest/smallest <= 1e3): where fp16's shortest strings
    # of 8192, 8200 and 9000 are 8190., 8200. and 9000.
    values = np.array([[8192, 10.5, 2048], [-16, 4096, 12.25], [1024, 8200, 9000]], dtype=np.float16)
    np.save(tmp_path / "w.npy", values)
    rc, out, err = run_cli(capsys, sample_ws[0], "-o", tmp_path / "out", "-c", f"pt {tmp_path / 'w.npy'} --at 0,0")
    assert rc == 0, err
    assert "= 8192.0" in out
    grid = " ".join(out.split("\n", 3)[-1].split())
    for v in values.ravel():
        text = f"{int(v)}." if float(v).is_integer() else repr(float(v))
        assert text in grid, (text, grid)
    assert "8190." not in grid


def test_smaller_items_of_the_newcomer_list(sample_ws, tmp_path, capsys):
    """clear, a did-you-mean for config keys, replay naming the producer to replay, help's
    overview without a JSON schema."""
    from precision_shell.commands import REGISTRY
    from tests.conftest import run_cli
    root, manifest = sample_ws
    args = [root, "-o", tmp_path / "out", "-c"]
    rc, out, err = run_cli(capsys, *args, "clear; info")
    assert rc == 0 and "unknown command" not in err and "\x1b" not in out   # batch: nothing to clear
    rc, out, err = run_cli(capsys, *args, "config set colour off")
    assert rc == 2 and "did you mean color?" in err and err.count("\n") == 1
    # a Cast right after the designed lossy root inherits its error: name that root to replay
    rc, out, err = run_cli(capsys, *args, "vcs -l 0 --format json")
    lossy = manifest["lossy"]["op"]
    import json as jsonlib
    propagated = [r for r in jsonlib.loads(out.splitlines()[0]) if r["role"] == "propagated"
                  and any(t.startswith(lossy) or t == f"{r['op']}:input:0" for t in r["failed_inputs"])]
    cast = next(r["op"] for r in propagated if r["type"] == "Cast")
    rc, out, err = run_cli(capsys, *args, f"replay {cast}")
    assert rc == 0, err
    assert f"replay its producer: `replay {lossy}`" in out
    rc, out, err = run_cli(capsys, *args, "help")
    replay_line = next(line for line in out.splitlines() if line.startswith("replay "))
    assert "JSON" not in replay_line and replay_line.rstrip().endswith(".")
    assert "JSON" in REGISTRY.lookup("replay").summary            # still in `help replay`


def test_clear_clears_a_terminal_screen(tmp_path):
    import io

    from precision_shell.frontend import Frontend

    class Terminal(io.StringIO):
        def isatty(self):
            return True
    screen = Terminal()
    frontend = Frontend(None, out=screen, err=io.StringIO())
    frontend.run_line("clear")
    assert screen.getvalue() == "\x1b[H\x1b[2J"


def test_report_lists_only_commands_that_ran_and_marks_nan_cosines_on_the_edge(sample_ws, tmp_path, capsys):
    pytest.importorskip("jinja2")
    import html as htmllib
    import json as jsonlib

    from tests.conftest import run_cli
    root, _ = sample_ws
    page = tmp_path / "r.html"
    rc, out, err = run_cli(capsys, root, "-o", tmp_path / "out", "-c",
                           f"ni no_such_op; vcs -l 0 --format json; report -o {page}")
    assert rc == 1 and "no_such_op" in err                       # the failed command said so ...
    text = page.read_text(encoding="utf-8")
    commands = htmllib.unescape(text.split('<pre id="commands">', 1)[1].split("</pre>", 1)[0]).splitlines()
    assert [c for c in commands if c.strip()] and not any("no_such_op" in c for c in commands)   # ... not listed
    assert any(c.startswith("vcs") for c in commands)
    rows = jsonlib.loads(out.splitlines()[0])
    nan_orders = sorted({r["order"] for r in rows if r["cosine"] is None or r["cosine"] != r["cosine"]})
    assert nan_orders                                            # the sample's overflowing ops
    chart = text.split('id="metric-chart"', 1)[1].split("</svg>", 1)[0]
    marked = sorted(int(o) for o in re.findall(r'class="nan-mark" data-order="(\d+)"', chart))
    assert set(nan_orders) <= set(marked)
    assert f"NaN cosine ({len(marked)} op" in chart
