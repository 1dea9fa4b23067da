"""`envlock apply PROFILE`: converge the target to the lock (or to a snapshot's lock).

For a proxmox-lxc target the container comes first: created, started and configured through
the Proxmox API; then the environment inside it is planned and converged like on any other
target. When the profile asks for snapshots, the container is snapshotted once, before the
first change of this apply, whatever that change is.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, NoReturn

import click

from envlock import ui
from envlock.base.drift_kinds import Drift
from envlock.commands.common import (
    drift_table,
    fleet_options,
    json_option,
    plan_json,
    print_plan,
    profile_argument,
    progress_printer,
    refuse_on,
)
from envlock.converge.converge import Converged, Gate, converge, refuse_restart
from envlock.converge.fleet import Fleet, MemberResult, Progress, is_fleet, members_of, run_fleet
from envlock.errors import EXIT_DRIFT, EXIT_USAGE, INTERRUPTED, EnvlockError, UsageError
from envlock.proxmox.members import Member
from envlock.reconcile.context import Context, gather_state, open_context
from envlock.reconcile.plan import Plan
from envlock.reconcile.state import State


@click.command("apply")
@profile_argument
@click.option("-y", "--yes", is_flag=True, help="Do not ask before acting.")
@click.option("--no-wait", is_flag=True, help="Fail instead of waiting for another apply.")
@click.option(
    "--from-snapshot",
    "snapshot_dir",
    metavar="DIR",
    help="Rebuild exactly the environment a snapshot recorded (its lock).",
)
@click.option(
    "--force",
    is_flag=True,
    help="With --from-snapshot: rebuild a snapshot made for another profile name.",
)
@click.option(
    "--allow-pth",
    "allow_pth",
    multiple=True,
    metavar="PACKAGE",
    help="With --from-snapshot: let PACKAGE install a .pth file (code every Python of the "
    "environment runs). Repeat per package.",
)
@click.option(
    "--adopt",
    is_flag=True,
    help="Keep a real venv at the profile's venv path as generation 0 (unchanged, moved "
    "under the root; the path becomes the link), then build the lock as usual.",
)
@click.option(
    "--deep", is_flag=True, help="Re-hash every file first, and repair whatever that finds."
)
@click.option(
    "--restart",
    is_flag=True,
    help="Restart the container when config changes wait for its next start (a docker "
    "container is recreated for any change: no wait).",
)
@click.option(
    "--fail-fast", is_flag=True, help="Fleet: start no new member after the first failure."
)
@fleet_options
@json_option
def command(
    profile: str,
    yes: bool,
    no_wait: bool,
    snapshot_dir: str | None,
    force: bool,
    allow_pth: tuple[str, ...],
    adopt: bool,
    deep: bool,
    restart: bool,
    fail_fast: bool,
    jobs: int,
    on: tuple[str, ...],
    as_json: bool,
) -> None:
    """Converge the target to the lock: provision, build, switch, deploy, link."""
    started = time.perf_counter()
    refuse_snapshot_flags(snapshot_dir, force=force, allow_pth=allow_pth, adopt=adopt)
    ctx = apply_context(profile, snapshot_dir, force=force, allow_pth=allow_pth)
    if is_fleet(ctx):
        refuse_across_fleet(ctx, adopt=adopt, snapshot_dir=snapshot_dir, restart=restart)
        apply_fleet(
            ctx,
            yes=yes,
            jobs=jobs,
            on=on,
            fail_fast=fail_fast,
            as_json=as_json,
            deep=deep,
            restart=restart,
            no_wait=no_wait,
        )
    refuse_on(on, fail_fast)
    result = apply_of(
        ctx,
        started=started,
        deep=deep,
        restart=restart,
        no_wait=no_wait,
        snapshot_dir=snapshot_dir,
        progress=progress_printer(as_json),
        gate=make_gate(ctx, yes=yes, as_json=as_json),
        adopt=adopt,
    )
    if as_json:
        ui.emit_json(KIND, result.to_json())
    else:
        render_text(result)


def refuse_snapshot_flags(
    snapshot_dir: str | None, *, force: bool, allow_pth: tuple[str, ...], adopt: bool
) -> None:
    """--force and --allow-pth go with --from-snapshot, --adopt without it."""
    if force and not snapshot_dir:
        raise UsageError("--force goes with --from-snapshot", hint="drop --force")
    if allow_pth and not snapshot_dir:
        raise UsageError(
            "--allow-pth goes with --from-snapshot (the profile's own packages need no leave)",
            hint="drop --allow-pth",
        )
    if adopt and snapshot_dir:
        raise UsageError(
            "--adopt goes without --from-snapshot",
            hint="adopt first (`envlock apply --adopt PROFILE`), then apply the snapshot",
        )


def apply_context(
    profile: str, snapshot_dir: str | None, *, force: bool, allow_pth: tuple[str, ...]
) -> Context:
    """The profile's context, or with --from-snapshot the snapshot's lock in its place."""
    if not snapshot_dir:
        return open_context(profile)
    from envlock.runs.snapshot import context_from_snapshot  # --from-snapshot only

    return context_from_snapshot(profile, snapshot_dir, force=force, allow_pth=allow_pth)


def refuse_across_fleet(
    ctx: Context, *, adopt: bool, snapshot_dir: str | None, restart: bool
) -> None:
    """What acts on one target only is refused for a fleet profile."""
    if adopt:
        raise UsageError("--adopt acts on one target's venv: not across a fleet")
    if snapshot_dir:
        raise UsageError("--from-snapshot acts on one container: not across a fleet")
    refuse_restart(ctx, restart)


def apply_fleet(
    ctx: Context,
    *,
    yes: bool,
    jobs: int,
    on: tuple[str, ...],
    fail_fast: bool,
    as_json: bool,
    deep: bool,
    restart: bool,
    no_wait: bool,
) -> NoReturn:
    """Every member's plan shown and confirmed once (unless `yes`), then applied."""
    members = members_of(ctx, on)
    if not yes:
        confirm_fleet(ctx, members, jobs=jobs, deep=deep, restart=restart, as_json=as_json)
    work = functools.partial(apply_member, deep=deep, restart=restart, no_wait=no_wait)
    run_fleet(
        ctx,
        work,
        on=on,
        jobs=jobs,
        as_json=as_json,
        fail_fast=fail_fast,
        include_stopped=ctx.profile.container is not None,  # apply starts them
        command="apply",
        members=members,  # those whose plans were shown
    )


