"""The values a diff is made of: what it reads of a snapshot (`SnapshotRecord`, built once
from the document snapshot_schema.py validated), a `Change` (one key, its two values) and a
`Group` of them (torch build, packages, metrics, ...). Their own module, so that describe.py,
diff.py and diff_data.py import them from below instead of from each other."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from envlock.base.limits import MAX_JSON_ENTRIES
from envlock.runs.diff_values import Inside, bounded_json, changed_paths, is_composite


@dataclass(frozen=True)
class Change:
    key: str
    a: Any
    b: Any
    only_in: str = ""  # "a" or "b": the key exists on that side only
    also: tuple[str, ...] = ()  # other sources of the same value and change, not counted again
    inside: Inside | None = None  # what changed in two folded values (diff_folds.py)

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
    found = {"key": c.key, "a": bounded_json(c.a), "b": bounded_json(c.b), "kind": c.kind}
    if c.inside is not None:  # read again from two folded values: the paths found
        found["paths"] = [p for p, _, _ in c.inside.found]
        found["grown"] = c.inside.grown
        found["inside_note"] = c.inside.note
    elif is_composite(c.a) and is_composite(c.b):  # what inside it changed, every path
        paths, grown = changed_paths(c.a, c.b)
        found["paths"] = [p for p, _, _ in paths]
        found["grown"] = grown
    return {**found, "also": list(c.also)} if c.also else found


# -- a snapshot as a diff reads it ---------------------------------------------------------
@dataclass(frozen=True)
class RecordedTorch:
    """torch as the snapshot recorded it; all None when it recorded none."""

    version: str | None = None
    local: str | None = None
    has_local: bool = False  # False: no label recorded (the version's own label is shown)
    cuda: str | None = None
    cudnn: str | None = None

    @classmethod
    def of(cls, raw: dict[str, Any] | None) -> RecordedTorch:
        found = raw or {}
        return cls(
            version=found.get("version"),
            local=found.get("local"),
            has_local="local" in found,
            cuda=found.get("cuda"),
            cudnn=found.get("cudnn"),
        )


@dataclass(frozen=True)
class RecordedCache:
    """The compile cache as the run found it: its build fingerprint and how full it was."""

    fingerprint: str | None
    exists: bool
    files: int
    bytes: int

    @classmethod
    def of(cls, raw: dict[str, Any] | None) -> RecordedCache | None:
        if not raw:
            return None  # none recorded, or recorded empty: nothing to say about it
        return cls(
            fingerprint=(raw.get("fingerprint") or {}).get("id"),
            exists=bool(raw.get("exists")),
            files=raw.get("files") or 0,
            bytes=raw.get("bytes") or 0,
        )


@dataclass(frozen=True)
class RecordedGpu:
    name: str | None
    capability: str | None


@dataclass(frozen=True)
class SnapshotRecord:
    """What a diff reads of a snapshot, read once. Built from a validated document
    (snapshot_schema.py is the one validator): every field but `lock` is optional there, and
    one left out (or null) reads as nothing recorded."""

    packages: dict[str, str] = field(default_factory=dict)
    torch: RecordedTorch = RecordedTorch()
    scripts: dict[str, str | None] = field(default_factory=dict)  # path → sha256
    config: Any = None  # the run's config (None: none recorded)
    cache: RecordedCache | None = None
    gpus: tuple[RecordedGpu, ...] = ()
    driver: str | None = None
    python: str | None = None
    machine: str | None = None
    host: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    # None: no `datasets` at all (an older envlock), as against none read ({}).
    datasets: dict[str, dict[str, Any]] | None = None

    @classmethod
    def of(cls, doc: dict[str, Any]) -> SnapshotRecord:
        hardware = doc.get("hardware") or {}
        return cls(
            packages=dict(doc.get("packages") or {}),
            torch=RecordedTorch.of(doc.get("torch")),
            scripts=dict((doc.get("scripts") or {}).get("sha256") or {}),
            config=doc.get("config"),
            cache=RecordedCache.of(doc.get("cache")),
            gpus=tuple(
                RecordedGpu(g.get("name"), g.get("capability")) for g in hardware.get("gpus") or ()
            ),
            driver=hardware.get("driver"),
            python=doc.get("python"),
            machine=(doc.get("platform") or {}).get("machine"),
            host=(doc.get("host") or {}).get("hostname"),
            env=dict(doc.get("env") or {}),
            metrics=dict(doc.get("metrics") or {}),
            datasets=dict(doc["datasets"] or {}) if "datasets" in doc else None,
        )
