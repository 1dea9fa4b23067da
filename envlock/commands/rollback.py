"""`envlock rollback PROFILE`: back to the previous generation, or re-sync the active one."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from envlock import ui
from envlock.commands.common import (
    across_fleet,
    json_option,
    plan_json,
    print_plan,
    with_context,
)
from envlock.errors import UsageError
from envlock.reconcile.context import Context, gather_state, own_context
from envlock.reconcile.drift import compute_drift
from envlock.reconcile.execute import execute, verify_after
from envlock.reconcile.generations import plan_rollback
from envlock.reconcile.kinds import Drift
from envlock.reconcile.plan import Plan, repair_action
from envlock.reconcile.state import State

if TYPE_CHECKING:
    # A fleet's code loads only for a fleet profile: one target's rollback never pays for it.
    from envlock.fleet import MemberResult, Progress


def rollback_member(
    ctx: Context,
    progress: Progress,
    *,
    to: int | None,
    resync: bool,
    container: bool,
    snapshot_name: str | None,
    deep: bool,
    as_json: bool,
) -> MemberResult:
    """rollback on one fleet member: a generation switch, a --resync, or the container."""
    from envlock.fleet import MemberResult

    if container:
        if ctx.provisioner is None:
            raise UsageError("--container needs a proxmox-lxc target with a [container] table")
        name = ctx.provisioner.rollback(snapshot_name, progress)
        return MemberResult(0, "rolled back", note=f"container at snapshot {name}")
    plan, state, own = rollback_plan(ctx, to=to, resync=resync, deep=deep)
    answer = execute(ctx, plan, on_progress=progress)
    if resync and not plan.empty:
        verify_after(own, deep=deep)
    current = str(answer.get("current", state.current) or "")
    number, _, lock = current.partition("-")
    held = not resync and bool(lock) and lock != ctx.lock.short_hash
    return MemberResult(
        0,
        "in sync" if plan.empty else "resynced" if resync else "rolled back",
        generation=int(number) if number.isdigit() else None,
        lock=lock,
        hold=held,
        note=(plan.reason or "") if plan.empty else "",
        data={**plan_json(plan), "current": current or None},
    )


def rollback_plan(
    ctx: Context,
    *,
    to: int | None,
    resync: bool,
    deep: bool,
    meanwhile: Callable[[], object] | None = None,
) -> tuple[Plan, State, Context]:
    """The plan of a generation switch or a --resync, the state it starts from, and the
    context that judges the result (the active generation's own lock for a resync)."""
    if resync:
        # The active generation is re-synced to its own lock, whichever the profile names.
        state = gather_state(ctx, deep=deep, lock=True, meanwhile=meanwhile)
        adopted = state.current_generation.adopted_from if state.current_generation else None
        if adopted:
            raise UsageError(
                f"generation {state.current} was adopted from {adopted}, not built from a "
                "lock: there is no lock to re-sync it to",
                hint="`envlock check` shows what changed in it against its manifest; "
                f"`envlock apply {ui.shown_path(ctx.profile.path)}` returns to the profile's lock",
            )
        own = own_context(ctx, state)
        return resync_plan(state, compute_drift(own.expectation(), state)), state, own
    # A switch needs only the generations and their history: no file verification.
    state = gather_state(ctx, verify=False, meanwhile=meanwhile)
    if not any(g.complete for g in state.generations):
        raise UsageError(
            "nothing applied yet: no generation to roll back to",
            hint=f"run `envlock apply {ui.shown_path(ctx.profile.path)}` first",
        )
    return plan_rollback(state, to), state, ctx


@click.command("rollback")
@with_context(allow_stale=True)
@across_fleet(rollback_member, command="rollback")
@click.option("--to", "to", type=int, metavar="N", help="Generation number to switch to.")
@click.option(
    "--resync",
    is_flag=True,
    help="Restore the active generation's content from its own lock instead.",
)
@click.option(
    "--container",
    is_flag=True,
    help="Roll the LXC container back through the Proxmox API to its newest envlock "
    "snapshot (or --snapshot NAME).",
)
@click.option(
    "--snapshot",
    "snapshot_name",
    metavar="NAME",
    help="With --container: the snapshot to roll back to (`envlock generations "
    "--container` lists them).",
)
@click.option("--deep", is_flag=True, help="--resync: re-hash every file to find what to fix.")
@json_option
def command(
    ctx: Context,
    to: int | None,
    resync: bool,
    container: bool,
    snapshot_name: str | None,
    deep: bool,
    as_json: bool,
) -> None:
    """Switch back to the previous generation (milliseconds), or --resync the active one."""
    started = time.perf_counter()
    if snapshot_name is not None and not container:
        raise UsageError(
            "--snapshot goes with --container", hint=f"--container --snapshot {snapshot_name}"
        )
    if container:
        provisioner = ctx.provisioner
        if provisioner is None:
            raise UsageError("--container needs a proxmox-lxc target with a [container] table")
        name = provisioner.rollback(snapshot_name, None if as_json else ui.info)
        if as_json:
            ui.emit_json("rollback-container", {"container_snapshot": name})
        else:
            ui.out.print(f"[green]✓[/] {provisioner.describe()} rolled back to snapshot {name}")
        return
    plan, state, own = rollback_plan(
        ctx, to=to, resync=resync, deep=deep, meanwhile=ui.prepare_for_terminal
    )
    answer = execute(ctx, plan, on_progress=None if as_json else ui.info)
    if resync and not plan.empty:
        verify_after(own, deep=deep)
    elapsed_ms = (time.perf_counter() - started) * 1000
    if as_json:
        ui.emit_json(
            "rollback",
            {
                **plan_json(plan),
                "generation": answer.get("current", state.current),
                "current": answer.get("current", state.current),  # old name, one release
                "milliseconds": round(elapsed_ms, 1),
                "switch_milliseconds": switch_ms(plan, answer),
            },
        )
        return
    if plan.empty:
        print_plan(plan)
        return
    switched = switch_ms(plan, answer)
    took = f"{elapsed_ms:.0f} ms" + (
        f", the switch {switched:.1f} ms on the target" if switched is not None else ""
    )
    ui.ok(f"generation {answer.get('current')} is active ({took})")
    held_lock = str(answer.get("current", "")).partition("-")[2]
    if not resync and held_lock and held_lock != ctx.lock.short_hash:
        chosen = next((g for g in state.generations if g.name == answer.get("current")), None)
        judged = (
            f"its manifest (adopted from {chosen.adopted_from})"
            if chosen and chosen.adopted_from
            else "its own lock"
        )
        ui.info(
            f"rolled back: the profile's lock is {ctx.lock.short_hash}; `envlock check` judges "
            f"this generation by {judged}, `envlock run` uses it, `envlock apply` returns "
            "to the profile's"
        )


def switch_ms(plan: Plan, answer: dict[str, object]) -> float | None:
    """How long the switch itself took on the target (link, hold, history), in ms."""
    seconds = answer.get("seconds")
    kinds = [a.kind for a in plan.actions]
    if not isinstance(seconds, list) or "switch" not in kinds or len(seconds) != len(kinds):
        return None
    return round(float(seconds[kinds.index("switch")]) * 1000, 3)


def resync_plan(state: State, drifts: list[Drift]) -> Plan:
    active = state.current_generation
    if active is None or not active.complete:
        raise UsageError("no active generation to re-sync", hint="run `envlock apply` first")
    action = repair_action(active, drifts)
    if action is None:
        return Plan((), f"generation {active.number} already matches its lock")
    return Plan((action,))
