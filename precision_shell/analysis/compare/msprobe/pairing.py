"""Pair a target msprobe dump with its golden the way ``msprobe compare`` (26.2) does.

msprobe pairs *rows*, one per leaf (``core/compare/acc_compare.py``: ``ParseData.gen_data_df``,
``ProcessDf``, ``Match``), and so does this module:

- rows of an entry are its inputs, then parameters, then outputs, then parameter grads
  (``utils.reorder_index``); a row's name is ``ENTRY.PATH`` (its tensor file's stem);
- **exact** (default): the key is the row name, except that backward entries get their call
  number replaced by their rank among backward entries of the same counter-less name in dump
  order (``update_backward_call``: recomputation renumbers the backward). Forward names are
  kept as dumped (26.2 renumbers forward only in its train/infer consistency mode). Rows are
  joined on the key and kept in target dump order;
- **fuzzy** (``fuzzy=True``, msprobe ``-fm``): the call number is stripped
  (``Match.rename_api``) and two queues are aligned in dump order (``process_fuzzy_match``);
- **mapping** (msprobe ``-dm``): a ``data_mapping`` yaml, ``target_row_name: golden_row_name``,
  rewrites the target key; the dtype check is off then (``gen_dtype_condition``). As in
  msprobe, the target key is then the row name as dumped while the golden keys stay
  backward-renumbered (``process_data_mapping`` reads ``op_name``, not ``op_name_update``).

Unlike msprobe, nothing is dropped: golden rows no target row took are listed in
:attr:`Pairing.golden_only`, and target rows past the end of a fuzzy alignment are listed
unpaired rather than lost. Dtypes that differ within the float group (bf16 vs fp32) are the
point of a mixed-precision compare and only noted (:attr:`RowPair.dtype_note`); a pair of
other differing dtypes is unpaired as msprobe does, with the reason.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from precision_shell.errors import FormatError
from precision_shell.formats.input_files import read_text_input
from precision_shell.formats.msprobe.columns import dtype_text
from precision_shell.formats.msprobe.dump import Entry, Leaf, RankDump
from precision_shell.model.framework_run import compare_name

_FLOATS = {"float16", "float32", "float64", "bfloat16"}    # msprobe's DTYPE_MATCH_GROUPS
_STATE_ORDER = {"input": 0, "parameters": 1, "output": 2}    # parameters_grad rows: 3


@dataclass(slots=True)    # one per leaf of both dumps: 600k for a 100k-entry pair
class Row:
    """One leaf of one entry, as msprobe's compare table has it."""
    name: str            # ENTRY.PATH (the tensor file's stem)
    entry: Entry
    leaf: Leaf
    state: str           # input | parameters | output | parameters_grad
    order: int           # row position in its dump

    @property
    def dtype(self) -> str:
        """msprobe's dtype cell: the dumped dtype string, or the Python type of a plain value."""
        return dtype_text(self.leaf)


@dataclass(slots=True)    # 300k for a 100k-entry pair: ~70 MB less than with a __dict__ each
class RowPair:
    target: Row
    golden: Row | None
    reason: str = ""         # why golden is None, or the shape mismatch
    dtype_note: str = ""     # "torch.bfloat16 vs torch.float32": expected, not an error

    @property
    def shape_mismatch(self) -> bool:
        return (self.golden is not None and self.target.leaf.shape is not None
                and self.golden.leaf.shape is not None and self.target.leaf.shape != self.golden.leaf.shape)


@dataclass
class EntryReport:
    """What pairing found for one target entry (shape / count mismatches per entry)."""
    entry: str
    golden_entries: list[str]
    rows: int
    paired: int
    golden_rows: int          # rows of the (first) paired golden entry
    problems: list[str] = field(default_factory=list)


@dataclass
class Pairing:
    mode: str                 # exact | fuzzy | mapping
    pairs: list[RowPair]
    golden_only: list[Row]
    entries: list[EntryReport]

    def entry(self, name: str) -> EntryReport | None:
        return next((e for e in self.entries if e.entry == name), None)


def rows_of(rank: RankDump) -> list[Row]:
    rows: list[Row] = []
    for entry in rank.entries:
        state_of = "parameters_grad" if entry.kind == "parameters_grad" else None
        leaves = sorted(entry.leaves, key=lambda leaf: 3 if state_of else
                        _STATE_ORDER.get(leaf.path.partition(".")[0], 0))
        for leaf in leaves:
            rows.append(Row(compare_name(entry.name, leaf), entry, leaf,
                            state_of or leaf.path.partition(".")[0], len(rows)))
    return rows


def _split_name(name: str) -> tuple[str, str, str]:
    """msprobe's ``split_data_name_components``: (counter-less name, call_direction, direction)."""
    parts = name.split(".")
    last, second_last = parts[-1], parts[-2] if len(parts) >= 2 else ""
    if "parameters_grad" in (last, second_last):
        return ".".join(parts[:-1]), "parameters_grad", "parameters_grad"
    for direction in ("forward", "backward"):
        if direction in (last, second_last):
            return (".".join(parts[:-2]) if len(parts) > 2 else "", f"{second_last}.{last}", direction)
    return "", "", ""