def make_gate(ctx: Context, *, yes: bool, as_json: bool) -> Gate:
    """Before the first change: show the container's steps and the plan, ask once (unless
    `yes`), and say what an interrupt from then on leaves."""
    asked = yes

    def gate(steps: list[Drift], plan: Plan | None) -> None:
        nonlocal asked
        show_container_steps(steps, as_json)
        if plan is not None and not as_json:
            print_plan(plan)
        confirm(asked)
        asked = True
        # Said when the interrupt comes: what it left is known only then.
        click.get_current_context().meta[INTERRUPTED] = lambda: interrupted_note(ctx, plan)

    return gate


KIND = "apply"


@dataclass(frozen=True)
class ApplyResult:
    """What an apply did (a converge's value) and how long it took; `from_snapshot`: the
    generation follows a snapshot's lock and is held."""

    done: Converged
    seconds: float
    from_snapshot: bool = False

    def to_json(self) -> dict[str, Any]:
        done = self.done
        common = {**plan_json(done.plan), "applied": done.applied or done.snapshotted}
        if not done.applied:
            return {**common, "generation": done.current, "container": list(done.report)}
        return {
            **common,
            "generation": done.current,
            "current": done.current,  # the old name of "generation", kept one release
            "container": list(done.report),
            "seconds": round(self.seconds, 3),
        }

    def member(self) -> MemberResult:
        """A fleet member's row: the same value, summed up."""
        done = self.done
        number, _, lock = str(done.current or "").partition("-")
        return MemberResult(
            0,
            "applied" if done.applied else "in sync",
            generation=int(number) if number.isdigit() else None,
            lock=lock,
            note=f"{len(done.plan.actions)} action(s)" if done.applied else "",
            data=self.to_json(),
        )


