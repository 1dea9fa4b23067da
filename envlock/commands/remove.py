"""`envlock remove PROFILE NAME…`: `envlock add` in reverse (torch itself is refused)."""

from __future__ import annotations

import sys

import click

from envlock import ui
from envlock.commands.common import profile_argument
from envlock.commands.guarded import ChangeResult, change_of, guarded_options, render_text
from envlock.profile.edit import remove_requirements

KIND = "remove"
# The result is guarded.py's, shared with the other command; named here beside its producer.
__all__ = ["ChangeResult", "command"]


@click.command("remove")
@profile_argument
@click.argument("names", nargs=-1, required=True, metavar="NAME…")
@guarded_options
def command(
    profile: str,
    names: tuple[str, ...],
    dry_run: bool,
    yes: bool,
    allow_torch_change: bool,
    as_json: bool,
) -> None:
    """Remove NAME… from the profile's package lists, resolve, show, then lock and apply."""
    result = change_of(
        profile,
        lambda text: remove_requirements(text, list(names)),
        [],
        dry_run=dry_run,
        yes=yes,
        allow_torch_change=allow_torch_change,
        as_json=as_json,
    )
    if as_json:
        ui.emit_json(KIND, result.to_json())
    else:
        render_text(result)
    sys.exit(result.code)
