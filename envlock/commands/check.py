"""`envlock check PROFILE`: report drift before a run.

One value per run (PDM's shape): `check_of(ctx, …)` returns a `CheckResult`; the text
renderer, the --json document and a fleet member's row are all read from it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from envlock import ui
from envlock.base.drift_kinds import Drift
from envlock.commands.common import (
    across_fleet,
    fixes_of,
    json_option,
    print_drift,
    print_fix_lines,
    with_context,
)
from envlock.errors import EXIT_DRIFT
from envlock.reconcile.context import (
    Context,
    Probe,
    check_all,
    held_context,
    hold_notice,
)
from envlock.reconcile.gpu import gpu_note
from envlock.reconcile.state import State
from envlock.runs.cache import cache_warnings

if TYPE_CHECKING:
    # A fleet's code loads only for a fleet profile: one target's check never pays for it.
    from envlock.converge.fleet import MemberResult, Progress

KIND = "check"


@dataclass(frozen=True)
class CheckResult:
    """What a check found: the state (None while the container does not run), its drift,
    the hold and what it is judged by, the cache's warnings and the GPU's note."""

    profile: str
    lock: str  # the profile's lock id
    state: State | None
    drifts: tuple[Drift, ...]
    deep: bool
    strict: bool
    held: bool = False  # a rollback holds the root on another generation
    judged_by: str = ""  # "lock <id>", or "its manifest" for an adopted generation
    hold: dict[str, Any] | None = None  # the hold's record (--json)
    notice: str | None = None
    fixes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    gpu_note: str | None = None

    @property
    def checked(self) -> int:
        return self.state.files.checked if self.state and self.state.files else 0

    @property
    def code(self) -> int:
        return EXIT_DRIFT if self.drifts or (self.strict and self.notice) else 0

    def to_json(self) -> dict[str, Any]:
        state = self.state
        return {
            "profile": self.profile,
            "lock_id": self.lock,
            # The lock the generation was judged by: the held one's during a hold (None for
            # an adopted generation, judged by its manifest), else the profile's.
            "judged_lock_id": self.hold["lock_id"] if self.hold else self.lock,
            "hold": self.hold,
            "generation": state.current if state else None,
            "deep": self.deep,
            "files_checked": self.checked,
            "clean": not self.drifts,
            "drift": [d.to_json() for d in self.drifts],
            "warnings": list(self.warnings),
            "gpu": {**state.hardware, "note": self.gpu_note} if state else None,
        }

    def member(self) -> MemberResult:
        """A fleet member's row: the same value, summed up."""
        from envlock.converge.fleet import MemberResult

        if self.state is None:
            return MemberResult(
                EXIT_DRIFT,
                "drift",
                drift=len(self.drifts),
                note="container not running",
                data=self.to_json(),
            )
        gen = self.state.current_generation
        return MemberResult(
            self.code,
            "drift" if self.drifts else "rolled back" if self.held else "clean",
            generation=gen.number if gen else None,
            lock=gen.lock_hash if gen else "",
            hold=self.held,
            drift=len(self.drifts),
            data=self.to_json(),
        )


def check_of(
    ctx: Context, *, deep: bool, strict: bool, meanwhile: Callable[[], object] | None = None
) -> CheckResult:
    """The one producer of a check's result (a single target's, or one fleet member's)."""
    # state is None when the container does not run: nothing inside can be reached.
    _container, state, drifts = check_all(ctx, Probe(deep=deep), meanwhile=meanwhile)
    fixes = fixes_of(ctx, drifts)
    base = CheckResult(
        ctx.profile.name, ctx.lock.short_hash, state, tuple(drifts), deep, strict, fixes=fixes
    )
    if state is None:
        return base
    held = held_context(ctx, state)
    local = not ctx.profile.target.remote
    shown = ui.shown_path(ctx.profile.path)
    expect = ctx.expectation()
    return CheckResult(
        base.profile,
        base.lock,
        state,
        base.drifts,
        deep,
        strict,
        held=held is not None,
        # An adopted generation has no lock: its manifest is what it is judged by.
        judged_by="its manifest"
        if held and held.adopted
        else f"lock {(held or ctx).lock.short_hash}",
        hold={**state.hold.to_json(), "lock_id": None if held.adopted else held.lock.short_hash}
        if state.hold and held
        else None,
        notice=hold_notice(ctx, state),
        fixes=fixes,
        warnings=tuple(cache_warnings(state.cache, dict(os.environ), local, shown)),
        gpu_note=gpu_note(state.gpu, state.torch, expect.devices, expect.gpu_count),
    )


def render_text(result: CheckResult) -> None:
    gen = result.state.current_generation if result.state else None
    where = f"generation {gen.number}" if gen else "target"
    mode = "deep" if result.deep else "fast"
    judged = result.judged_by or f"lock {result.lock}"
    matches = f"{where} matches {judged} ({mode} check, {result.checked} files)"
    if result.strict and result.notice and not result.drifts:
        # What fails a --strict check is the hold: its reason is the output, not a ✓.
        ui.out.print(f"[bold red]✗[/] --strict: {ui.escape(result.notice)}")
        ui.out.print(f"  {ui.escape(matches)}, its own")
    else:
        print_drift(list(result.drifts), matches)
        print_fix_lines(result.fixes)
        if result.notice:
            ui.info(result.notice)
    if result.gpu_note:
        ui.info(result.gpu_note)
    for warning in result.warnings:
        ui.warn(warning)


def check_member(
    ctx: Context, progress: Progress, *, deep: bool, strict: bool, as_json: bool
) -> MemberResult:
    """check on one fleet member: its generation, lock, hold and drift."""
    result = check_of(ctx, deep=deep, strict=strict)
    for d in result.drifts:
        progress(f"{d.kind} {d.subject}: {d.expected} → {d.actual}")
    return result.member()


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
        result = check_of(ctx, deep=deep, strict=strict, meanwhile=ui.prepare_for_terminal)
    if as_json:
        ui.emit_json(KIND, result.to_json())
    else:
        render_text(result)
    sys.exit(result.code)
