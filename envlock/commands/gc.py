"""`envlock gc PROFILE --keep K`: remove old generations (never the active or previous).

Like apply, add and remove it shows what it would remove and asks first (`-y` skips the
question, `--dry-run` only lists); on a fleet profile `--on VMID` picks the member."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click

from envlock import ui
from envlock.commands.common import (
    across_fleet,
    json_option,
    plan_json,
    print_plan,
    with_context,
)
from envlock.errors import EXIT_USAGE
from envlock.reconcile.context import Context, gather_state
from envlock.reconcile.execute import execute
from envlock.reconcile.generations import plan_gc
from envlock.reconcile.plan import Plan

KIND = "gc"


@dataclass(frozen=True)
class GcResult:
    """What gc removes (its plan), whether it did (not on --dry-run, nor when nothing is to
    go) and the bytes that freed."""

    plan: Plan
    dry_run: bool
    removed: bool = False
    freed: int = 0
    adds: int = 0  # what `generations` showed them to add: their files as built

    @property
    def doomed(self) -> list[str]:
        return doomed(self.plan)

    def to_json(self) -> dict[str, Any]:
        document = {**plan_json(self.plan), "freed_bytes": self.freed}
        return document if self.removed else {**document, "dry_run": self.dry_run}


@dataclass(frozen=True)
class Sparing:
    """What gc may remove although no lock can rebuild it: everything (`--include-adopted`)
    or the generations named (`--include N`)."""

    include_adopted: bool = False
    named: tuple[str, ...] = ()


def gc_of(
    ctx: Context,
    keep: int,
    *,
    dry_run: bool,
    sparing: Sparing = Sparing(),
    ask: Callable[[Plan], None],
    on_progress: Callable[[str], None] | None,
) -> GcResult:
    """The one producer of gc's result: plan, `ask` (which exits on no), remove."""
    state = gather_state(ctx)
    plan = plan_gc(state, keep, include_adopted=sparing.include_adopted, named=sparing.named)
    if plan.empty or dry_run:
        return GcResult(plan, dry_run)
    ask(plan)
    answer = execute(ctx, plan, on_progress=on_progress)
    going = set(doomed(plan))
    adds = sum(int(g.meta.get("own_bytes") or 0) for g in state.generations if g.name in going)
    return GcResult(plan, dry_run, removed=True, freed=answer.freed, adds=adds)


def render_text(result: GcResult) -> None:
    if result.removed:
        names = ", ".join(result.doomed)
        ui.out.print(f"[green]✓[/] removed {names}: {ui.size(result.freed)} freed")
        if result.freed > result.adds:
            ui.info(
                f"  {ui.size(result.adds)} of it their files as built (`generations`' adds), "
                f"{ui.size(result.freed - result.adds)} written since (bytecode, caches)"
            )
    elif result.plan.empty:
        print_plan(result.plan)
    else:
        described = result.plan.actions[0].description.removeprefix("remove ")
        ui.out.print(f"would remove {ui.escape(described)}")
        print_kept(result.plan)
        ui.info("dry run: nothing removed")


def print_kept(plan: Plan) -> None:
    """The generations gc keeps because no lock can rebuild them, each with how to remove it."""
    for note in filter(None, plan.reason.splitlines()):
        ui.out.print(ui.escape(note))


@click.command("gc")
@with_context(allow_stale=True)
@across_fleet(None, command="gc", one=True)
@click.option(
    "--keep",
    default=3,
    show_default=True,
    type=click.IntRange(min=0),
    help="How many of the newest generations to keep.",
)
@click.option("--dry-run", is_flag=True, help="List what would be removed; remove nothing.")
@click.option("-y", "--yes", is_flag=True, help="Do not ask before removing.")
@click.option(
    "--include-adopted",
    is_flag=True,
    help="Also remove generations no lock can rebuild (adopted, or their lock file gone).",
)
@click.option(
    "--include",
    "named",
    multiple=True,
    metavar="GEN",
    help="Also remove this generation (number or name) though no lock can rebuild it.",
)
@json_option
def command(
    ctx: Context,
    keep: int,
    dry_run: bool,
    yes: bool,
    include_adopted: bool,
    named: tuple[str, ...],
    as_json: bool,
) -> None:
    """Remove old generations; the active and the previous one always stay, and one no lock
    can rebuild (adopted, or its lock file gone) stays unless named or --include-adopted."""
    result = gc_of(
        ctx,
        keep,
        dry_run=dry_run,
        sparing=Sparing(include_adopted, named),
        ask=asking(yes, as_json),
        on_progress=None if as_json else ui.info,
    )
    if as_json:
        ui.emit_json(KIND, result.to_json())
    else:
        render_text(result)


def doomed(plan: Plan) -> list[str]:
    return [str(name) for name in plan.actions[0].args["names"]] if plan.actions else []


def asking(yes: bool, as_json: bool) -> Callable[[Plan], None]:
    """The question before removing: the plan and what it keeps shown (not under --json),
    then confirm."""

    def ask(plan: Plan) -> None:
        if not as_json:
            print_plan(plan)
            print_kept(plan)  # before the question: what stays, and why
        confirm(yes, plan)

    return ask


def confirm(yes: bool, plan: Plan) -> None:
    """Ask, as apply does; without a terminal to ask on, refuse and say how to go on."""
    # Here: only a gc that removes something needs apply's question.
    from envlock.commands.apply import confirm as ask

    if yes or sys.stdin.isatty():
        lost = plan.actions[0].args.get("irreplaceable") or []
        also = f", {len(lost)} of which no lock can rebuild" if lost else ""
        ask(yes, f"remove {len(doomed(plan))} generation(s){also}?")
        return
    ui.error(
        "refusing to remove generations without confirmation (stdin is not a terminal): "
        "pass -y to remove them, or --dry-run to only list them"
    )
    sys.exit(EXIT_USAGE)