def apply_of(
    ctx: Context, *, started: float, snapshot_dir: str | None, **options: Any
) -> ApplyResult:
    """The one producer of an apply's result (a single target's, or one fleet member's):
    converge, timed from `started`."""
    done = converge(ctx, snapshot_dir=snapshot_dir, **options)
    return ApplyResult(done, time.perf_counter() - started, from_snapshot=bool(snapshot_dir))


def render_text(result: ApplyResult) -> None:
    """An apply's result for people."""
    done = result.done
    for line in done.report:
        ui.out.print(f"  container: {ui.escape(line)}")
    if not done.applied:
        print_plan(done.plan)
        return
    ui.out.print(
        f"[green]✓[/] applied: generation {done.current} is active ({result.seconds:.1f}s)"
    )
    if result.from_snapshot:
        ui.info(
            "note: this generation follows the snapshot's lock, not the profile's, and is "
            "held as a rollback is (`envlock run` judges it by that lock); "
            "`envlock apply` returns to the profile's"
        )


def apply_member(
    ctx: Context, progress: Progress, *, deep: bool, restart: bool, no_wait: bool
) -> MemberResult:
    """apply on one fleet member (already confirmed for the whole fleet)."""
    result = apply_of(
        ctx,
        started=time.perf_counter(),
        deep=deep,
        restart=restart,
        no_wait=no_wait,
        snapshot_dir=None,
        progress=progress,
        gate=lambda steps, plan: None,
    )
    return result.member()


class Previewed(Exception):
    """Raised by a preview's gate: what apply would change, before it changes anything."""

    def __init__(self, steps: list[Drift], plan: Plan | None) -> None:
        self.steps = steps
        self.plan = plan


def preview_member(ctx: Context, progress: Progress, *, deep: bool, restart: bool) -> MemberResult:
    """What apply would do on one fleet member: apply's own path, stopped at its gate."""

    def stop(steps: list[Drift], plan: Plan | None) -> None:
        raise Previewed(steps, plan)

    try:
        done = converge(
            ctx,
            deep=deep,
            restart=restart,
            no_wait=True,
            snapshot_dir=None,
            progress=None,
            gate=stop,
        )
    except Previewed as seen:
        lines = [f"container: {d.kind} {d.subject}: {d.expected} → {d.actual}" for d in seen.steps]
        counts = [f"{len(seen.steps)} container change(s)"] if seen.steps else []
        if seen.plan is None:
            lines.append("then: converge the environment inside once the container runs")
        else:
            lines += [f"{n}. {a.description}" for n, a in enumerate(seen.plan.actions, 1)]
            counts += [f"{len(seen.plan.actions)} action(s)"] if seen.plan.actions else []
        return MemberResult(EXIT_DRIFT, "to do", note=", ".join(counts), data={"lines": lines})
    return MemberResult(0, "nothing to do", note=done.plan.reason or "in sync")


def confirm_fleet(
    ctx: Context, members: list[Member], *, jobs: int, deep: bool, restart: bool, as_json: bool
) -> None:
    """Every member's plan, prefixed by node/vmid, then one question for the whole fleet
    (none when no member has anything to do)."""
    if not as_json:
        ui.info(f"apply: planning {len(members)} container(s), {min(jobs, len(members))} at a time")
    work = functools.partial(preview_member, deep=deep, restart=restart)
    results, interrupted = Fleet(ctx, members, quiet=True).run(
        work, jobs=jobs, fail_fast=False, include_stopped=ctx.profile.container is not None
    )
    if interrupted:
        raise KeyboardInterrupt  # nothing changed yet
    console = ui.err if as_json else ui.out  # --json keeps stdout for its document
    for member in members:
        result = results[member]
        head = result.result + (f": {result.note}" if result.note else "")
        for line in [head, *(f"  {line}" for line in result.data.get("lines", []))]:
            console.print(ui.untrusted(f"{member.label}: {line}"))
    pending = sum(results[m].result == "to do" for m in members)
    if pending:
        confirm(False, f"apply these plans to {pending} container(s)?")


