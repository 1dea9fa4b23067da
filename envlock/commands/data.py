"""`envlock data PROFILE`: the fingerprint of each dataset the profile's [data] names."""

from __future__ import annotations

import sys
import time
from typing import Any

import click

from envlock import ui
from envlock.commands.common import json_option, profile_argument
from envlock.errors import EXIT_USAGE, UsageError
from envlock.profile import load_profile


@click.command("data")
@profile_argument
@click.option("--deep", is_flag=True, help="Digest every byte (slower), not only a sample.")
@json_option
def command(profile: str, deep: bool, as_json: bool) -> None:
    """Fingerprint the datasets in PROFILE's [data]: files, bytes, listing and content."""
    from envlock.reconcile.agentcall import call_agent

    prof = load_profile(profile)
    if not prof.data:
        raise UsageError(
            f"{prof.path.name} names no datasets",
            hint='add a [data] table, e.g. train = "/workspace/data/train"',
        )
    request = {"datasets": prof.data, "deep": deep, "progress": not as_json}
    with ui.status("fingerprinting the datasets", quiet=as_json):
        answer = call_agent(
            prof.target.transport(), prof.target.root, "data", request, on_progress=ui.info
        )
    datasets: dict[str, Any] = answer["datasets"]
    if as_json:
        ui.emit_json("data", {"deep": deep, "datasets": datasets})
    else:
        for name, fp in datasets.items():
            ui.out.print(describe(name, fp))
    if any(fp.get("missing") for fp in datasets.values()):
        sys.exit(EXIT_USAGE)


def describe(name: str, fp: dict[str, Any]) -> str:
    esc = ui.escape
    if fp.get("missing"):
        return f"[red]✗[/] {esc(name)}: {ui.untrusted(str(fp['path']))} does not exist"
    newest = time.strftime("%Y-%m-%d %H:%M", time.gmtime(fp["newest_mtime"]))
    line = (
        f"{esc(name)}: {fp['files']:,} files, {ui.size(fp['bytes'])}, newest {newest} UTC; "
        f"listing {fp['listing_sha256'][:12]}, sample {fp['sample_sha256'][:12]}"
    )
    if "content_sha256" in fp:
        line += f", content {fp['content_sha256'][:12]}"
    if fp["unreadable"]:
        named = ", ".join(ui.untrusted(str(n)) for n in fp["unreadable_named"])
        line += f"\n  [yellow]{fp['unreadable']} unreadable[/]: {named}"
    return line
