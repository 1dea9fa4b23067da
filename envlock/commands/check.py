"""`envlock check PROFILE`: report drift before a run."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import click

from envlock import ui
from envlock.commands.common import (
    across_fleet,
    json_option,
    print_drift,
    print_fixes,
    with_context,
)
from envlock.errors import EXIT_DRIFT
from envlock.reconcile.context import (
    Context,
    check_all,
    held_context,
    hold_notice,
)
from envlock.reconcile.gpu import gpu_note
from envlock.runs.cache import cache_warnings

if TYPE_CHECKING:
    # A fleet's code loads only for a fleet profile: one target's check never pays for it.
    from envlock.fleet import MemberResult, Progress


def check_member(
    ctx: Context, progress: Progress, *, deep: bool, strict: bool, as_json: bool
) -> MemberResult:
    """check on one fleet member: its generation, lock, hold and drift."""
    from envlock.fleet import MemberResult

    _container, state, drifts = check_all(ctx, deep=deep)
    if state is None:
        return MemberResult(EXIT_DRIFT, "drift", drift=len(drifts), note="container not running")
    held = held_context(ctx, state)
    gen = state.current_generation
    for d in drifts:
        progress(f"{d.kind} {d.subject}: {d.expected} → {d.actual}")
    result = "drift" if drifts else "rolled back" if held else "clean"
    return MemberResult(
        EXIT_DRIFT if drifts or (strict and held) else 0,
        result,
        generation=gen.number if gen else None,
        lock=gen.lock_hash if gen else "",
        hold=held is not None,
        drift=len(drifts),
        data={"drift": [d.to_json() for d in drifts]},
    )


@click.command("check")
@with_context(allow_stale=True)
@across_fleet(check_member, command="check")
@click.option("--deep", is_flag=True, help="Re-hash every file against the wheels' RECORDs.")
@click.option(
    "--strict",
    is_flag=True,
    help="Also exit 1 while a rollback holds the target on another lock (for CI).",
)
@json_option
def command(ctx: Context, deep: bool, strict: bool, as_json: bool) -> None:
    """Report drift between the target and the lock (exit 1 on drift).

    After `envlock rollback`, the active generation is judged against its own lock: the
    rollback itself is a notice (exit 0, or 1 with --strict)."""
    with ui.status("checking", quiet=as_json or not deep):
        # state is None when the container does not run: nothing inside can be reached.
        _container, state, drifts = check_all(ctx, deep=deep, meanwhile=ui.prepare_for_terminal)
    checked = state.files.checked if state and state.files else 0
    notice = hold_notice(ctx, state) if state else None
    held = held_context(ctx, state) if state else None
    local = not ctx.profile.target.remote
    shown = ui.shown_path(ctx.profile.path)
    warnings = cache_warnings(state.cache, dict(os.environ), local, shown) if state else []
    expect = ctx.expectation()
    gpu_skip = gpu_note(state.gpu, state.torch, expect.devices, expect.gpu_count) if state else None
    if as_json:
        ui.emit_json(
            "check",
            {
                "profile": ctx.profile.name,
                "lock": ctx.lock.short_hash,
                "hold": {
                    **state.hold.to_json(),
                    "lock": None if held.adopted else held.lock.short_hash,
                }
                if state and state.hold and held
                else None,
                "generation": state.current if state else None,
                "deep": deep,
                "files_checked": checked,
                "clean": not drifts,
                "drift": [d.to_json() for d in drifts],
                "warnings": warnings,
                "gpu": {**state.hardware, "note": gpu_skip} if state else None,
            },
        )
    else:
        gen = state.current_generation if state else None
        where = f"generation {gen.number}" if gen else "target"
        mode = "deep" if deep else "fast"
        # An adopted generation has no lock: its manifest is what it is judged by.
        judged = (
            "its manifest" if held and held.adopted else f"lock {(held or ctx).lock.short_hash}"
        )
        matches = f"{where} matches {judged} ({mode} check, {checked} files)"
        if strict and notice and not drifts:
            # What fails a --strict check is the hold: its reason is the output, not a ✓.
            ui.out.print(f"[bold red]✗[/] --strict: {ui.escape(notice)}")
            ui.out.print(f"  {ui.escape(matches)}, its own")
        else:
            print_drift(drifts, matches)
            print_fixes(ctx, drifts)
            if notice:
                ui.info(notice)
        if gpu_skip:
            ui.info(gpu_skip)
        for warning in warnings:
            ui.warn(warning)
    sys.exit(EXIT_DRIFT if drifts or (strict and notice) else 0)