def confirm(yes: bool, question: str = "apply this plan?") -> None:
    if yes:
        return
    if not sys.stdin.isatty():
        ui.error("refusing to act without confirmation: pass -y (stdin is not a terminal)")
        sys.exit(EXIT_USAGE)
    if not click.confirm(question, err=True):
        # The plan stays pending, as `envlock plan` would report it.
        ui.info("nothing changed")
        sys.exit(EXIT_DRIFT)


def interrupted_note(ctx: Context, plan: Plan | None = None) -> str:
    """What an interrupt during the apply leaves, and what cleans it up.

    envlock does not stop a remote agent: it runs under the root's lock and either
    finishes or leaves the root as it was (the switch is atomic), so saying so is safer
    than killing it between two of its steps. What it left is asked over a new connection
    (a local root is looked at), once the agent let go of the root."""
    if ctx.profile.target.remote:
        note = remote_interrupted_note(ctx, plan)
    else:
        note = "the active generation is untouched (the switch is atomic)"
        note += half_built_note(settled_half_built(ctx.profile.target.root))
    if ctx.provisioner is not None:
        note += (
            "; a Proxmox task already started (snapshot, config change, start) goes on on the node"
        )
    return note


def half_built_note(left: list[str]) -> str:
    if left:
        return f"; the half-built {', '.join(left)} is removed by the next `envlock apply`"
    return "; no half-built generation was left"


WAITS_FOR_IT = "`envlock check` shows where it ended, and a new `envlock apply` waits for it"


def remote_interrupted_note(ctx: Context, plan: Plan | None) -> str:
    """The remote root as the target answers once the agent stopped: the active generation
    (this apply's, if it switched before it stopped) and any half-built one; or that the
    agent is still at work, or that the target could not be asked."""
    state = settled_remote(ctx)
    if state is None:
        return (
            "the target could not be asked what the agent left: it finishes its step or "
            f"leaves the root as it was (the switch is atomic); {WAITS_FOR_IT}"
        )
    if state.busy:
        return (
            f"the agent on the target is still at work under the root's lock ({state.busy}): "
            f"it finishes its step or leaves the root as it was (the switch is atomic); "
            + WAITS_FOR_IT
        )
    before = plan.assumed.current if plan is not None and plan.assumed is not None else None
    if state.current != before and state.current is not None:
        note = f"the agent on the target switched to generation {state.current} before it stopped"
    else:
        note = "the active generation is untouched (the switch is atomic)"
    return note + half_built_note([g.name for g in state.generations if not g.complete])


def settled_remote(ctx: Context, seconds: float = 5.0) -> State | None:
    """The remote root once the interrupted agent let go of its lock, asked over a new
    connection (up to `seconds`; a second Ctrl-C stops waiting): None if it cannot be asked."""
    deadline = time.monotonic() + seconds
    state = None
    try:
        state = gather_state(ctx)
        while state.busy and time.monotonic() < deadline:
            time.sleep(0.3)
            state = gather_state(ctx)
    except (EnvlockError, KeyboardInterrupt):
        pass
    return state


def settled_half_built(root: str, seconds: float = 5.0) -> list[str]:
    """The half-built generations a local root keeps once the interrupted agent has stopped:
    it removes its own build as it stops, so wait a moment (a second Ctrl-C stops waiting)."""
    deadline = time.monotonic() + seconds
    left = half_built(root)
    try:
        while left and time.monotonic() < deadline:
            time.sleep(0.1)
            left = half_built(root)
    except KeyboardInterrupt:
        pass
    return left


def half_built(root: str) -> list[str]:
    """The generations of a local root without generation.json: a build cut short (its
    agent removes it as it stops; one still there waits for the next apply)."""
    from envlock.agent.core import GEN_RE, GENERATION

    base = os.path.join(root, "generations")
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return []
    return [
        name
        for name in names
        if GEN_RE.match(name) and not os.path.lexists(os.path.join(base, name, GENERATION))
    ]


def show_container_steps(drifts: list[Drift], as_json: bool) -> None:
    if drifts and not as_json:
        ui.out.print(f"[bold]container: {len(drifts)} change(s)[/]")
        ui.table(drift_table(drifts))
