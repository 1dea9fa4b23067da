"""`envlock apply PROFILE`: converge the target to the lock (or to a snapshot's lock)."""

from __future__ import annotations

import sys
import time

import click

from envlock import ui
from envlock.apply import (
    Context,
    check,
    context_from_snapshot,
    execute,
    open_context,
    snapshot_compatibility,
    verify_after,
)
from envlock.commands.common import (
    json_option,
    plan_json,
    print_plan,
    profile_argument,
    progress_printer,
)
from envlock.errors import EXIT_USAGE, UsageError
from envlock.plan import Plan, make_plan
from envlock.snapshots import load_snapshot
from envlock.state import State


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
@json_option
def command(
    profile: str, yes: bool, no_wait: bool, snapshot_dir: str | None, as_json: bool
) -> None:
    """Converge the target to the lock: build, switch, deploy, link."""
    started = time.perf_counter()
    ctx = context_from_snapshot(profile, snapshot_dir) if snapshot_dir else open_context(profile)
    state, drifts = check(ctx)
    if snapshot_dir:
        refuse_incompatible(ctx, snapshot_dir, state)
    plan = make_plan(ctx.expectation(), state, drifts)
    if snapshot_dir:
        plan = without_mismatched_scripts(ctx, plan)
    if plan.empty:
        if as_json:
            ui.emit_json({**plan_json(plan), "applied": False})
        else:
            print_plan(plan)
        return
    if not as_json:
        print_plan(plan)
    if not yes:
        if not sys.stdin.isatty():
            ui.error("refusing to act without confirmation: pass -y (stdin is not a terminal)")
            sys.exit(EXIT_USAGE)
        click.confirm("apply this plan?", abort=True, err=True)
    answer = execute(ctx, plan, wait=not no_wait, on_progress=progress_printer(as_json))
    scripts_skipped = bool(snapshot_dir) and ctx.profile.script_hashes() != ctx.scripts
    verify_after(ctx, ignore=("script-modified", "script-missing") if scripts_skipped else ())
    elapsed = time.perf_counter() - started
    if as_json:
        ui.emit_json(
            {
                **plan_json(plan),
                "applied": True,
                "current": answer.get("current"),
                "seconds": round(elapsed, 3),
            }
        )
        return
    ui.out.print(
        f"[green]✓[/] applied: generation {answer.get('current')} is active ({elapsed:.1f}s)"
    )
    if snapshot_dir:
        ui.info(
            "note: this generation follows the snapshot's lock, not the profile's; "
            "`envlock check` reports that until you apply the profile again"
        )


def refuse_incompatible(ctx: Context, snapshot_dir: str, state: State) -> None:
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
    return Plan(tuple(a for a in plan.actions if a.kind != "scripts"), plan.reason)
