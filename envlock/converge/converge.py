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
from dataclasses import dataclass, field

from envlock import ui
from envlock.base.drift_kinds import Drift
from envlock.errors import EnvlockError, OperationError, UsageError
from envlock.lock.read import read_lock
from envlock.reconcile.context import Context, Probe, check, check_container
from envlock.reconcile.drift import Expectation
from envlock.reconcile.execute import ApplyAnswer, execute, verify_after
from envlock.reconcile.plan import Plan, make_plan
from envlock.reconcile.state import State
from envlock.runs.one_call import remember_seen, run_probe
from envlock.targets.base import ContainerCheck
from envlock.targets.registry import needs_a_container

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
    held: bool = False,
) -> Converged:
    """Provision the container, plan and converge the environment of one target.
    `gate(container steps, plan)` runs before the first change (shows, confirms); `adopt`
    keeps a real venv at the venv path as generation 0 first (`apply --adopt`); `held`: the
    context's lock is not the profile's (a bisect probe's) and its generation is held as a
    snapshot's is."""
    refuse_restart(ctx, restart)
    asked = Asked(deep, restart, no_wait, snapshot_dir, progress, gate or no_gate, adopt)
    run = Converging(ctx, asked)
    steps = run.container_first()
    expect = expectation(ctx, snapshot_dir, held)
    done = run.rounds(expect, steps)
    if not done.applied:
        return run.converged(done, done.current)
    current = after_switch(ctx, expect, done.plan, deep=deep, no_wait=no_wait, progress=progress)
    verify(ctx, done.plan, snapshot_dir, deep=deep)
    return run.converged(done, current or done.current)


def refuse_restart(ctx: Context, restart: bool) -> None:
    """`--restart` restarts a container: refused where the profile declares none (one
    target's apply and a fleet's alike)."""
    if restart and ctx.profile.container is None:
        raise needs_a_container("--restart")


def no_gate(steps: list[Drift], plan: Plan | None) -> None:
    """No one to show or ask (a fleet member, already confirmed for the whole fleet)."""


@dataclass(frozen=True)
class Asked:
    """What a converge was asked (`converge`'s options)."""

    deep: bool
    restart: bool
    no_wait: bool
    snapshot_dir: str | None
    progress: Callable[[str], None] | None
    gate: Gate
    adopt: bool


@dataclass(frozen=True)
class Round:
    """The last round of planning: its plan, the generation active after it, the rounds
    planned again before it, and whether anything changed (the container or the root)."""

    plan: Plan
    current: str | None
    replans: int
    applied: bool


