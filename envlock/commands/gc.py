"""`envlock gc PROFILE --keep K`: remove old generations (never the active or previous).

Like apply, add and remove it shows what it would remove and asks first (`-y` skips the
question, `--dry-run` only lists); on a fleet profile `--on VMID` picks the member."""

from __future__ import annotations

import sys

import click

from envlock import ui
from envlock.commands.common import (
    across_fleet,
    json_option,
    plan_json,
    print_plan,
    with_context,
)
from envlock.errors import EXIT_USAGE
from envlock.reconcile.context import Context, gather_state
from envlock.reconcile.execute import execute
from envlock.reconcile.generations import plan_gc
from envlock.reconcile.plan import Plan


@click.command("gc")
@with_context(allow_stale=True)
@across_fleet(None, command="gc", one=True)
@click.option(
    "--keep",
    default=3,
    show_default=True,
    type=click.IntRange(min=0),
    help="How many of the newest generations to keep.",
)
@click.option("--dry-run", is_flag=True, help="List what would be removed; remove nothing.")
@click.option("-y", "--yes", is_flag=True, help="Do not ask before removing.")
@json_option
def command(ctx: Context, keep: int, dry_run: bool, yes: bool, as_json: bool) -> None:
    """Remove old generations; the active and the previous one always stay."""
    plan = plan_gc(gather_state(ctx), keep)
    if plan.empty or dry_run:
        show(plan, dry_run=dry_run, as_json=as_json)
        return
    if not as_json:
        print_plan(plan)
    confirm(yes, plan)
    answer = execute(ctx, plan, on_progress=None if as_json else ui.info)
    freed = int(answer.get("freed", 0))
    if as_json:
        ui.emit_json("gc", {**plan_json(plan), "freed_bytes": freed})
    else:
        ui.out.print(f"[green]✓[/] removed {', '.join(doomed(plan))}: {ui.size(freed)} freed")


def doomed(plan: Plan) -> list[str]:
    return [str(name) for name in plan.actions[0].args["names"]] if plan.actions else []


def show(plan: Plan, *, dry_run: bool, as_json: bool) -> None:
    """Nothing to remove, or (--dry-run) what would be: exit 0 either way."""
    if as_json:
        ui.emit_json("gc", {**plan_json(plan), "freed_bytes": 0, "dry_run": dry_run})
    elif plan.empty:
        print_plan(plan)
    else:
        ui.out.print(f"would remove {len(doomed(plan))} generation(s): {', '.join(doomed(plan))}")
        ui.info("dry run: nothing removed")


def confirm(yes: bool, plan: Plan) -> None:
    """Ask, as apply does; without a terminal to ask on, refuse and say how to go on."""
    # Here: only a gc that removes something needs apply's question.
    from envlock.commands.apply import confirm as ask

    if yes or sys.stdin.isatty():
        ask(yes, f"remove {len(doomed(plan))} generation(s)?")
        return
    ui.error(
        "refusing to remove generations without confirmation (stdin is not a terminal): "
        "pass -y to remove them, or --dry-run to only list them"
    )
    sys.exit(EXIT_USAGE)
