"""What the finding lists (``vcs``, ``ac``, graph and framework) share: ``--sort KEY``
(``-KEY`` descending), ``--type TYPE``, ``--role ROLE``, the ``-l`` cut that never hides a root
(or an overflow producer) and says what it hid by role, and handing the list to the finding cursor.

The list after filtering and sorting is the cursor's list: row ``#`` K is what ``goto K`` shows;
execution order is a column of its own (``order``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

from precision_shell.commands.registry import arg
from precision_shell.errors import UsageError
from precision_shell.model.findings import FindingCursor

KEPT_ROLES = ("root", "producer")      # what a cut never hides
ROLES = ("root", "propagated", "producer", "healed", "param_grad")


def list_args(keys: str) -> list:
    """--sort/--type/--role, ``keys`` naming the sort keys for the help text."""
    return [arg("--sort", metavar="[-]KEY", signed=True, complete="metric",
                help=f"row order: {keys}; -KEY descending (default: order, execution order). "
                     "NaN and missing values last"),
            arg("--type", dest="type_", metavar="TYPE", complete="optype",
                help="only ops whose type contains TYPE (or /regex/)"),
            arg("--role", choices=ROLES, help="only findings of this role")]


def limit_arg(never_cut: str = "roots") -> Any:
    """-l/--limit, one default for every list command: the `config` limit (20 unless set)."""
    return arg("-l", "--limit", type=int, default=None, metavar="N",
               help=f"rows to show (0 = all; default: the `config` limit, 20 unless set); {never_cut} are "
                    "never cut, the footer counts the hidden rows by role")


@dataclass
class ListView:
    items: list                 # filtered and sorted: the cursor's list, `#` = position + 1
    shown: list[int]            # positions of the rows shown after the -l cut
    more: str | None            # the footer when the cut hid rows
    what: str = "in execution order"    # how the list is ordered and filtered, for its title


def _sort_value(value: Any) -> tuple:
    """(missing, value): None, NaN and non-numbers sort last whatever the direction."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return (1, 0.0)
    return (0, float(value))


def arrange(items: list, args: Any, *, keys: dict[str, Callable[[Any], Any]],
            type_of: Callable[[Any], str], limit: int) -> ListView:
    """Filter by --type/--role, sort by --sort, cut at ``limit`` keeping every root/producer."""
    from precision_shell.commands.inspect_cmd import text_matcher

    sort = getattr(args, "sort", None) or "order"
    if sort == "order" and getattr(items, "in_order", False) and not getattr(args, "type_", None) \
            and not getattr(args, "role", None):      # a lazy list already in order: its items stay unmade
        return ListView(items, *cut(items, limit))
    found = list(items)
    filters = []
    if getattr(args, "type_", None):
        match = text_matcher(args.type_, "--type")
        found = [f for f in found if match(type_of(f))]
        filters.append(f"--type {args.type_}")
    if getattr(args, "role", None):
        found = [f for f in found if f.role == args.role]
        filters.append(f"--role {args.role}")
    name = sort.lstrip("-")
    if name not in keys:
        raise UsageError(f"--sort {sort}: no such key; keys: {', '.join(keys)} (-KEY: descending)")
    key = keys[name]
    if sort.startswith("-"):
        found.sort(key=lambda f: (_sort_value(key(f))[0], -_sort_value(key(f))[1]))
    else:
        found.sort(key=lambda f: _sort_value(key(f)))
    what = "in execution order" if sort == "order" else \
        f"by {name}, {'highest' if sort.startswith('-') else 'lowest'} first"
    if filters:
        what = f"{len(found)} with {' '.join(filters)}, {what}"
    return ListView(found, *cut(found, limit), what)


def cut(items: list, limit: int) -> tuple[list[int], str | None]:
    """Positions shown under ``-l limit``: every root/producer, then the others in list order
    until ``limit`` rows; the footer counts the hidden rows by role."""
    if limit == 0 or len(items) <= limit:
        return list(range(len(items))), None
    roles = column(items, "roles", "role")
    kept = [i for i, role in enumerate(roles) if role in KEPT_ROLES]
    room = max(0, limit - len(kept))
    others = [i for i, role in enumerate(roles) if role not in KEPT_ROLES]
    shown = sorted(kept + others[:room])
    hidden: dict[str, int] = {}
    for i in others[room:]:
        hidden[roles[i]] = hidden.get(roles[i], 0) + 1
    by_role = ", ".join(f"{n} {role}" for role, n in hidden.items())
    return shown, f"... {len(items) - len(shown)} more not shown: {by_role} (roots and producers are never " \
                  f"cut; -l 0 shows all)"


def column(items: Any, name: str, field: str) -> list:
    """Each item's ``field``: the list's own column ``name`` when it has one (a lazy list of
    suspects: no object made), else read from each item."""
    found = getattr(items, name, None)
    return found if found is not None else [getattr(f, field) for f in items]


def follow(session: Any, kind: str, items: list, what: str) -> str | None:
    """Make ``items`` the list ``next``/``prev``/``goto`` walk; one line when it replaces a list
    the cursor was on (another kind, or other findings). The same findings again keep the cursor
    where it was; an empty list never replaces a list with findings (`vcs; next; ac` with no
    overflow keeps walking the compare list, and says so)."""
    old = session.results.get("cursor")
    if old is not None and old.kind == kind and column(old.items, "ops", "op") == column(items, "ops", "op"):
        old.items = items           # fresh objects of the same findings: the position stays
        return None
    if not items and old is not None and old.items:
        return f"`next` still walks the {old.kind} list ({old.position_text}): this list is empty"
    session.results["cursor"] = FindingCursor(kind, items)
    if old is None:
        return None
    return f"finding list replaced: `next` now walks {what} ({len(items)}; was {old.position_text})"
