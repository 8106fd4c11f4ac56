"""``replay`` on framework sessions (msprobe PyTorch/MindSpore dumps, pshell captures): the
entry's API bound to the one kernel table from the arguments ``dump.json`` recorded
(``analysis/replay/calls``), fed by its dumped input tensors, judged by the same rule, profiles
and reproducer as graph mode (:mod:`.replay_run`)."""

from __future__ import annotations

from typing import Any

from precision_shell.commands.framework_inspect import FRAMEWORK, variant
from precision_shell.commands.results import Sections
from precision_shell.errors import CommandError, FormatError


def golden_side(session: Any) -> tuple[Any, Any]:
    """(pairing, golden run) of the selection through msprobe's pairing rules; (None, None)
    without a golden dump. The last ``vc`` is reused when there is one."""
    from precision_shell.commands.framework_compare_run import run_compare
    from precision_shell.model.runs.msprobe import MsprobePairing

    if session.golden_dump is None:
        return None, None
    found = session.results.get("compare") or run_compare(session)
    golden_run = session.golden_run()
    return MsprobePairing.of(session.run, golden_run, found.pairing), golden_run


def entry_case(session: Any, name: str) -> tuple[Any, Any] | None:
    """(kernel, case) of one entry fed by its dumped tensors (goldens through msprobe's pairing);
    None when its API has no kernel; CommandError in one line when it cannot be replayed."""
    from precision_shell.analysis.replay.calls import NoKernel, op_call
    from precision_shell.analysis.replay.run_case import case_of

    run = session.run
    op = run.op(name)
    try:
        call = op_call(run, op)
    except NoKernel:
        return None
    missing = [run.tensor(t).printed() for t in call.tensor_inputs + call.outputs if not run.tensor(t).has_data]
    if missing:
        raise CommandError(f"replay {op.name}: no values dumped for {', '.join(missing[:4])} "
                           "(statistics-only dump: rerun msprobe with task 'tensor')")
    pairing, golden_run = golden_side(session)
    try:
        return call.kernel, case_of(run, call, pairing, golden_run)
    except FormatError as exc:
        raise CommandError(f"replay {op.name}: {exc}") from None


def replay_entry(session: Any, name: str, profiles: list) -> tuple[Any, Any, Any]:
    """(kernel, case, verdict) of one entry; CommandError in one line when it cannot be replayed."""
    from precision_shell.analysis.replay.calls import NoKernel, op_call
    from precision_shell.analysis.replay.engine import ReplayError, replay

    found = entry_case(session, name)
    if found is None:       # the one line saying why there is no kernel
        try:
            op_call(session.run, session.run.op(name))
        except NoKernel as exc:
            raise CommandError(str(exc)) from None
        raise CommandError(f"replay {name}: no reference kernel")
    kernel, case = found
    try:
        return kernel, case, replay(kernel, case, profiles, session.settings.threshold)
    except ReplayError as exc:
        raise CommandError(f"replay {case.op}: {exc}") from None


@variant(FRAMEWORK, "replay",
         example="replay Functional.softmax.0.forward\nreplay softmax.0.forward --profile bf16-acc\n"
                 "replay Functional.linear.1.forward --export /tmp/linear_repro")
def replay(session: Any, args: Any) -> Sections:
    from precision_shell.commands.replay_run import REPLAYED, _export, _profiles, _result

    profiles, named = _profiles(args)
    kernel, case, verdict = replay_entry(session, args.op, profiles)
    session.results.setdefault(REPLAYED, {})[case.op] = verdict
    exported = _export(session, args.export, kernel, case, verdict, profiles, named) if args.export else None
    return _result(verdict, exported)
