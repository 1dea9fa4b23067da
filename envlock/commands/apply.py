"""`envlock apply PROFILE`: converge the target to the lock."""

from __future__ import annotations

import sys
import time

import click

from envlock import ui
from envlock.apply import check, execute, open_context, verify_after
from envlock.commands.common import (
    json_option,
    plan_json,
    print_plan,
    profile_argument,
    progress_printer,
)
from envlock.errors import EXIT_USAGE
from envlock.plan import make_plan


@click.command("apply")
@profile_argument
@click.option("-y", "--yes", is_flag=True, help="Do not ask before acting.")
@click.option("--no-wait", is_flag=True, help="Fail instead of waiting for another apply.")
@json_option
def command(profile: str, yes: bool, no_wait: bool, as_json: bool) -> None:
    """Converge the target to the lock: build, switch, deploy, link."""
    started = time.perf_counter()
    ctx = open_context(profile)
    state, drifts = check(ctx)
    plan = make_plan(ctx.expectation(), state, drifts)
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
    verify_after(ctx)
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
