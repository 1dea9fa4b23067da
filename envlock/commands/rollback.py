"""`envlock rollback PROFILE`: back to the previous generation, or re-sync the active one."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from envlock import ui
from envlock.base.drift_kinds import Drift
from envlock.commands.common import (
    across_fleet,
    json_option,
    plan_json,
    print_plan,
    with_context,
)
from envlock.errors import UsageError
from envlock.reconcile.context import Context, Probe, gather_state, own_context
from envlock.reconcile.drift import compute_drift
from envlock.reconcile.execute import ApplyAnswer, execute, verify_after
from envlock.reconcile.generations import plan_rollback
from envlock.reconcile.plan import Plan, repair_action
from envlock.reconcile.state import State
from envlock.targets.registry import needs_a_container

if TYPE_CHECKING:
    # A fleet's code loads only for a fleet profile: one target's rollback never pays for it.
    from envlock.converge.fleet import MemberResult, Progress


KIND = "rollback"


@dataclass(frozen=True)
class RollbackResult:
    """A generation switch or a --resync: the plan, the generation active after it, and
    how long it took (the switch itself, on the target, when there was one)."""

    plan: Plan
    generation: str | None  # the active generation's name after it
    resync: bool
    profile_lock: str  # the profile's lock id
    judged_by: str  # what `check` judges a generation other than the profile's lock by
    milliseconds: float = 0.0
    switch_milliseconds: float | None = None

    @property
    def lock(self) -> str:
        return (self.generation or "").partition("-")[2]

    @property
    def held(self) -> bool:
        """A switch to a generation of another lock: the root is held on it."""
        return not self.resync and bool(self.lock) and self.lock != self.profile_lock

    def to_json(self) -> dict[str, Any]:
        return {
            **plan_json(self.plan),
            "generation": self.generation,
            "current": self.generation,  # old name, one release
            "milliseconds": round(self.milliseconds, 1),
            "switch_milliseconds": self.switch_milliseconds,
        }

    def member(self) -> MemberResult:
        """A fleet member's row: the same value, summed up."""
        from envlock.converge.fleet import MemberResult

        number = (self.generation or "").partition("-")[0]
        plan = self.plan
        return MemberResult(
            0,
            "in sync" if plan.empty else "resynced" if self.resync else "rolled back",
            generation=int(number) if number.isdigit() else None,
            lock=self.lock,
            hold=self.held,
            note=(plan.reason or "") if plan.empty else "",
            data=self.to_json(),
        )


def rollback_of(
    ctx: Context,
    *,
    to: int | None,
    resync: bool,
    deep: bool,
    on_progress: Callable[[str], None] | None,
    meanwhile: Callable[[], object] | None = None,
) -> RollbackResult:
    """The one producer of a rollback's result (a single target's, or one fleet member's):
    plan, execute, and verify a --resync."""
    started = time.perf_counter()
    plan, state, own = rollback_plan(ctx, to=to, resync=resync, deep=deep, meanwhile=meanwhile)
    answer = execute(ctx, plan, on_progress=on_progress)
    if resync and not plan.empty:
        verify_after(own, deep=deep)
    current = state.current if plan.empty else answer.current
    chosen = next((g for g in state.generations if g.name == current), None)
    judged = (
        f"its manifest (adopted from {chosen.adopted_from})"
        if chosen and chosen.adopted_from
        else "its own lock"
    )
    return RollbackResult(
        plan,
        str(current) if current else None,
        resync,
        ctx.lock.short_hash,
        judged,
        (time.perf_counter() - started) * 1000,
        switch_ms(plan, answer),
    )


def render_text(result: RollbackResult) -> None:
    if result.plan.empty:
        print_plan(result.plan)
        return
    switched = result.switch_milliseconds
    took = f"{result.milliseconds:.0f} ms" + (
        f", the switch {switched:.1f} ms on the target" if switched is not None else ""
    )
    ui.ok(f"generation {result.generation} is active ({took})")
    if result.held:
        ui.info(
            f"rolled back: the profile's lock is {result.profile_lock}; `envlock check` "
            f"judges this generation by {result.judged_by}, `envlock run` uses it, "
            "`envlock apply` returns to the profile's"
        )


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
    from envlock.converge.fleet import MemberResult

    if container:
        if ctx.provisioner is None:
            raise needs_a_container("--container")
        name = ctx.provisioner.rollback(snapshot_name, progress)
        return MemberResult(0, "rolled back", note=f"container at snapshot {name}")
    result = rollback_of(ctx, to=to, resync=resync, deep=deep, on_progress=progress)
    return result.member()


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
        state = gather_state(ctx, Probe(deep=deep, lock=True), meanwhile=meanwhile)
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
    state = gather_state(ctx, Probe(verify=False), meanwhile=meanwhile)
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
    help="Roll the container back to its newest envlock snapshot (or --snapshot NAME): a "
    "Proxmox snapshot, or a Docker commit the container is recreated from.",
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
    if snapshot_name is not None and not container:
        raise UsageError(
            "--snapshot goes with --container", hint=f"--container --snapshot {snapshot_name}"
        )
    if container:
        rollback_container(ctx, snapshot_name, as_json)
        return
    result = rollback_of(
        ctx,
        to=to,
        resync=resync,
        deep=deep,
        on_progress=None if as_json else ui.info,
        meanwhile=ui.prepare_for_terminal,
    )
    if as_json:
        ui.emit_json(KIND, result.to_json())
    else:
        render_text(result)


def rollback_container(ctx: Context, snapshot_name: str | None, as_json: bool) -> None:
    """The container, through the Proxmox API, to a snapshot: a document of its own."""
    provisioner = ctx.provisioner
    if provisioner is None:
        raise needs_a_container("--container")
    name = provisioner.rollback(snapshot_name, None if as_json else ui.info)
    if as_json:
        ui.emit_json(
            "rollback-container", {"container": provisioner.describe(), "container_snapshot": name}
        )
    else:
        ui.out.print(f"[green]✓[/] {provisioner.describe()} rolled back to snapshot {name}")


def switch_ms(plan: Plan, answer: ApplyAnswer) -> float | None:
    """How long the switch itself took on the target (link, hold, history), in ms."""
    seconds = answer.seconds
    kinds = [a.kind for a in plan.actions]
    if seconds is None or "switch" not in kinds or len(seconds) != len(kinds):
        return None
    return round(seconds[kinds.index("switch")] * 1000, 3)


def resync_plan(state: State, drifts: list[Drift]) -> Plan:
    active = state.current_generation
    if active is None or not active.complete:
        raise UsageError("no active generation to re-sync", hint="run `envlock apply` first")
    action = repair_action(active, drifts)
    if action is None:
        return Plan((), f"generation {active.number} already matches its lock")
    return Plan((action,))
