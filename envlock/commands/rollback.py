"""`envlock rollback PROFILE`: back to the previous generation, or re-sync the active one."""

from __future__ import annotations

import time

import click

from envlock import ui
from envlock.commands.common import json_option, plan_json, print_plan, with_context
from envlock.errors import UsageError
from envlock.reconcile.context import Context, check, gather_state
from envlock.reconcile.execute import execute, verify_after
from envlock.reconcile.kinds import Drift
from envlock.reconcile.plan import Plan, plan_rollback, repair_action
from envlock.reconcile.state import State


@click.command("rollback")
@with_context(allow_stale=True)
@click.option("--to", "to", type=int, metavar="N", help="Generation number to switch to.")
@click.option(
    "--resync",
    is_flag=True,
    help="Restore the active generation's content from its own lock instead.",
)
@click.option(
    "--container",
    "container_snapshot",
    is_flag=False,
    flag_value="",
    default=None,
    metavar="[SNAPSHOT]",
    help="Roll the LXC container back through the Proxmox API to SNAPSHOT "
    "(default: the newest envlock snapshot).",
)
@json_option
def command(
    ctx: Context, to: int | None, resync: bool, container_snapshot: str | None, as_json: bool
) -> None:
    """Switch back to the previous generation (milliseconds), or --resync the active one."""
    started = time.perf_counter()
    if container_snapshot is not None:
        provisioner = ctx.provisioner
        if provisioner is None:
            raise UsageError("--container needs a proxmox-lxc target with a [container] table")
        name = provisioner.rollback(container_snapshot or None, None if as_json else ui.info)
        if as_json:
            ui.emit_json({"container_snapshot": name})
        else:
            ui.out.print(f"[green]✓[/] {provisioner.describe()} rolled back to snapshot {name}")
        return
    if resync:
        state, drifts = check(ctx)
        plan = resync_plan(state, drifts)
    else:
        # A switch needs only the generations and their history: no file verification.
        state = gather_state(ctx, verify=False)
        plan = plan_rollback(state, to)
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


def resync_plan(state: State, drifts: list[Drift]) -> Plan:
    active = state.current_generation
    if active is None or not active.complete:
        raise UsageError("no active generation to re-sync", hint="run `envlock apply` first")
    action = repair_action(active, drifts)
    if action is None:
        return Plan((), f"generation {active.number} already matches its lock")
    return Plan((action,))
