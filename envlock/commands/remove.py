"""`envlock remove PROFILE NAME…`: `envlock add` in reverse (torch itself is refused)."""

from __future__ import annotations

import click

from envlock.commands.common import profile_argument
from envlock.commands.guarded import guarded_change
from envlock.profile_edit import remove_requirements


@click.command("remove")
@profile_argument
@click.argument("names", nargs=-1, required=True, metavar="NAME…")
@click.option("--dry-run", is_flag=True, help="Show what would change; exit 1 if anything would.")
@click.option("-y", "--yes", is_flag=True, help="Do not ask before writing and applying.")
@click.option(
    "--allow-torch-change",
    is_flag=True,
    help="Accept changes to [torch] packages, triton or torch's CUDA libraries.",
)
def command(
    profile: str,
    names: tuple[str, ...],
    dry_run: bool,
    yes: bool,
    allow_torch_change: bool,
) -> None:
    """Remove NAME… from the profile's package lists, resolve, show, then lock and apply."""
    guarded_change(
        profile,
        lambda text: remove_requirements(text, list(names)),
        [],
        dry_run=dry_run,
        yes=yes,
        allow_torch_change=allow_torch_change,
    )
