"""`envlock plan PROFILE`: what apply would do, from the lock and the target's state."""

from __future__ import annotations

import sys
from typing import Any

import click

from envlock import ui
from envlock.commands.common import (
    across_fleet,
    drift_table,
    json_option,
    plan_json,
    print_plan,
    with_context,
)
from envlock.errors import EXIT_DRIFT
from envlock.fleet import MemberResult, Progress
from envlock.reconcile.context import Context, check, check_container
from envlock.reconcile.plan import make_plan


def plan_member(ctx: Context, progress: Progress, *, as_json: bool) -> MemberResult:
    """plan on one fleet member: each action as a progress line, counted in the summary."""
    container = check_container(ctx)
    steps = list(container.drifts) if container else []
    for d in steps:
        progress(f"container: {d.kind} {d.subject}: {d.expected} → {d.actual}")
    data: dict[str, Any] = {"container": [d.to_json() for d in steps]}
    if container is not None and not container.running:
        data.update(actions=[], reason="container not running")
        return MemberResult(EXIT_DRIFT, "container not running", drift=len(steps), data=data)
    state, drifts = check(ctx, hold=False)
    plan = make_plan(ctx.expectation(), state, drifts)
    for index, action in enumerate(plan.actions, 1):
        progress(f"{index}. {action.description}")
    gen = state.current_generation
    pending = not plan.empty or bool(steps)
    return MemberResult(
        EXIT_DRIFT if pending else 0,
        f"{len(plan.actions) + len(steps)} to do" if pending else "nothing to do",
        generation=gen.number if gen else None,
        lock=gen.lock_hash if gen else "",
        hold=state.hold is not None,
        drift=len(drifts) + len(steps),
        data={**data, **plan_json(plan), "drift": [d.to_json() for d in drifts]},
    )


@click.command("plan")
@with_context()
@across_fleet(plan_member, command="plan")
@json_option
def command(ctx: Context, as_json: bool) -> None:
    """Show what `envlock apply` would do (exit 1 when there is something to do)."""
    container = check_container(ctx)
    steps = [d.to_json() for d in container.drifts] if container else []
    if container is not None and not container.running:
        # The environment inside is planned once the container runs.
        if as_json:
            ui.emit_json(
                "plan", {"container": steps, "actions": [], "reason": "container not running"}
            )
        else:
            ui.out.print(f"[bold]container: {len(steps)} change(s)[/]")
            ui.out.print(drift_table(list(container.drifts)))
            ui.out.print("then: converge the environment inside once the container runs")
        sys.exit(EXIT_DRIFT)
    state, drifts = check(ctx, hold=False)  # a plan always returns to the profile's lock
    plan = make_plan(ctx.expectation(), state, drifts)
    if as_json:
        ui.emit_json(
            "plan", {"container": steps, **plan_json(plan), "drift": [d.to_json() for d in drifts]}
        )
    else:
        if container is not None and container.drifts:
            ui.out.print(f"[bold]container: {len(steps)} change(s)[/]")
            ui.out.print(drift_table(list(container.drifts)))
        print_plan(plan)
    sys.exit(0 if plan.empty and not steps else EXIT_DRIFT)
