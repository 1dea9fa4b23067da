"""What changed inside two folded config values: read again, only where their digests differ.

A config past FOLD_AT keys is folded as it is read (checkpoint/fold.py): a side keeps its
count and one digest per bucket of keys (or run of list elements), not its items. Two such
values that differ show as two cut values; here the buckets whose digests differ (the first
MAX_LOOKED of them) are read again from both pickles and compared key by key, so the change
says `param_17: value-17 → changed` as it would of a value kept whole. Values are rendered
and redacted as inspect renders a config.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from envlock.base.secrets import redact_config, redact_value
from envlock.checkpoint.digest import CUT
from envlock.checkpoint.fold import CHUNK, MAX_LOOKED, Fold, differing_parts, entries, remembered
from envlock.checkpoint.summary import plain
from envlock.checkpoint.tree import key_text
from envlock.runs.diff_types import Change, Group
from envlock.runs.diff_values import MAX_PATHS, Inside, walk

__all__ = ["inside_of", "remembered", "with_folds_named"]


def with_folds_named(groups: list[Group], folds: dict[str, Fold]) -> list[Group]:
    """`groups` with each change between two folded values saying what changed inside."""
    if not folds:
        return groups
    return [replace(g, changes=tuple(_named(c, folds) for c in g.changes)) for g in groups]


def _named(change: Change, folds: dict[str, Fold]) -> Change:
    a, b = _fold_of(change.a, folds), _fold_of(change.b, folds)
    if a is None or b is None:
        return change
    return replace(change, inside=inside_of(a, b))


def _fold_of(value: Any, folds: dict[str, Fold]) -> Fold | None:
    found = CUT.match(value) if isinstance(value, str) else None
    return folds.get(found.group("digest") or "") if found else None


def inside_of(a: Fold, b: Fold) -> Inside:
    """The keys or indices that differ between two folds, read again from their pickles."""
    grown = 0 if a.is_dict else b.count - a.count
    if a.is_dict != b.is_dict:
        return Inside([], 0, f"type {a.kind} → {b.kind}")
    differing = differing_parts(a, b)
    if not a.is_dict:  # runs wholly past the shorter list are its growth, counted as such
        differing = [i for i in differing if i * CHUNK < min(a.count, b.count)]
    looked = set(differing[:MAX_LOOKED])
    read_a, read_b = entries(a, looked), entries(b, looked)
    if read_a is None or read_b is None:
        return Inside([], grown, "which items changed could not be read again")
    ea, eb = _rendered(a, read_a), _rendered(b, read_b)
    found = _compared(a.is_dict, ea, eb)
    return Inside(found, grown, _note(a, b, len(differing), len(looked), bool(found)))


def _note(a: Fold, b: Fold, differing: int, looked: int, found: bool) -> str:
    """What the change's line adds: what was not read again, or why nothing is named."""
    unit = "groups of keys" if a.is_dict else "runs of elements"
    notes = [f"type {a.kind} → {b.kind}"] if a.kind != b.kind else []
    if differing > looked:
        more = f"{differing - looked:,} more {unit} differ, not read again"
        notes.append(
            more if found else f"no item differs in the {looked} {unit} read again; {more}"
        )
    elif not found and a.is_dict and a.count == b.count and a.kind == b.kind:
        notes.append(f"the same {a.count:,} keys and values, read in another order")
    return "; ".join(notes)


def _rendered(fold: Fold, found: list[tuple[Any, Any]]) -> dict[Any, Any]:
    if fold.is_dict:
        return {key_text(k): redact_value(key_text(k), plain(v)) for k, v in found}
    return {index: redact_config(plain(v)) for index, v in found}


def _compared(is_dict: bool, a: dict[Any, Any], b: dict[Any, Any]) -> list[tuple[str, Any, Any]]:
    found: list[tuple[str, Any, Any]] = []
    for key in sorted(set(a) | set(b)):
        if len(found) >= MAX_PATHS:
            break
        where = str(key) if is_dict else f"[{key}]"
        if key in a and key in b:
            walk(a[key], b[key], where, found, MAX_PATHS)
        elif is_dict:  # a key on one side only; a list's extra elements are counted as grown
            found.append((where, a.get(key), b.get(key)))
    return found
