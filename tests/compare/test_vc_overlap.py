"""``vc`` compares the first ops while it plans the rest (mapping.golden_plan_steps fed to
run_compare): the rows, problems and bytes are those of planning first; Ctrl-C while planning
keeps what was compared of the ops planned so far."""

from __future__ import annotations

import pytest

from concurrent.futures import Future

from precision_shell.analysis.compare.engine import run_compare
from precision_shell.analysis.compare.mapping import golden_plan_steps, plan_golden_compare
from precision_shell.model.session import Session
from precision_shell.samples.writer import SampleOptions, write_workspace


@pytest.fixture(scope="module")
def session(tmp_path_factory) -> Session:
    root = tmp_path_factory.mktemp("overlap_ws")
    write_workspace(root, SampleOptions(seed=4, scale_mb=12, small_tensors=True))
    return Session.open(root)


def _rows(result) -> list:
    return [(r.tensor, r.compared, r.reason, r.shape, r.npu_dtype, r.golden_dtype,
             tuple("nan" if v != v else v for v in r.metrics.as_json().values() if not isinstance(v, dict)))
            for r in result.rows]


def test_planning_while_comparing_gives_the_planned_first_result(session):
    whole = plan_golden_compare(session.graph, session.dumps, session.golden)
    first = run_compare(whole, workers=2)
    plan, planning = golden_plan_steps(session.graph, session.dumps, session.golden)
    assert len(plan) == 0       # nothing planned before the compare pulls it
    # a small estimate: many small tasks, handed out while the plan grows
    overlapped = run_compare(plan, workers=2, planning=planning, estimated_bytes=32 << 20)
    assert len(plan) == len(whole) and not overlapped.cancelled
    assert overlapped.problems == first.problems
    assert overlapped.bytes_read == first.bytes_read > 0
    assert _rows(overlapped) == _rows(first)
    assert sum(r.compared for r in overlapped.rows) > len(whole.ops)


class _RunAtOnce:
    """An executor that runs each task when it is handed out: every task handed out before an
    interrupt is finished by then."""

    _max_workers = 2

    def submit(self, fn, *args):
        fut = Future()
        fut.set_result(fn(*args))
        return fut


def test_ctrl_c_while_planning_keeps_the_compared_ops(session):
    whole = plan_golden_compare(session.graph, session.dumps, session.golden)
    plan, planning = golden_plan_steps(session.graph, session.dumps, session.golden)
    stop_at = len(whole.ops) * 3 // 4

    def interrupted():
        for n, op in enumerate(planning):
            if n == stop_at:
                raise KeyboardInterrupt
            yield op
    result = run_compare(plan, planning=interrupted(), executor=_RunAtOnce(), estimated_bytes=32 << 20)
    assert result.cancelled
    assert any(p.startswith("interrupted:") and f"planning stopped after {len(plan.ops)} ops" in p
               for p in result.problems)
    assert 0 < len(plan.ops) <= stop_at + 1 < len(whole.ops)
    done = [r for r in result.rows if r is not None]
    assert done and all(r.op in {op.op for op in plan.ops} for r in done)
