"""`envlock plan PROFILE`: what apply would do, from the lock and the target's state."""

from __future__ import annotations

import sys

import click

from envlock import ui
from envlock.apply import check, open_context
from envlock.commands.common import (
    drift_table,
    json_option,
    plan_json,
    print_plan,
    profile_argument,
)
from envlock.errors import EXIT_DRIFT
from envlock.plan import make_plan
from envlock.provision import check_container, has_container


@click.command("plan")
@profile_argument
@json_option
def command(profile: str, as_json: bool) -> None:
    """Show what `envlock apply` would do (exit 1 when there is something to do)."""
    ctx = open_context(profile)
    container = check_container(ctx.profile) if has_container(ctx.profile) else None
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
    state, drifts = check(ctx)
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
