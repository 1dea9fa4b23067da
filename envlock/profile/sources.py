"""[data] sources, one row per kind: what a dataset a run reads is, and how each command
that reads [data] treats it.

A `[data]` entry is a `DataSource` of a kind in KINDS. A kind says which TOML values are
its own, how one is checked (`read`, through the profile's table so that a mistake names
its line), what the agent on the target is sent to fingerprint it (`wire`: `envlock data`,
a snapshot's fingerprints, and the run context envlock.snapshot() reads inside a run), and
which fields of its fingerprint say what the data holds (`compared`: diff). Today's one
kind is a path on the target: a file, a directory or a glob, sent as its text.

Profile reading (profile/read.py), `envlock data`, snapshots (runs/snapshot.py,
runs/environment.py) and diff (runs/diff_data.py) read this table; tests/cli/test_data.py
walks every row. To add a kind: a row here with its example; when its wire value is not a
path's text, a fingerprint for it on the target (agent/dataset.py), keyed by its "kind".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from envlock.agent.datanames import DATA_NAME
from envlock.base.tomlread import Table

# The profile's rule for a path on the target (absolute there; a local one from the
# profile's directory), applied to the value at `key` of the table being read.
TargetPath = Callable[[str], str]


@dataclass(frozen=True)
class DataSource:
    """One [data] entry: its kind (a row of KINDS) and where the kind finds the data."""

    kind: str
    where: str  # for "path": a file, directory or glob on the target

    def wire(self) -> Any:
        """What the agent is sent to fingerprint it (JSON)."""
        return KINDS[self.kind].wire(self)


@dataclass(frozen=True)
class SourceKind:
    name: str
    accepts: Callable[[Any], bool]  # whether a [data] TOML value is of this kind
    read: Callable[[Table, str, TargetPath], DataSource]  # the value at `key`, checked
    wire: Callable[[DataSource], Any]
    compared: tuple[str, ...]  # the fingerprint's fields that say what the data holds
    example: str  # a [data] line of this kind, for hints and tests


def _read_path(t: Table, key: str, target_path: TargetPath) -> DataSource:
    return DataSource("path", target_path(key))


PATH = SourceKind(
    "path",
    accepts=lambda value: isinstance(value, str),
    read=_read_path,
    wire=lambda source: source.where,
    # Its path is where it was read, and newest_mtime is part of the listing.
    compared=(
        "missing", "incomplete", "files", "bytes", "listing_sha256", "sample_sha256",
        "content_sha256", "unreadable",
    ),
    example='train = "/workspace/data/train"',
)  # fmt: skip
KINDS: dict[str, SourceKind] = {kind.name: kind for kind in (PATH,)}


def kind_of_value(value: Any) -> SourceKind:
    """The kind a [data] value is; a value no kind accepts is read as a path (whose
    check says what a path must be)."""
    return next((kind for kind in KINDS.values() if kind.accepts(value)), PATH)


def kind_of_fingerprint(fingerprint: Mapping[str, Any]) -> SourceKind:
    """The kind a recorded fingerprint is of: a path's records none (the first kind)."""
    return KINDS.get(str(fingerprint.get("kind", PATH.name)), PATH)


def read_sources(t: Table, target_path: TargetPath) -> dict[str, DataSource]:
    """[data] name = value: each name a dataset name, each value a source of its kind."""
    data: dict[str, DataSource] = {}
    for key in list(t.data):
        if not DATA_NAME.fullmatch(key):
            t.fail(key, 'expected a dataset name (letters, digits, "-" and "_")')
        data[key] = kind_of_value(t.data[key]).read(t, key, target_path)
    t.finish()
    return data


def requests(data: Mapping[str, DataSource]) -> dict[str, Any]:
    """{name: what the agent is sent} of a profile's [data]."""
    return {name: source.wire() for name, source in data.items()}


def paths(named: Mapping[str, str]) -> dict[str, DataSource]:
    """{name: path} a script names (`envlock.snapshot(data=…)`) as sources."""
    return {name: DataSource(PATH.name, path) for name, path in named.items()}
