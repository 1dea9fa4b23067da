"""The values a diff is made of: a `Change` (one key, its two values) and a `Group` of them
(torch build, packages, metrics, ...). Their own module, so that diff.py and diff_data.py,
which both build groups, import them from below instead of from each other."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from envlock.base.limits import MAX_JSON_ENTRIES


@dataclass(frozen=True)
class Change:
    key: str
    a: Any
    b: Any
    only_in: str = ""  # "a" or "b": the key exists on that side only
    also: tuple[str, ...] = ()  # other sources of the same value and change, not counted again

    @property
    def kind(self) -> str:
        if self.only_in == "b" or (not self.only_in and self.a is None):
            return "added"
        if self.only_in == "a" or (not self.only_in and self.b is None):
            return "removed"
        return "changed"


@dataclass(frozen=True)
class Group:
    name: str
    changes: tuple[Change, ...] = field(default_factory=tuple)
    note: str = ""
    counted: bool = True  # False: shown, but the sides do not differ for it (run paths)

    def bounded(self) -> Group:
        """The group with at most MAX_JSON_ENTRIES changes, the rest counted in its note."""
        if len(self.changes) <= MAX_JSON_ENTRIES:
            return self
        cut = f"{len(self.changes) - MAX_JSON_ENTRIES:,} more changes not shown"
        note = f"{self.note}; {cut}" if self.note else cut
        return Group(self.name, self.changes[:MAX_JSON_ENTRIES], note, self.counted)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "note": self.note,
            "counted": self.counted,
            "changes": [_change_json(c) for c in self.changes],
        }


def _change_json(c: Change) -> dict[str, Any]:
    found = {"key": c.key, "a": c.a, "b": c.b, "kind": c.kind}
    return {**found, "also": list(c.also)} if c.also else found
