"""`envlock rollback PROFILE`: back to the previous generation, or re-sync the active one."""

from __future__ import annotations

import time

import click

from envlock import ui
from envlock.apply import check, execute, open_context, verify_after
from envlock.commands.common import json_option, plan_json, print_plan, profile_argument
from envlock.errors import UsageError
from envlock.plan import Plan, plan_rollback, repair_action
from envlock.state import State


@click.command("rollback")
@profile_argument
@click.option("--to", "to", type=int, metavar="N", help="Generation number to switch to.")
@click.option(
    "--resync",
    is_flag=True,
    help="Restore the active generation's content from its own lock instead.",
)
@json_option
def command(profile: str, to: int | None, resync: bool, as_json: bool) -> None:
    """Switch back to the previous generation (milliseconds), or --resync the active one."""
    started = time.perf_counter()
    ctx = open_context(profile, allow_stale=True)
    state, drifts = check(ctx)
    plan = resync_plan(state, drifts) if resync else plan_rollback(state, to)
    answer = execute(ctx, plan, on_progress=None if as_json else ui.info)
    if resync:
        verify_after(ctx)
    elapsed_ms = (time.perf_counter() - started) * 1000
    if as_json:
        ui.emit_json(
            {
                **plan_json(plan),
                "current": answer.get("current", state.current),
                "milliseconds": round(elapsed_ms, 1),
            }
        )
        return
    if plan.empty:
        print_plan(plan)
        return
    ui.out.print(f"[green]✓[/] generation {answer.get('current')} is active ({elapsed_ms:.0f} ms)")


def resync_plan(state: State, drifts: list) -> Plan:
    active = state.current_generation
    if active is None or not active.complete:
        raise UsageError("no active generation to re-sync", hint="run `envlock apply` first")
    action = repair_action(active, state, drifts)
    if action is None:
        return Plan((), f"generation {active.number} already matches its lock")
    return Plan((action,))
