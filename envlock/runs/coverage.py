"""What a diff compared: "identical" is a statement about coverage.

Each side says what it covers (describe.py builds the `Side`); this module says, for the two
together, what was compared whole (the environment, tensor keys with dtypes and shapes, every
config value shown whole), what by digest (a config value cut by a budget, a file no reader
parses, tensor contents under --weights), and what was not compared, with why (tensor values
without --weights). A value that could be neither shown whole nor digested is not compared:
the comparison is then incomplete (exit 3, named), never "identical".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from envlock.base.limits import MAX_JSON_ENTRIES
from envlock.checkpoint.digest import cut_digest
from envlock.runs.describe import Side

WEIGHTS_HINT = "not read without --weights"


@dataclass(frozen=True)
class Coverage:
    """What both sides of a diff covered, and how."""

    whole: tuple[str, ...]  # what was compared value by value: "metadata", "configs", ...
    by_digest: tuple[str, ...]  # config keys and files compared by a digest of all of them
    not_compared: tuple[tuple[str, str], ...]  # (what, why): never counted as equal
    unread: tuple[str, ...]  # values neither shown whole nor digested: incomplete
    hashed: int | None = None  # tensors whose contents were compared (--weights)

    def to_json(self) -> dict[str, Any]:
        return {
            "whole": list(self.whole),
            "by_digest": list(self.by_digest[:MAX_JSON_ENTRIES]),
            "not_compared": [{"what": w, "why": y} for w, y in self.not_compared],
            "tensors_hashed": self.hashed,
        }

    def headline(self) -> str:
        """What an equal result compared, in words: "metadata and configs; tensor values
        not compared — `--weights`"."""
        compared = list(self.whole)
        if self.hashed is not None:
            compared.append(f"tensor values ({self.hashed:,} tensors hashed)")
        if self.by_digest:
            compared.append(f"{len(self.by_digest):,} value(s) by digest")
        text = "identical" + (f" in {_and(compared)}" if compared else "")
        for what, why in self.not_compared:
            text += f"; {what} not compared" + (" — `--weights`" if why == WEIGHTS_HINT else "")
        return text


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def coverage(a: Side, b: Side, weights: bool) -> Coverage:
    """What comparing `a` with `b` covers."""
    whole: list[str] = []
    not_compared: list[tuple[str, str]] = []
    if a.snapshot is not None and b.snapshot is not None:
        whole.append("environment")
    elif a.lock is not None or b.lock is not None or a.snapshot or b.snapshot:
        whole.append("packages")
    both = a.checkpoint is not None and b.checkpoint is not None
    if both:
        whole.append("metadata")
    if a.is_run and b.is_run:
        whole.append("configs")
    if both and (a.state() or b.state()):
        whole.append("training state")
    cut_a, cut_b = _cut_values(a, "A"), _cut_values(b, "B")
    files = _digested_files(a) | _digested_files(b)
    hashed = None
    if both and weights:
        da, db = a.checkpoint.digests or {}, b.checkpoint.digests or {}  # type: ignore[union-attr]
        hashed = sum(1 for k in da if k in db)
    elif both:
        not_compared.append(("tensor values", WEIGHTS_HINT))
    for side in (a, b):
        not_compared += [(f"file {n}", why) for n, why in side.files_not_compared]
    by_digest = tuple(sorted(cut_a[0] | cut_b[0] | files))
    unread = cut_a[1] + cut_b[1]
    return Coverage(tuple(whole), by_digest, tuple(dict.fromkeys(not_compared)), unread, hashed)


def _cut_values(side: Side, name: str) -> tuple[set[str], tuple[str, ...]]:
    """Config and training-state keys whose value was cut and digested, and those cut
    without a digest."""
    digested: set[str] = set()
    unread: list[str] = []
    for key, value in {**side.config(), **side.state()}.items():
        is_cut, has_digest = cut_digest(value)
        if has_digest:
            digested.add(key)
        elif is_cut:
            unread.append(f"{name}: config value {key}: {value}")
    return digested, tuple(unread)


def _digested_files(side: Side) -> set[str]:
    return {f"file {k}" for k in (side.file_digests or {})}
