"""`envlock add PROFILE REQ…`: add packages the safe way. The profile's torch pin holds, the
change is shown before anything is written, and it lands in a new generation (the current
one stays one `envlock rollback` away)."""

from __future__ import annotations

import sys

import click

from envlock import ui
from envlock.commands.common import profile_argument
from envlock.commands.guarded import ChangeResult, change_of, guarded_options, render_text
from envlock.profile.edit import add_requirements

KIND = "add"
# The result is guarded.py's, shared with the other command; named here beside its producer.
__all__ = ["ChangeResult", "command"]


@click.command("add")
@profile_argument
@click.argument("requirements", nargs=-1, required=True, metavar="REQ…")
@guarded_options
def command(
    profile: str,
    requirements: tuple[str, ...],
    dry_run: bool,
    yes: bool,
    allow_torch_change: bool,
    as_json: bool,
) -> None:
    """Add REQ… to [dependencies] packages, resolve, show the change, then lock and apply."""
    added = list(requirements)
    result = change_of(
        profile,
        lambda text: add_requirements(text, added),
        added,
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
