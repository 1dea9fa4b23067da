"""`envlock gc PROFILE --keep K`: remove old generations (never the active or previous)."""

from __future__ import annotations

import click

from envlock import ui
from envlock.apply import execute, gather_state, open_context
from envlock.commands.common import json_option, plan_json, print_plan, profile_argument
from envlock.plan import Action, Plan, previous_generation
from envlock.state import State


def gc_plan(state: State, keep: int) -> Plan:
    protected = {state.current}
    previous = previous_generation(state)
    if previous is not None:
        protected.add(previous.name)
    newest_first = sorted(state.generations, key=lambda g: g.number, reverse=True)
    kept = {g.name for g in [g for g in newest_first if g.complete][:keep]}
    doomed = [g.name for g in newest_first if g.name not in kept | protected]
    if not doomed:
        return Plan((), f"nothing to remove ({len(state.generations)} generation(s) kept)")
    return Plan(
        (
            Action(
                "cleanup",
                f"remove {len(doomed)} generation(s): {', '.join(doomed)}",
                {"names": doomed},
            ),
        )
    )


@click.command("gc")
@profile_argument
@click.option(
    "--keep",
    default=3,
    show_default=True,
    type=click.IntRange(min=0),
    help="How many of the newest generations to keep.",
)
@json_option
def command(profile: str, keep: int, as_json: bool) -> None:
    """Remove old generations; the active and the previous one always stay."""
    ctx = open_context(profile, allow_stale=True)
    plan = gc_plan(gather_state(ctx), keep)
    execute(ctx, plan, on_progress=None if as_json else ui.info)
    if as_json:
        ui.emit_json(plan_json(plan))
    else:
        print_plan(plan) if plan.empty else ui.out.print(
            f"[green]✓[/] {plan.actions[0].description}"
        )