def backward_entry_keys(entry_names) -> dict[str, str]:
    """The key of each backward entry among ``entry_names`` (those with rows, in dump order):
    its call number replaced by its rank among backward entries of the same counter-less name."""
    backward_count: dict[str, int] = {}
    entry_key: dict[str, str] = {}
    for entry in dict.fromkeys(entry_names):
        if "backward" not in entry:      # direction "backward" is one of its last two parts
            continue
        stem, call_direction, direction = _split_name(entry)
        if direction != "backward":
            continue
        order = backward_count.get(stem, 0)
        backward_count[stem] = order + 1
        head, _, tail = call_direction.rpartition(".")
        head = str(order) if head.isdigit() else head
        tail = str(order) if tail.isdigit() else tail
        entry_key[entry] = f"{stem}.{head}.{tail}"
    return entry_key


def exact_keys(rows: list[Row]) -> list[str]:
    """Row keys with backward call numbers renumbered per counter-less name in dump order."""
    entry_key = backward_entry_keys(r.entry.name for r in rows)
    # a backward row's key is the renumbered entry plus the row name's suffix (msprobe's
    # ``suffix = full_op_name.replace(op_name, '')``); any other row's key is its name
    return [entry_key[r.entry.name] + r.name.replace(r.entry.name, "") if r.entry.name in entry_key
            else r.name for r in rows]


def fuzzy_name(name: str) -> str:
    """msprobe's ``Match.rename_api``: the name with its call number stripped (as msprobe does
    it: ``Functional.linear.3.forward.input.0`` -> ``Functional.linearforward.input.0``)."""
    if "forward" not in name and "backward" not in name:
        return name
    process = "forward" if "forward" in name else "backward"
    pieces = name.split(process)
    return pieces[0].rsplit(".", 2)[0] + process + pieces[1]


def _dtype_compatible(target: Row, golden: Row) -> bool:
    """Equal dtypes, or both floats of msprobe's match group; tensors are judged by their
    normalized dtype (so a leaf recovered from its file, which has no dumped dtype string,
    still pairs), other leaves by msprobe's dtype text."""
    a, b = target.leaf, golden.leaf
    if a.is_tensor and b.is_tensor:
        return a.dtype == b.dtype or (a.dtype in _FLOATS and b.dtype in _FLOATS)
    return target.dtype == golden.dtype


def pair_dumps(target: RankDump, golden: RankDump, *, fuzzy: bool = False,
               mapping: dict[str, str] | None = None) -> Pairing:
    """Pair every target row with a golden row (or None, with the reason)."""
    t_rows, g_rows = rows_of(target), rows_of(golden)
    if mapping is not None:
        mode = "mapping"
        t_keys = [mapping.get(r.name, r.name) for r in t_rows]
        matched = _join(t_rows, t_keys, g_rows, exact_keys(g_rows))
    elif fuzzy:
        mode = "fuzzy"
        matched = _fuzzy(t_rows, g_rows)
    else:
        mode = "exact"
        matched = _join(t_rows, exact_keys(t_rows), g_rows, exact_keys(g_rows))
    pairs: list[RowPair] = []
    used: set[int] = set()
    for t, g in matched:
        if g is None:
            pairs.append(RowPair(t, None, "no golden row"))
            continue
        used.add(g.order)
        if mode != "mapping" and not _dtype_compatible(t, g):
            pairs.append(RowPair(t, None, f"dtype {t.dtype} vs golden {g.dtype} cannot be compared"))
            continue
        t_dtype, g_dtype = t.dtype, g.dtype
        pair = RowPair(t, g, dtype_note=f"{t_dtype} vs {g_dtype}" if t_dtype != g_dtype else "")
        if pair.shape_mismatch:
            pair.reason = f"shape {list(t.leaf.shape)} vs golden {list(g.leaf.shape)}"
        pairs.append(pair)
    golden_only = [g for g in g_rows if g.order not in used]
    return Pairing(mode, pairs, golden_only, _entry_reports(pairs, g_rows))


def _join(t_rows, t_keys, g_rows, g_keys) -> list[tuple[Row, Row | None]]:
    by_key: dict[str, Row] = {}
    for row, key in zip(g_rows, g_keys):
        by_key.setdefault(key, row)
    return [(row, by_key.get(key)) for row, key in zip(t_rows, t_keys)]


def _fuzzy(t_rows: list[Row], g_rows: list[Row]) -> list[tuple[Row, Row | None]]:
    """msprobe's two-queue alignment (``process_fuzzy_match`` / ``match_op``)."""
    t_names = [fuzzy_name(r.name) for r in t_rows]
    g_names = [fuzzy_name(r.name) for r in g_rows]
    out: list[tuple[Row, Row | None]] = []
    tq: list[int] = []
    gq: list[int] = []
    for i in range(max(len(t_rows), len(g_rows))):
        if i < len(t_rows):
            tq.append(i)
        if i < len(g_rows):
            gq.append(i)
        if bool(tq) ^ bool(gq):
            break
        t_at, g_at = _match_point(tq, gq, t_names, g_names)
        if t_at < 0:
            continue
        out.extend((t_rows[k], None) for k in tq[:t_at])
        out.append((t_rows[tq[t_at]], g_rows[gq[g_at]]))
        del tq[:t_at + 1], gq[:g_at + 1]
    done = {r.order for r, _ in out}
    # msprobe drops target rows left when one side runs out first; keep them, unpaired
    out.extend((r, None) for r in t_rows if r.order not in done)
    out.sort(key=lambda p: p[0].order)
    return out


