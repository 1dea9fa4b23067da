"""`envlock diff A B`: what changed between two runs (snapshots, checkpoint dirs or locks)."""

from __future__ import annotations

import json
import sys
from typing import Any

import click
from rich.table import Table

from envlock import ui
from envlock.checkpoint.limits import command_budget
from envlock.commands.common import json_option
from envlock.errors import EXIT_DRIFT, OperationError
from envlock.runs.diff import Group, Side, compare, incomplete, load_side
from envlock.runs.diff_data import change_text


@click.command("diff")
@click.argument("a", metavar="A")
@click.argument("b", metavar="B")
@json_option
@click.option(
    "--follow-links",
    is_flag=True,
    help="Read symlinks in a checkpoint directory that lead outside it.",
)
@click.option(
    "--weights",
    is_flag=True,
    help="Also compare tensor contents (a streamed sha256 per tensor; reads every byte).",
)
def command(a: str, b: str, as_json: bool, follow_links: bool, weights: bool) -> None:
    """Show what differs between runs A and B (exit 1 when they differ).

    Each side is an envlock-snapshot.json, a lock, a checkpoint file, or a directory: a
    checkpoint, a run directory keeping several (the newest by step is compared, and named),
    or one holding a snapshot. Exit 3 when something could not be read: the comparison is
    incomplete. Both sides are read within one budget of time and memory (see the README).
    Without --weights only headers and pickles are read: equal metadata, not equal values.
    """
    with command_budget("diff"):
        side_a = load_side(a, follow_links, weights)
        side_b = load_side(b, follow_links, weights)
    groups = [g.bounded() for g in compare(side_a, side_b)]
    differ = any(g.counted for g in groups)  # run paths alone are no difference
    unread = incomplete(side_a, side_b)
    if as_json:
        ui.emit_json(
            "diff",
            {
                "a": side_a.label,
                "b": side_b.label,
                "identical": not differ and not unread,
                "complete": not unread,
                "sides": {"a": side_a.to_json(), "b": side_b.to_json()},
                "groups": [g.to_json() for g in groups],
            },
        )
    else:
        if not differ and not unread:
            ui.out.print(f"[green]✓[/] no differences between {ui.escape(a)} and {ui.escape(b)}")
        print_compared(side_a, side_b)
        print_groups(a, b, groups)
    if unread:
        # Never "no differences" on what was not read: a distinct outcome, exit 3.
        raise OperationError(
            f"the comparison is incomplete: {'; '.join(unread)}",
            hint="what was read is compared above; repair or remove what could not be read",
        )
    sys.exit(EXIT_DRIFT if differ else 0)


def print_compared(a: Side, b: Side) -> None:
    """Name the checkpoint each side compared: which file of a directory, and why."""
    for name, side in (("A", a), ("B", b)):
        if side.checkpoint is not None and side.checkpoint.path != side.label:
            ui.out.print(f"  {name}: compared {ui.untrusted(side.checkpoint.reason)}")


def show(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, str):
        return value
    return json.dumps(value)


def print_groups(a: str, b: str, groups: list[Group]) -> None:
    total = sum(len(g.changes) for g in groups if g.counted)
    if total:
        ui.out.print(
            f"[bold]{total} difference(s)[/] between A = {ui.escape(a)} and B = {ui.escape(b)}"
        )
    for group in groups:
        note = f" [dim]({ui.escape(group.note)})[/]" if group.note else ""
        ui.out.print(f"\n[bold]{group.name}[/]{note}")
        table = Table(show_header=False, box=None, pad_edge=False, padding=(0, 2, 0, 2))
        table.add_column("key", no_wrap=True)
        table.add_column("change", overflow="fold")
        for change in group.changes:
            if change.kind == "added":
                text = f"[green]+ {ui.untrusted(show(change.b))}[/] (only in B)"
            elif change.kind == "removed":
                text = f"[red]- {ui.untrusted(show(change.a))}[/] (only in A)"
            else:
                text = f"{ui.untrusted(show(change.a))} → {ui.untrusted(show(change.b))}"
            text = change_text(group.name, change) or text  # metrics and data say their own
            if change.also:  # the same change, recorded again by another source
                text += f" [dim](also {ui.untrusted(', '.join(change.also))})[/]"
            table.add_row(ui.untrusted(change.key), text)
        ui.out.print(table)
