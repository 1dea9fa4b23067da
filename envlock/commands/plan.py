"""`envlock plan PROFILE`: what apply would do, from the lock and the target's state."""

from __future__ import annotations

import sys

import click

from envlock import ui
from envlock.apply import check, open_context
from envlock.commands.common import json_option, plan_json, print_plan, profile_argument
from envlock.errors import EXIT_DRIFT
from envlock.plan import make_plan


@click.command("plan")
@profile_argument
@json_option
def command(profile: str, as_json: bool) -> None:
    """Show what `envlock apply` would do (exit 1 when there is something to do)."""
    ctx = open_context(profile)
    state, drifts = check(ctx)
    plan = make_plan(ctx.expectation(), state, drifts)
    if as_json:
        ui.emit_json({**plan_json(plan), "drift": [d.to_json() for d in drifts]})
    else:
        print_plan(plan)
    sys.exit(0 if plan.empty else EXIT_DRIFT)