def _match_point(tq, gq, t_names, g_names) -> tuple[int, int]:
    newest_t = t_names[tq[-1]]
    for k, g in enumerate(gq[:-1]):
        if newest_t == g_names[g]:
            return len(tq) - 1, k
    if newest_t == g_names[gq[-1]]:
        return len(tq) - 1, len(gq) - 1
    for k, t in enumerate(tq[:-1]):
        if t_names[t] == g_names[gq[-1]]:
            return k, len(gq) - 1
    return -1, -1


def _entry_reports(pairs: list[RowPair], g_rows: list[Row]) -> list[EntryReport]:
    golden_count: dict[str, int] = {}
    for g in g_rows:
        golden_count[g.entry.name] = golden_count.get(g.entry.name, 0) + 1
    reports: dict[str, EntryReport] = {}
    for p in pairs:
        rep = reports.get(p.target.entry.name)
        if rep is None:
            rep = reports[p.target.entry.name] = EntryReport(p.target.entry.name, [], 0, 0, 0)
        rep.rows += 1
        if p.golden is not None:
            rep.paired += 1
            if p.golden.entry.name not in rep.golden_entries:
                rep.golden_entries.append(p.golden.entry.name)
        if p.reason and p.golden is not None:
            rep.problems.append(f"{p.target.name}: {p.reason}")
        elif p.golden is None and p.reason != "no golden row":
            rep.problems.append(f"{p.target.name}: {p.reason}")
    for rep in reports.values():
        rep.golden_rows = golden_count.get(rep.golden_entries[0], 0) if rep.golden_entries else 0
        if rep.golden_entries and rep.golden_rows != rep.rows:
            rep.problems.append(f"{rep.rows} rows vs {rep.golden_rows} in golden {rep.golden_entries[0]}")
        if not rep.golden_entries:
            rep.problems.append("no golden entry")
    return list(reports.values())


# --- msprobe's data_mapping yaml ------------------------------------------------------------------

def read_data_mapping(path: str | os.PathLike) -> dict[str, str]:
    """A ``data_mapping`` yaml (``target_name: golden_name`` per line) read without PyYAML: the
    flat block-mapping subset such files use (plain, 'single' or "double" quoted scalars,
    ``#`` comments, an optional ``---``). Anything else is a FormatError naming the line."""
    path = os.fspath(path)
    # a regular file of at most 64 MB: a FIFO, a device or a folder is one line, never a hang
    lines = read_text_input(path, "data_mapping", 64 << 20, "utf-8-sig").splitlines()
    mapping: dict[str, str] = {}
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith("#") or line in ("---", "..."):
            continue
        if raw[:1].isspace():
            raise FormatError(path, f"line {number}: nested value; a data_mapping is flat "
                                    f"'target_name: golden_name' lines")
        key, rest = _scalar(line, path, number)
        rest = rest.lstrip()
        if not rest.startswith(":"):
            raise FormatError(path, f"line {number}: expected 'target_name: golden_name'")
        value, tail = _scalar(rest[1:].strip(), path, number)
        if tail.strip() and not tail.strip().startswith("#"):
            raise FormatError(path, f"line {number}: unexpected text after the value")
        if not key:
            raise FormatError(path, f"line {number}: empty target name")
        if not value:
            raise FormatError(path, f"line {number}: no golden name (a data_mapping is flat "
                                    f"'target_name: golden_name' lines)")
        if key in mapping:
            raise FormatError(path, f"line {number}: {key!r} mapped twice")
        mapping[key] = value
    return mapping


def _scalar(text: str, path: str, number: int) -> tuple[str, str]:
    """(scalar, rest of the text) for a quoted or plain scalar at the start of ``text``."""
    if text[:1] in ("'", '"'):
        quote = text[0]
        end = text.find(quote, 1)
        while quote == "'" and end != -1 and text[end + 1:end + 2] == "'":
            end = text.find(quote, end + 2)      # '' is an escaped quote in single-quoted yaml
        if end == -1:
            raise FormatError(path, f"line {number}: unclosed quote")
        body = text[1:end]
        if quote == "'":
            body = body.replace("''", "'")
        elif "\\" in body:
            raise FormatError(path, f"line {number}: escapes in double quotes are not supported")
        return body, text[end + 1:]
    # a plain scalar ends at ': ' (key) or at ' #' (comment) or at the end
    m = re.match(r"(.*?)(?=:\s|:$| #|$)", text)
    value = m.group(1).rstrip()
    if value[:1] in "[{&*!|>%@`" and value:
        raise FormatError(path, f"line {number}: {value[:1]!r} (flow, anchor, tag or block "
                                f"scalar) is not supported in a data_mapping")
    return value, text[m.end():]
