"""A changed list or dict shown by what changed in it, not whole on both sides.

`train_files: [17]: a.bin → b.bin; 60,000 added` instead of two 300 KB lines: the paths
inside the value that differ (index or key), the first few said with their two values, each
value cut at SHOWN_CHARS, the rest counted. The JSON carries every path (up to MAX_PATHS).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from envlock.base.limits import MAX_JSON_ENTRIES, printable
from envlock.checkpoint.digest import CUT_TEXT

SHOWN_PATHS = 3  # paths said in a change's line; the rest counted
SHOWN_CHARS = 120  # characters of one value said in a line
MAX_PATHS = MAX_JSON_ENTRIES  # paths a change carries in --json
WHOLE_CHARS = 2_000  # a value whose JSON is longer is not repeated whole in --json


@dataclass(frozen=True)
class Inside:
    """What changed inside a value diff_folds.py read again (a config folded as it was read:
    only its two digests were kept), said as `changed_paths` says it of a whole value."""

    found: list[tuple[str, Any, Any]]  # (path, a's value, b's value), bounded
    grown: int  # elements B has past A's length (a list)
    note: str = ""  # what was not read again, or why nothing could be named


def is_composite(value: Any) -> bool:
    return isinstance(value, list | dict)


def changed_paths(a: Any, b: Any, limit: int = MAX_PATHS) -> tuple[list[tuple[str, Any, Any]], int]:
    """`[(path, a's value, b's value)]` of the leaves that differ (up to `limit`), and how
    many elements one side has past the other's length (a list grown or cut)."""
    found: list[tuple[str, Any, Any]] = []
    grown = walk(a, b, "", found, limit)
    return found, grown


def walk(a: Any, b: Any, path: str, found: list[tuple[str, Any, Any]], limit: int) -> int:
    if len(found) >= limit or a == b:
        return 0
    if isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            if len(found) >= limit:
                break
            walk(x, y, f"{path}[{i}]", found, limit)
        return len(b) - len(a)
    if isinstance(a, dict) and isinstance(b, dict):
        for key in list(dict.fromkeys([*a, *b])):
            if len(found) >= limit:
                break
            where = f"{path}.{key}" if path else str(key)
            if key not in a or key not in b:
                found.append((where, a.get(key), b.get(key)))
            else:
                walk(a[key], b[key], where, found, limit)
        return 0
    found.append((path, a, b))
    return 0


def said(value: Any) -> str:
    """One value for a line: JSON (a string as itself), cut at SHOWN_CHARS."""
    text = "—" if value is None else value if isinstance(value, str) else json.dumps(value)
    return printable(text, SHOWN_CHARS)


def excerpt(a: Any, b: Any, inside: Inside | None = None) -> str:
    """`[17]: a.bin → b.bin; 60,000 added` (plain text, not yet escaped for rich)."""
    found, grown = (inside.found, inside.grown) if inside else changed_paths(a, b)
    parts = [f"{p or '(value)'}: {said(x)} → {said(y)}" for p, x, y in found[:SHOWN_PATHS]]
    if len(found) > SHOWN_PATHS:
        more = f"{len(found) - SHOWN_PATHS:,}" + ("+" if len(found) >= MAX_PATHS else "")
        parts.append(f"{more} more changed")
    if grown:
        parts.append(f"{abs(grown):,} {'added' if grown > 0 else 'removed'}")
    if inside and inside.note:
        parts.append(inside.note)
    return "; ".join(parts) or "changed"


def bounded_json(value: Any) -> Any:
    """`value` for --json: whole, or, past WHOLE_CHARS of JSON, a description of it (the
    change's `paths` say what in it changed)."""
    if not is_composite(value):
        return value
    # More items than WHOLE_CHARS cannot fit: said without writing them all out first.
    if len(value) < WHOLE_CHARS and len(json.dumps(value)) <= WHOLE_CHARS:
        return value
    return f"<{type(value).__name__} of {len(value):,} items>"


def long_texts(a: Any, b: Any, limit: int) -> str | None:
    """Two long strings said from where they first differ: `…xxa → …xxb (from char
    149,999)`; None unless both are strings and one passes `limit`."""
    if not (isinstance(a, str) and isinstance(b, str)) or max(len(a), len(b)) <= limit:
        return None
    cut_a, cut_b = CUT_TEXT.search(a), CUT_TEXT.search(b)
    if cut_a and cut_b and a[: cut_a.start()] == b[: cut_b.start()]:
        # Alike as far as they were kept: what differs is in the part only digested.
        return (
            f"the first {cut_a.start():,} chars alike; the rest ({cut_a['more']} → "
            f"{cut_b['more']} chars) differs: sha256 {cut_a['digest'][:16]} → "
            f"{cut_b['digest'][:16]}"
        )
    at = next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )
    start = max(0, at - 20)
    lead = "…" if start else ""
    return (
        f"{lead}{printable(a[start : start + SHOWN_CHARS])} → "
        f"{lead}{printable(b[start : start + SHOWN_CHARS])} (from char {at:,})"
    )
