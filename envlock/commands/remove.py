"""`envlock remove PROFILE NAME…`: `envlock add` in reverse (torch itself is refused)."""

from __future__ import annotations

import click

from envlock.commands.common import profile_argument
from envlock.commands.guarded import guarded_change, guarded_options
from envlock.profile_edit import remove_requirements


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
    guarded_change(
        profile,
        lambda text: remove_requirements(text, list(names)),
        [],
        dry_run=dry_run,
        yes=yes,
        allow_torch_change=allow_torch_change,
        as_json=as_json,
    )
