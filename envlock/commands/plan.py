"""`envlock plan PROFILE`: what apply would do, from the lock and the target's state."""

from __future__ import annotations

import sys

import click

from envlock import ui
from envlock.commands.common import drift_table, json_option, plan_json, print_plan, with_context
from envlock.errors import EXIT_DRIFT
from envlock.reconcile.context import Context, check, check_container
from envlock.reconcile.plan import make_plan


@click.command("plan")
@with_context()
@json_option
def command(ctx: Context, as_json: bool) -> None:
    """Show what `envlock apply` would do (exit 1 when there is something to do)."""
    container = check_container(ctx)
    steps = [d.to_json() for d in container.drifts] if container else []
    if container is not None and not container.running:
        # The environment inside is planned once the container runs.
        if as_json:
            ui.emit_json({"container": steps, "actions": [], "reason": "container not running"})
        else:
            ui.out.print(f"[bold]container: {len(steps)} change(s)[/]")
            ui.out.print(drift_table(list(container.drifts)))
            ui.out.print("then: converge the environment inside once the container runs")
        sys.exit(EXIT_DRIFT)
    state, drifts = check(ctx, hold=False)  # a plan always returns to the profile's lock
    plan = make_plan(ctx.expectation(), state, drifts)
    if as_json:
        ui.emit_json(
            {"container": steps, **plan_json(plan), "drift": [d.to_json() for d in drifts]}
        )
    else:
        if container is not None and container.drifts:
            ui.out.print(f"[bold]container: {len(steps)} change(s)[/]")
            ui.out.print(drift_table(list(container.drifts)))
        print_plan(plan)
    sys.exit(0 if plan.empty and not steps else EXIT_DRIFT)