@dataclass
class Converging:
    """One converge under way: the steps below share what it has reported so far and
    whether the container was snapshotted (once per apply) or changed."""

    ctx: Context
    asked: Asked
    report: list[str] = field(default_factory=list)
    snapshotted: bool = False  # a snapshot was taken
    snapshot_asked: bool = False  # ... or the profile asked for none (once per apply)
    provisioned: bool = False

    def container_first(self) -> list[Drift]:
        """A stopped container is provisioned first: nothing inside it can be planned before
        it runs. Returns what apply changes about a running one (said with the plan)."""
        ctx, asked = self.ctx, self.asked
        container = check_container(ctx)
        if ctx.provisioner is not None and container is not None and first(container):
            asked.gate(list(container.drifts), None)
            self.snapshot_once(self.state_before(container))
            self.report += ctx.provisioner.provision(
                restart=asked.restart, on_progress=asked.progress
            )
            return []
        self.report += waiting_for_restart(container, asked.restart)
        return container_changes(container, asked.restart)

    def state_before(self, container: ContainerCheck) -> State | None:
        """What a running container holds before it is replaced (its commit names it)."""
        if not container.running:
            return None
        return check(self.ctx, Probe(verify=False), hold=False)[0]

    def rounds(self, expect: Expectation, steps: list[Drift]) -> Round:
        """Plan, show, change the container, execute; again while the agent answers that
        the root changed under the plan (at most REPLANS times)."""
        for replans in range(REPLANS + 1):
            state, plan = self.plan(expect, replans)
            if plan.empty and not steps:
                # After a container change on an earlier round: verified as usual.
                return Round(plan, state.current, replans, applied=self.provisioned)
            self.asked.gate(steps, plan)
            if self.asked.restart:  # a restart stops the agent that holds the lock
                steps = self.change_container(steps, state)
            answer = self.execute(plan, state, steps)
            if not answer.replan:  # it held under the root's lock: provisional no more
                held = dataclasses.replace(plan, provisional="")
                applied = not plan.empty or self.provisioned
                return Round(held, answer.current or state.current, replans, applied=applied)
            self.say("another envlock operation changed the root meanwhile: planning again")
        raise OperationError(
            f"the root kept changing while apply planned ({REPLANS + 1} plans overtaken)",
            hint="wait for the other envlock operations on this root, then apply again",
        )

    def plan(self, expect: Expectation, replans: int) -> tuple[State, Plan]:
        """Probe and plan, against the profile's lock (hold=False: apply returns there from
        a rollback); a snapshot's environment must fit this target."""
        ctx, asked = self.ctx, self.asked
        state, drifts = check(ctx, Probe(deep=asked.deep), hold=False, meanwhile=ui.prepare)
        if asked.snapshot_dir:
            refuse_incompatible(ctx, asked.snapshot_dir, state)
        adopt = adopting(ctx, state, asked.adopt, replans, asked.progress)
        plan = make_plan(expect, state, drifts, adopt=adopt)
        if state.busy and not plan.empty:
            plan = dataclasses.replace(plan, provisional=state.busy)
        if asked.snapshot_dir:
            plan = without_mismatched_scripts(ctx, plan)
        return state, plan

    def change_container(self, steps: list[Drift], state: State) -> list[Drift]:
        """The container changes whatever the root's lock says: its snapshot comes first.
        Returns what is left to change about it (nothing)."""
        if not steps:
            return []
        self.provisioned = True
        self.snapshot_once(state)
        provisioner = self.ctx.provisioner
        if provisioner is not None:
            self.report += provisioner.provision(
                restart=self.asked.restart, on_progress=self.asked.progress
            )
        return []

    def execute(self, plan: Plan, state: State, steps: list[Drift]) -> ApplyAnswer:
        """The plan, carried out under the root's lock. The container's snapshot (when none
        was taken yet) and its change are decided by the agent's dialogue, once it holds
        the lock and the plan holds: the container is checked again there, so a second
        apply that waited for the first finds nothing left and takes no snapshot."""

        def under_lock() -> None:
            pending = self.still_pending(steps)
            if not plan.empty or pending:
                self.snapshot_once(state)
            self.change_container(pending, state)

        idle = self.ctx.provisioner is None or (self.snapshot_asked and not steps)
        locked = None if idle else under_lock
        wait, progress = not self.asked.no_wait, self.asked.progress
        carry = None
        if any(action.kind == "build" for action in plan.actions):
            from envlock.runs.environment import api_payload  # what a build carries

            carry = api_payload(self.ctx)
        return execute(
            self.ctx, plan, wait=wait, on_progress=progress, when_locked=locked, carry=carry
        )

    def still_pending(self, steps: list[Drift]) -> list[Drift]:
        """The container's changes as they stand now (another apply may have made them)."""
        if not steps:
            return []
        return container_changes(check_container(self.ctx), self.asked.restart)

    def snapshot_once(self, state: State | None) -> None:
        if not self.snapshot_asked and self.ctx.provisioner is not None:
            taken = snapshot_first(self.ctx, state, self.asked.progress)
            self.report += taken
            self.snapshotted, self.snapshot_asked = bool(taken), True

    def say(self, text: str) -> None:
        if self.asked.progress is not None:
            self.asked.progress(text)

    def converged(self, done: Round, current: str | None) -> Converged:
        report = tuple(self.report)
        return Converged(done.plan, report, done.applied, self.snapshotted, current, done.replans)


def verify(ctx: Context, plan: Plan, snapshot_dir: str | None, *, deep: bool) -> None:
    """What apply converged, gathered again; scripts not deployed (a snapshot's pinned
    hashes that this machine's copies do not match) are not counted."""
    skipped = bool(snapshot_dir) and ctx.profile.script_hashes() != ctx.scripts
    ignore = ("script-modified", "script-missing") if skipped else ()
    if not ctx.profile.target.remote or deep or skipped:
        verify_after(ctx, plan, ignore=ignore, deep=deep)
        return
    # Asked as a remote run with --snapshot-into asks (the cache's files counted, the
    # generation's lock read: no round trip more): the state found is the one the next run
    # of either kind proposes, so it starts in one call (runs/one_call.py), no probe first.
    asked = run_probe(ctx, snapshot=True)
    verify_after(ctx, plan, asked=asked, seen=lambda state: remember_seen(ctx, state))


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


def expectation(ctx: Context, snapshot_dir: str | None, held: bool = False) -> Expectation:
    """The profile's lock; a snapshot's lock (or a bisect probe's, `held`) is held (as a
    rollback is) unless it is the profile's own."""
    expect = ctx.expectation()
    if not snapshot_dir and not held:
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
    state, drifts = check(ctx, Probe(deep=deep), hold=False)
    repair = make_plan(expect, state, drifts)
    if repair.empty:
        return None
    return execute(ctx, repair, wait=not no_wait, on_progress=progress).current


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


def first(container: ContainerCheck) -> bool:
    """Whether the container is provisioned before anything inside it is planned: it does
    not run, or its changes replace it."""
    return not container.running or container.replaces


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
