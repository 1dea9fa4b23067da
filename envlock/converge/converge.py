"""Converge one target: the container step, then plan and execute under the root's lock,
re-check and repair after a switch, verify. One function, one result value; `apply`, `add`
and `remove` render it, a fleet puts it in its table.

Decided under the lock: the plan carries the probe's fingerprint of the root, and the
agent carries it out only if the root is still so once it holds the lock; otherwise it
answers "re-plan" and this probes and plans again (a bounded number of times). A Proxmox
snapshot is taken by the agent's dialogue, while it holds the lock and the plan holds
(one round trip), so a converge that turns out to have nothing to do takes none.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from envlock import ui
from envlock.base.drift_kinds import Drift
from envlock.errors import EnvlockError, OperationError, UsageError
from envlock.lock.read import read_lock
from envlock.reconcile.context import Context, check, check_container
from envlock.reconcile.drift import Expectation
from envlock.reconcile.execute import execute, verify_after
from envlock.reconcile.plan import Plan, make_plan
from envlock.reconcile.state import State
from envlock.targets.base import ContainerCheck

# How many times a converge plans again after another operation changed the root under it.
REPLANS = 4

# Runs before the first change with the container's steps and the plan (None while the
# container does not run yet): shows and confirms, or stops a preview by raising.
Gate = Callable[[list[Drift], "Plan | None"], None]


@dataclass(frozen=True)
class Converged:
    """What one converge did: its plan, the container's report lines, the generation active."""

    plan: Plan
    report: tuple[str, ...]
    applied: bool  # False: nothing to do (the plan is empty)
    snapshotted: bool  # a Proxmox snapshot of the container was taken
    current: str | None  # the active generation's name, "<number>-<lock>"
    replans: int = 0  # plans made again because the root changed before the lock was held


def converge(
    ctx: Context,
    *,
    deep: bool = False,
    restart: bool = False,
    no_wait: bool = False,
    snapshot_dir: str | None = None,
    progress: Callable[[str], None] | None = None,
    gate: Gate | None = None,
    adopt: bool = False,
) -> Converged:
    """Provision the container, plan and converge the environment of one target.
    `gate(container steps, plan)` runs before the first change (shows, confirms); `adopt`
    keeps a real venv at the venv path as generation 0 first (`apply --adopt`)."""
    report: list[str] = []
    provisioner = ctx.provisioner
    if restart and provisioner is None:
        raise UsageError("--restart needs a proxmox-lxc target with a [container] table")
    stop = gate or (lambda steps, plan: None)
    container = check_container(ctx)
    snapshotted = False
    if provisioner is not None and container is not None and not container.running:
        # Nothing inside can be planned before the container runs: provision it first.
        stop(list(container.drifts), None)
        report += snapshot_first(ctx, None, progress)
        snapshotted = True
        report += provisioner.provision(restart=restart, on_progress=progress)
        container = None
    expect = expectation(ctx, snapshot_dir)
    container_steps = container_changes(container, restart)
    report += waiting_for_restart(container, restart)
    provisioned = False
    for replans in range(REPLANS + 1):
        # Against the profile's lock (hold=False): apply returns there from a rollback.
        state, drifts = check(ctx, deep=deep, hold=False, meanwhile=ui.prepare)
        if snapshot_dir:
            refuse_incompatible(ctx, snapshot_dir, state)
        plan = make_plan(
            expect, state, drifts, adopt=adopting(ctx, state, adopt, replans, progress)
        )
        if snapshot_dir:
            plan = without_mismatched_scripts(ctx, plan)
        active = state.current
        if plan.empty and not container_steps:
            if provisioned:
                break  # the container changed on an earlier round: verify as usual
            return Converged(plan, tuple(report), False, snapshotted, state.current, replans)
        stop(container_steps, plan)
        if container_steps:
            provisioned = True
            # The container changes whatever the root's lock says: its snapshot comes first.
            if not snapshotted:
                report += snapshot_first(ctx, state, progress)
                snapshotted = True
            if provisioner is not None:
                report += provisioner.provision(restart=restart, on_progress=progress)
            container_steps = []
        taken: list[str] = []

        def under_lock(state: State = state, taken: list[str] = taken) -> None:
            taken.extend(snapshot_first(ctx, state, progress))

        locked = None if snapshotted or provisioner is None else under_lock
        answer = execute(ctx, plan, wait=not no_wait, on_progress=progress, when_locked=locked)
        report += taken
        snapshotted = snapshotted or bool(taken)
        active = str(answer.get("current") or "") or active
        if not answer.get("replan"):
            break
        if progress is not None:
            progress("another envlock operation changed the root meanwhile: planning again")
    else:
        raise OperationError(
            f"the root kept changing while apply planned ({REPLANS + 1} plans overtaken)",
            hint="wait for the other envlock operations on this root, then apply again",
        )
    current = after_switch(ctx, expect, plan, deep=deep, no_wait=no_wait, progress=progress)
    scripts_skipped = bool(snapshot_dir) and ctx.profile.script_hashes() != ctx.scripts
    verify_after(
        ctx,
        plan,
        ignore=("script-modified", "script-missing") if scripts_skipped else (),
        deep=deep,
    )
    return Converged(plan, tuple(report), True, snapshotted, current or active, replans)


