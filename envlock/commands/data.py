"""`envlock data PROFILE`: the fingerprint of each dataset the profile's [data] names."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any

import click

from envlock import ui
from envlock.commands.common import json_option, profile_argument
from envlock.errors import EXIT_USAGE, UsageError
from envlock.profile.read import load_profile
from envlock.profile.sources import PATH, requests

KIND = "data"


@dataclass(frozen=True)
class Fingerprint:
    """One dataset's fingerprint, as the agent's `data` answers it: nothing there
    (`missing`), a walk cut short (`incomplete`: counts, no digests), or counts and digests
    (`content_sha256` with --deep)."""

    path: str
    missing: bool
    incomplete: bool = False
    files: int = 0
    bytes: int = 0
    newest_mtime: float = 0.0
    listing_sha256: str = ""
    sample_sha256: str = ""
    content_sha256: str | None = None
    unreadable: int = 0
    unreadable_named: tuple[str, ...] = ()
    seconds: float = 0.0

    @classmethod
    def of(cls, raw: dict[str, Any]) -> Fingerprint:
        """The agent's answer, typed once at the edge."""
        return cls(
            raw["path"],
            bool(raw["missing"]),
            bool(raw.get("incomplete")),
            raw.get("files", 0),
            raw.get("bytes", 0),
            raw.get("newest_mtime", 0.0),
            raw.get("listing_sha256", ""),
            raw.get("sample_sha256", ""),
            raw.get("content_sha256"),
            raw.get("unreadable", 0),
            tuple(raw.get("unreadable_named", ())),
            raw.get("seconds", 0.0),
        )

    def to_json(self) -> dict[str, Any]:
        """The agent's fields, as it answered them (a variant's own keys only)."""
        head: dict[str, Any] = {"path": self.path, "missing": self.missing}
        if self.missing:
            return head
        counts = {"files": self.files, "bytes": self.bytes}
        if self.incomplete:
            return {**head, "incomplete": True, **counts, "seconds": self.seconds}
        digests = {
            "newest_mtime": self.newest_mtime,
            "listing_sha256": self.listing_sha256,
            "sample_sha256": self.sample_sha256,
            "unreadable": self.unreadable,
            "unreadable_named": list(self.unreadable_named),
        }
        if self.content_sha256 is not None:
            digests["content_sha256"] = self.content_sha256
        return {**head, **counts, **digests, "seconds": self.seconds}


@dataclass(frozen=True)
class DataResult:
    """Each dataset's fingerprint, by its name in [data]; a missing one fails (exit 2)."""

    deep: bool
    datasets: tuple[tuple[str, Fingerprint], ...]

    @property
    def code(self) -> int:
        return EXIT_USAGE if any(fp.missing for _, fp in self.datasets) else 0

    def to_json(self) -> dict[str, Any]:
        return {"deep": self.deep, "datasets": {n: fp.to_json() for n, fp in self.datasets}}


def data_of(profile: str, *, deep: bool, quiet: bool) -> DataResult:
    """The one producer of data's result: the agent fingerprints each dataset on the target."""
    from envlock.reconcile.agentcall import call_agent

    prof = load_profile(profile)
    if not prof.data:
        raise UsageError(
            f"{prof.path.name} names no datasets",
            hint=f"add a [data] table, e.g. {PATH.example}",
        )
    progress = not quiet and ui.shows_progress()  # a terminal's live line, or none at all
    request = {"datasets": requests(prof.data), "deep": deep, "progress": progress}
    with ui.status("fingerprinting the datasets", quiet=quiet):
        answer = call_agent(
            prof.target.transport(), prof.target.root, "data", request, on_progress=ui.info
        )
    datasets = answer["datasets"]
    return DataResult(deep, tuple((name, Fingerprint.of(fp)) for name, fp in datasets.items()))


def render_text(result: DataResult) -> None:
    for name, fp in result.datasets:
        ui.out.print(describe(name, fp))


@click.command("data")
@profile_argument
@click.option("--deep", is_flag=True, help="Digest every byte (slower), not only a sample.")
@json_option
def command(profile: str, deep: bool, as_json: bool) -> None:
    """Fingerprint the datasets in PROFILE's [data]: files, bytes, listing and content."""
    result = data_of(profile, deep=deep, quiet=as_json)
    if as_json:
        ui.emit_json(KIND, result.to_json())
    else:
        render_text(result)
    sys.exit(result.code)


def describe(name: str, fp: Fingerprint) -> str:
    esc = ui.escape
    if fp.missing:
        return f"[red]✗[/] {esc(name)}: {ui.untrusted(fp.path)} does not exist"
    newest = time.strftime("%Y-%m-%d %H:%M", time.gmtime(fp.newest_mtime))
    line = (
        f"{esc(name)}: {fp.files:,} files, {ui.size(fp.bytes)}, newest {newest} UTC; "
        f"listing {fp.listing_sha256[:12]}, sample {fp.sample_sha256[:12]}"
    )
    if fp.content_sha256 is not None:
        line += f", content {fp.content_sha256[:12]}"
    if fp.unreadable:
        named = ", ".join(ui.untrusted(str(n)) for n in fp.unreadable_named)
        line += f"\n  [yellow]{fp.unreadable} unreadable[/]: {named}"
    return line
