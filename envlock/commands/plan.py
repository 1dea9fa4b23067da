"""`envlock plan PROFILE`: what apply would do, from the lock and the target's state.

One value per run (PDM's shape): `plan_of(ctx)` returns a `PlanResult`; the text renderer,
the --json document and a fleet member's row are all read from it, so they cannot disagree.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import click

from envlock import ui
from envlock.base.drift_kinds import Drift
from envlock.commands.common import (
    across_fleet,
    drift_table,
    json_option,
    plan_json,
    print_plan,
    with_context,
)
from envlock.converge.fleet import MemberResult, Progress
from envlock.errors import EXIT_DRIFT
from envlock.reconcile.context import Context, check, check_container
from envlock.reconcile.plan import Plan, make_plan
from envlock.reconcile.state import State

KIND = "plan"
NOT_RUNNING = "container not running"


@dataclass(frozen=True)
class PlanResult:
    """What apply would do: the container's changes, then the environment's plan (None
    while the container does not run: the inside is planned once it runs)."""

    container: tuple[Drift, ...]
    plan: Plan | None = None
    drifts: tuple[Drift, ...] = ()
    state: State | None = None

    @property
    def pending(self) -> bool:
        return self.plan is None or not self.plan.empty or bool(self.container)

    @property
    def code(self) -> int:
        return EXIT_DRIFT if self.pending else 0

    def to_json(self) -> dict[str, Any]:
        steps = {"container": [d.to_json() for d in self.container]}
        if self.plan is None:
            return {**steps, "actions": [], "reason": NOT_RUNNING}
        return {**steps, **plan_json(self.plan), "drift": [d.to_json() for d in self.drifts]}

    def member(self) -> MemberResult:
        """A fleet member's row: the same value, summed up."""
        if self.plan is None:
            return MemberResult(
                EXIT_DRIFT, NOT_RUNNING, drift=len(self.container), data=self.to_json()
            )
        gen = self.state.current_generation if self.state else None
        todo = len(self.plan.actions) + len(self.container)
        return MemberResult(
            self.code,
            f"{todo} to do" if self.pending else "nothing to do",
            generation=gen.number if gen else None,
            lock=gen.lock_hash if gen else "",
            hold=self.state is not None and self.state.hold is not None,
            drift=len(self.drifts) + len(self.container),
            data=self.to_json(),
        )


def plan_of(ctx: Context) -> PlanResult:
    """The one producer of a plan's result (a single target's, or one fleet member's)."""
    container = check_container(ctx)
    steps = tuple(container.drifts) if container else ()
    if container is not None and not container.running:
        return PlanResult(steps)
    state, drifts = check(ctx, hold=False)  # a plan always returns to the profile's lock
    plan = make_plan(ctx.expectation(), state, drifts)
    return PlanResult(steps, plan, tuple(drifts), state)


def render_text(result: PlanResult) -> None:
    if result.container or result.plan is None:
        ui.out.print(f"[bold]container: {len(result.container)} change(s)[/]")
        ui.table(drift_table(list(result.container)))
    if result.plan is None:
        ui.out.print("then: converge the environment inside once the container runs")
        return
    print_plan(result.plan)


def plan_member(ctx: Context, progress: Progress, *, as_json: bool) -> MemberResult:
    """plan on one fleet member: each step as a progress line, counted in the summary."""
    result = plan_of(ctx)
    for d in result.container:
        progress(f"container: {d.kind} {d.subject}: {d.expected} → {d.actual}")
    for index, action in enumerate(result.plan.actions if result.plan else (), 1):
        progress(f"{index}. {action.description}")
    return result.member()


@click.command("plan")
@with_context()
@across_fleet(plan_member, command="plan")
@json_option
def command(ctx: Context, as_json: bool) -> None:
    """Show what `envlock apply` would do (exit 1 when there is something to do)."""
    result = plan_of(ctx)
    if as_json:
        ui.emit_json(KIND, result.to_json())
    else:
        render_text(result)
    sys.exit(result.code)
