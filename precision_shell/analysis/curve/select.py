"""Which series of a log is the curve (``--metric``) and which is the loss scale."""

from __future__ import annotations

from precision_shell.formats.logs.series import normal_name


def is_loss_scale(name: str) -> bool:
    """``loss_scale``, Megatron's ``loss scale`` / ``loss-scale``, ``train/loss_scale``..."""
    return "loss_scale" in normal_name(name)


def pick_metric(names: list[str], metric: str) -> str | None:
    """An exact name (case and ``-``/space/``_`` aside), else one whose last ``/`` part is exact,
    else the first containing ``metric``. The loss-scale series is never taken for a metric that
    does not itself name a scale (``--metric loss`` is the loss, not ``loss_scale``)."""
    want = normal_name(metric)
    pool = [n for n in names if "scale" in want or not is_loss_scale(n)]
    for rule in (lambda n: normal_name(n) == want,
                 lambda n: normal_name(n).rsplit("/", 1)[-1] == want,
                 lambda n: want in normal_name(n)):
        found = next((n for n in pool if rule(n)), None)
        if found is not None:
            return found
    return None


def pick_loss_scale(names: list[str]) -> str | None:
    return next((n for n in names if is_loss_scale(n)), None)
