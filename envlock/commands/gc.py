"""`envlock gc PROFILE --keep K`: remove old generations (never the active or previous)."""

from __future__ import annotations

import click

from envlock import ui
from envlock.commands.common import json_option, plan_json, print_plan, with_context
from envlock.reconcile.context import Context, gather_state
from envlock.reconcile.execute import execute
from envlock.reconcile.generations import plan_gc


@click.command("gc")
@with_context(allow_stale=True)
@click.option(
    "--keep",
    default=3,
    show_default=True,
    type=click.IntRange(min=0),
    help="How many of the newest generations to keep.",
)
@json_option
def command(ctx: Context, keep: int, as_json: bool) -> None:
    """Remove old generations; the active and the previous one always stay."""
    plan = plan_gc(gather_state(ctx), keep)
    answer = execute(ctx, plan, on_progress=None if as_json else ui.info)
    freed = int(answer.get("freed", 0))
    if as_json:
        ui.emit_json("gc", {**plan_json(plan), "freed_bytes": freed})
    elif plan.empty:
        print_plan(plan)
    else:
        names = ", ".join(plan.actions[0].args["names"])
        ui.out.print(f"[green]✓[/] removed {names}: {ui.size(freed)} freed")
