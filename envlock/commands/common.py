"""Pieces every command shares: arguments, options and the rendering of reports."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from envlock import ui
from envlock.errors import UsageError

if TYPE_CHECKING:
    # Imported where used: `inspect` and `diff` need none of the reconciler, and a table
    # is drawn by few commands (ui: rich is lazy).
    from rich.table import Table

    from envlock.base.drift_kinds import Drift
    from envlock.converge.fleet import MemberResult
    from envlock.reconcile.context import Context
    from envlock.reconcile.plan import Plan

# How many fleet members a command works on at a time (--jobs).
DEFAULT_JOBS = 4

F = TypeVar("F", bound=Callable[..., Any])

profile_argument = click.argument(
    "profile", type=click.Path(dir_okay=False, path_type=str), metavar="PROFILE"
)


def with_context(*, allow_stale: bool = False) -> Callable[[Callable[..., Any]], Any]:
    """Take the PROFILE argument and hand the command the Context opened from it (the way
    PDM hands each command its Project). Put it right under @click.command."""

    def decorate(func: Callable[..., Any]) -> Any:
        @functools.wraps(func)
        def wrapper(profile: str, **kwargs: Any) -> Any:
            from envlock.reconcile.context import open_context

            return func(open_context(profile, allow_stale=allow_stale), **kwargs)

        return profile_argument(wrapper)

    return decorate


def fleet_options(func: F) -> F:
    """--jobs and --on: how a command runs across the members of a fleet profile."""
    func = click.option(
        "--on",
        "on",
        multiple=True,
        metavar="SELECTOR",
        help="Fleet: only the members with this vmid, node or tag (repeatable).",
    )(func)
    return click.option(
        "--jobs",
        "jobs",
        type=int,
        default=DEFAULT_JOBS,
        show_default=True,
        help="Fleet: how many members at a time.",
    )(func)


def refuse_on(on: tuple[str, ...], fail_fast: bool = False) -> None:
    """--on (and --fail-fast) pick members of a fleet: an error for a single target."""
    if on or fail_fast:
        flag = "--on" if on else "--fail-fast"
        raise UsageError(
            f"{flag} is for a fleet profile (vmids or select); this profile names one target",
            hint=f"drop {flag}",
        )


def across_fleet(
    work: Callable[..., MemberResult] | None,
    *,
    command: str,
    one: bool | Callable[[dict[str, Any]], bool] = False,
) -> Callable[[Callable[..., Any]], Any]:
    """Put under @with_context: with a fleet profile, run `work(member_ctx, progress,
    **options)` on every member, or hand the command the one member --on picks (`one`: always,
    or when `one(options)` says so); with one target, run the command as it is."""

    def decorate(func: Callable[..., Any]) -> Any:
        @functools.wraps(func)
        def wrapper(ctx: Context, *, jobs: int, on: tuple[str, ...], **kwargs: Any) -> Any:
            from envlock.reconcile.context import is_fleet

            if is_fleet(ctx):
                from envlock.converge.fleet import one_member, run_fleet

                if work is None or (one(kwargs) if callable(one) else one):
                    return func(one_member(ctx, on, command), **kwargs)
                run_fleet(
                    ctx,
                    functools.partial(work, **kwargs),
                    on=on,
                    jobs=jobs,
                    as_json=bool(kwargs.get("as_json")),
                    # with a [container], the API reports a stopped member's state
                    include_stopped=ctx.profile.container is not None,
                    command=command,
                )
            refuse_on(on)
            return func(ctx, **kwargs)

        return fleet_options(wrapper)

    return decorate


def json_option(func: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")(func)


def progress_printer(quiet: bool) -> Callable[[str], None] | None:
    if quiet:
        return None
    return lambda line: ui.info(f"  {line}")


def drift_table(drifts: list[Drift]) -> Table:
    """Kind in one column; "subject: expected → actual" and the detail (dim) in the other."""
    from rich.table import Table

    table = Table(show_header=False, box=None, pad_edge=False, padding=(0, 2, 0, 0))
    table.add_column("kind", style="bold", no_wrap=True)
    table.add_column("what", overflow="fold")
    for d in drifts:
        # Subjects and values come from the target (file names, versions): never raw.
        text = f"{ui.untrusted(d.subject)}: {ui.untrusted(d.expected)} → {ui.untrusted(d.actual)}"
        if d.detail:
            text += f"\n[dim]{ui.untrusted(d.detail)}[/]"
        table.add_row(d.kind, text)
    return table


def print_drift(drifts: list[Drift], clean_message: str) -> None:
    if not drifts:
        ui.ok(clean_message)
        return
    ui.out.print(f"[bold red]✗ {len(drifts)} drift item(s)[/]")
    ui.table(drift_table(drifts))


def print_fixes(ctx: Context, drifts: list[Drift]) -> None:
    """What repairs these drift items, each once, most consequential first (on stderr)."""
    print_fix_lines(fixes_of(ctx, drifts))


def fixes_of(ctx: Context, drifts: list[Drift]) -> tuple[str, ...]:
    """The commands that repair these drift items, each once, most consequential first."""
    shown = ui.shown_path(ctx.profile.path)
    return tuple(dict.fromkeys(d.declared.fix.format(profile=shown) for d in drifts))


def print_fix_lines(fixes: tuple[str, ...]) -> None:
    for fix in fixes:
        ui.info(f"  fix: `{fix}`" if fix.startswith("envlock ") else f"  fix: {fix}")


def print_plan(plan: Plan) -> None:
    if plan.empty:
        ui.out.print(f"[green]✓[/] nothing to do: {ui.escape(plan.reason or 'in sync')}")
        return
    if plan.provisional:
        ui.out.print(
            f"[bold]provisional plan: {len(plan.actions)} action(s)[/] (another envlock "
            f"operation holds the root: {ui.escape(plan.provisional)}; planned again once "
            "this apply holds it, if the root changed)"
        )
    else:
        ui.out.print(f"[bold]plan: {len(plan.actions)} action(s)[/]")
    for index, action in enumerate(plan.actions, 1):
        ui.out.print(f"  {index}. {ui.escape(action.description)}")


def plan_json(plan: Plan) -> dict[str, Any]:
    return {"actions": [a.to_json() for a in plan.actions], "reason": plan.reason}
