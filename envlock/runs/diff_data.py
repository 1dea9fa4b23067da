"""What a run measured and what it read, compared: the `metrics` and `data` groups of a diff.

Metrics come first, as the symptom ("tok_per_s 20,000 → 11,600 (−42%)"); they are what the
runs reported, not a cause, so they do not count as a difference between the runs. The
`data` group compares dataset fingerprints by name ("train: 800,000 → 1,100,000 files
(+37.5%), 300.2 GB → 410.8 GB; listing changed; sample content changed"). Both come from
snapshots only; a lock has neither. The values in a Change stay data (numbers, the
fingerprints as recorded) for --json; `change_text` says them for people.
"""

from __future__ import annotations

from typing import Any

from envlock import ui
from envlock.profile.sources import kind_of_fingerprint
from envlock.runs.describe import Side
from envlock.runs.diff_types import Change, Group, SnapshotRecord

METRICS = "metrics"
DATA = "data"
METRICS_NOTE = "what each run measured: the symptom, not counted as a difference"


def with_metrics_and_data(a: Side, b: Side, groups: list[Group]) -> list[Group]:
    """`groups` with the metrics group first and the data group after what the run was told
    and how far it got (progress, else hyperparameters, else scripts or packages)."""
    if a.snapshot is None or b.snapshot is None:
        return groups
    names = [g.name for g in groups]
    after = next(
        (
            names.index(n) + 1
            for n in ("progress", "hyperparameters", "scripts", "packages")
            if n in names
        ),
        len(groups),
    )
    data = data_group(a.snapshot, b.snapshot)
    return [metrics_group(a.snapshot, b.snapshot), *groups[:after], data, *groups[after:]]


def metrics_group(a: SnapshotRecord, b: SnapshotRecord) -> Group:
    ma, mb = a.metrics, b.metrics
    changes = tuple(
        Change(name, ma.get(name), mb.get(name), one_side(name, ma, mb))
        for name in sorted(set(ma) | set(mb))
        if name not in ma or name not in mb or ma[name] != mb[name]
    )
    return Group(METRICS, changes, METRICS_NOTE, counted=False)


def data_group(a: SnapshotRecord, b: SnapshotRecord) -> Group:
    da, db = a.datasets, b.datasets
    if da is None or db is None:
        return Group(DATA)  # a snapshot of an older envlock recorded none: nothing to say
    changes = tuple(
        Change(name, da.get(name), db.get(name), one_side(name, da, db))
        for name in sorted(set(da) | set(db))
        if name not in da or name not in db or fingerprint_differs(da[name], db[name])
    )
    return Group(DATA, changes)


def one_side(name: str, a: dict[str, Any], b: dict[str, Any]) -> str:
    return "b" if name not in a else "a" if name not in b else ""


def fingerprint_differs(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two fingerprints say different data: the fields their kind compares (its
    path is where it was read), or two kinds."""
    kind = kind_of_fingerprint(a)
    if kind is not kind_of_fingerprint(b):
        return True
    return any(a.get(k) != b.get(k) for k in kind.compared)


# -- for people ----------------------------------------------------------------------------
def change_text(group: str, change: Change) -> str | None:
    """How a change of the metrics or data group reads (rich markup, untrusted parts
    escaped); None for the other groups, which the diff command says its own way."""
    if group == METRICS:
        if change.only_in:
            value = number(change.a if change.only_in == "a" else change.b)
            return f"{value} (only in {change.only_in.upper()})"
        return f"{number(change.a)} → {number(change.b)}{percent(change.a, change.b)}"
    if group == DATA:
        if change.only_in:
            fp = change.a if change.only_in == "a" else change.b
            return f"{dataset_summary(fp)} (only in {change.only_in.upper()})"
        return dataset_change(change.a, change.b)
    return None


def number(value: Any) -> str:
    """20000 → "20,000"; 0.0003 → "0.0003"; 2.5 → "2.5"."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return ui.untrusted(str(value))
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        value = int(value)
    if isinstance(value, int):
        return f"{value:,}"
    if abs(value) >= 1:
        return f"{value:,.3f}".rstrip("0").rstrip(".")
    return f"{value:.4g}"


def percent(a: Any, b: Any) -> str:
    """ " (−42%)", " (+37.5%)"; nothing when there is no meaningful ratio."""
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b))
    if not numeric or not a:
        return ""
    text = f"{(b - a) / abs(a) * 100:+.1f}".replace(".0", "").replace("-", "−")
    return f" ({text}%)"


def dataset_summary(fp: dict[str, Any] | None) -> str:
    """One side's fingerprint in a few words: "missing", "1,100 files, 410.8 GB"."""
    if not fp or fp.get("missing"):
        return f"{ui.untrusted(str((fp or {}).get('path', '')))} missing".strip()
    text = f"{fp.get('files', 0):,} files, {ui.size(fp.get('bytes') or 0)}"
    return text + (" (incomplete: time limit)" if fp.get("incomplete") else "")


def dataset_change(a: dict[str, Any], b: dict[str, Any]) -> str:
    """What differs between two fingerprints of one dataset, biggest first."""
    if a.get("missing") or b.get("missing") or a.get("incomplete") or b.get("incomplete"):
        return f"{dataset_summary(a)} → {dataset_summary(b)}"
    parts = []
    if a.get("files") != b.get("files"):
        parts.append(f"{a['files']:,} → {b['files']:,} files{percent(a['files'], b['files'])}")
    if a.get("bytes") != b.get("bytes"):
        parts.append(f"{ui.size(a['bytes'])} → {ui.size(b['bytes'])}")
    said = [", ".join(parts)] if parts else []
    for key, what in (
        ("listing_sha256", "listing changed"),
        ("sample_sha256", "sample content changed"),
        ("content_sha256", "content changed"),
    ):
        if key in a and key in b and a[key] != b[key]:
            said.append(what)
    if a.get("unreadable") != b.get("unreadable"):
        said.append(f"unreadable files {a.get('unreadable', 0):,} → {b.get('unreadable', 0):,}")
    return "; ".join(said) or "fingerprint changed"