def adopting(
    ctx: Context,
    state: State,
    adopt: bool,
    replans: int,
    progress: Callable[[str], None] | None,
) -> bool:
    """Whether this round plans an adoption: asked, and (when planning again) the venv is
    still a real directory: another apply that adopted it meanwhile left a link, not ours
    to refuse. The container's snapshot, when there is one, comes first as for any change."""
    kind = state.venv_link.kind if state.venv_link else "absent"
    if adopt and kind == "absent" and replans == 0 and progress is not None:
        progress(f"{ctx.profile.target.venv} does not exist: nothing to adopt, a plain apply")
    return adopt and (replans == 0 or kind == "directory")


def expectation(ctx: Context, snapshot_dir: str | None) -> Expectation:
    """The profile's lock; a snapshot's lock is held (as a rollback is) unless it is the
    profile's own."""
    expect = ctx.expectation()
    if not snapshot_dir:
        return expect
    try:
        own = read_lock(ctx.profile.lock_path).short_hash
    except (EnvlockError, OSError):
        own = None  # no lock of its own (yet): the snapshot's is held all the same
    return dataclasses.replace(expect, held=own != ctx.lock.short_hash)


def after_switch(
    ctx: Context,
    expect: Expectation,
    plan: Plan,
    *,
    deep: bool,
    no_wait: bool,
    progress: Callable[[str], None] | None,
) -> str | None:
    """The generation switched to was not verified before (only the active one is): if it
    drifted while inactive (a polluting install, then a rollback), repair it now."""
    kinds = {a.kind for a in plan.actions}
    if "switch" not in kinds or "build" in kinds:
        return None
    state, drifts = check(ctx, deep=deep, hold=False)
    repair = make_plan(expect, state, drifts)
    if repair.empty:
        return None
    answer = execute(ctx, repair, wait=not no_wait, on_progress=progress)
    current = answer.get("current")
    return str(current) if current else None


def snapshot_first(
    ctx: Context, state: State | None, on_progress: Callable[[str], None] | None
) -> list[str]:
    """The container's snapshot before this apply changes anything (once per apply), named
    after the generation active in it (unknown while the container is stopped)."""
    if ctx.provisioner is None:
        return []
    active = state.current_generation if state is not None else None
    generation = None if state is None else (active.name if active else "none")
    name = ctx.provisioner.snapshot(
        generation=generation,
        lock=active.lock_hash if active else "",
        applying=ctx.lock.short_hash,
        on_progress=on_progress,
    )
    return [f"snapshot {name}"] if name else []


def container_changes(container: ContainerCheck | None, restart: bool) -> list[Drift]:
    """What apply changes about the container: a pending restart only when asked."""
    if container is None:
        return []
    return [d for d in container.drifts if restart or d.kind != "container-restart"]


def waiting_for_restart(container: ContainerCheck | None, restart: bool) -> list[str]:
    """Changes the container takes at its next start, said when apply leaves them."""
    if container is None or restart:
        return []
    return [d.detail for d in container.drifts if d.kind == "container-restart"]


def refuse_incompatible(ctx: Context, snapshot_dir: str, state: State) -> None:
    from envlock.runs.snapshot import snapshot_compatibility
    from envlock.runs.snapshot_file import load_snapshot

    problems = snapshot_compatibility(ctx, load_snapshot(snapshot_dir), state)
    if problems:
        raise UsageError(
            f"cannot rebuild the snapshot's environment here: {'; '.join(problems)}",
            hint="apply it on a target of the same platform",
        )


def without_mismatched_scripts(ctx: Context, plan: Plan) -> Plan:
    """Scripts are deployed only when this machine's copies are the snapshot's."""
    if ctx.profile.script_hashes() == ctx.scripts:
        return plan
    if any(a.kind == "scripts" for a in plan.actions):
        ui.warn(
            "the scripts here differ from the snapshot's pinned hashes: not deploying them "
            "(check out the commit the snapshot records)"
        )
    return dataclasses.replace(plan, actions=tuple(a for a in plan.actions if a.kind != "scripts"))
