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
from envlock.errors import EXIT_DRIFT
from envlock.runs.diff import Group, compare, load_side
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
def command(a: str, b: str, as_json: bool, follow_links: bool) -> None:
    """Show what differs between runs A and B (exit 1 when they differ).

    Each side is an envlock-snapshot.json, a checkpoint directory holding one, or a lock.
    Both sides are read within one budget of time and memory (see the README).
    """
    with command_budget("diff"):
        side_a, side_b = load_side(a, follow_links), load_side(b, follow_links)
    groups = [g.bounded() for g in compare(side_a, side_b)]
    differ = any(g.counted for g in groups)  # run paths alone are no difference
    if as_json:
        ui.emit_json(
            "diff",
            {
                "a": side_a.label,
                "b": side_b.label,
                "identical": not differ,
                "groups": [g.to_json() for g in groups],
            },
        )
    else:
        if not differ:
            ui.out.print(f"[green]✓[/] no differences between {ui.escape(a)} and {ui.escape(b)}")
        print_groups(a, b, groups)
    sys.exit(EXIT_DRIFT if differ else 0)


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
            table.add_row(ui.untrusted(change.key), text)
        ui.out.print(table)
