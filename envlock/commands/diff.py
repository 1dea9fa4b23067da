"""`envlock diff A B`: what changed between two runs (snapshots, checkpoint dirs or locks)."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from envlock import ui
from envlock.base.limits import command_budget, printable
from envlock.commands.common import json_option
from envlock.errors import EXIT_DRIFT, EXIT_FAILED, OperationError
from envlock.runs.coverage import Coverage, coverage
from envlock.runs.diff import Group, Side, compare, incomplete, load_side
from envlock.runs.diff_data import change_text
from envlock.runs.diff_folds import remembered, with_folds_named
from envlock.runs.diff_values import excerpt, is_composite, long_texts

KIND = "diff"


@dataclass(frozen=True)
class DiffResult:
    """Two runs compared: each side as read, the groups of differences (bounded), and what
    could not be read (the comparison is then incomplete: never "no differences")."""

    a: str  # each side as the user named it
    b: str
    side_a: Side
    side_b: Side
    groups: tuple[Group, ...]
    unread: tuple[str, ...]
    coverage: Coverage

    @property
    def differ(self) -> bool:
        return any(g.counted for g in self.groups)  # run paths alone are no difference

    @property
    def code(self) -> int:
        if self.unread:
            return EXIT_FAILED
        return EXIT_DRIFT if self.differ else 0

    def to_json(self) -> dict[str, Any]:
        return {
            "a": self.side_a.label,
            "b": self.side_b.label,
            "identical": not self.differ and not self.unread,
            "complete": not self.unread,
            "sides": {"a": self.side_a.to_json(), "b": self.side_b.to_json()},
            "groups": [g.to_json() for g in self.groups],
            "coverage": self.coverage.to_json(),
        }

    def incomplete(self) -> OperationError:
        """What could not be read, as the error after the report (exit 3)."""
        return OperationError(
            f"the comparison is incomplete: {'; '.join(self.unread)}",
            hint=("what was read is compared above; " if self.groups else "nothing else differs; ")
            + "repair or remove what could not be read",
        )


def diff_of(a: str, b: str, *, follow_links: bool, weights: bool) -> DiffResult:
    """The one producer of diff's result: both sides read within one budget, compared."""
    with command_budget("diff"), remembered() as folds:
        side_a = load_side(a, follow_links, weights)
        side_b = load_side(b, follow_links, weights)
    groups = tuple(g.bounded() for g in with_folds_named(compare(side_a, side_b), folds))
    covered = coverage(side_a, side_b, weights)
    unread = (*incomplete(side_a, side_b), *covered.unread)
    return DiffResult(a, b, side_a, side_b, groups, unread, covered)


def render_text(result: DiffResult) -> None:
    a, b = result.a, result.b
    if not result.differ and not result.unread:
        said = ui.escape(result.coverage.headline())
        ui.out.print(f"[green]✓[/] {ui.escape(a)} and {ui.escape(b)}: {said}")
    print_compared(result.side_a, result.side_b)
    print_found_below(result)
    print_groups(a, b, list(result.groups))


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
    incomplete. Both sides are read within one budget of time and memory (see the docs'
    Security page).
    Without --weights only headers and pickles are read: equal metadata, not equal values.
    """
    result = diff_of(a, b, follow_links=follow_links, weights=weights)
    if as_json:
        ui.emit_json(KIND, result.to_json())
    else:
        render_text(result)
    if result.unread:
        # Never "no differences" on what was not read: a distinct outcome, exit 3.
        raise result.incomplete()
    sys.exit(result.code)


def print_compared(a: Side, b: Side) -> None:
    """Name the checkpoint each side compared: which file of a directory, and why."""
    for name, side in (("A", a), ("B", b)):
        if side.checkpoint is not None and side.checkpoint.path != side.label:
            ui.out.print(f"  {name}: compared {ui.untrusted(side.checkpoint.reason)}")


def print_found_below(result: DiffResult) -> None:
    """Name the snapshot a side read from deeper in the directory given (a tracker's
    download: MLflow's envlock/<checkpoint>/, W&B's artifacts/<name>:v<N>/)."""
    for name, given, side in (("A", result.a, result.side_a), ("B", result.b, result.side_b)):
        if side.checkpoint is None and Path(side.label) != Path(given):
            said = f"the snapshot in {side.label} (the newest in {given})"
            ui.out.print(f"  {name}: compared {ui.untrusted(said)}")


SHOWN_CHANGES = 200  # changes printed per group; --json carries them all (bounded)
SHOWN_VALUE = 400  # characters of one value printed


def show(value: Any) -> str:
    if value is None:
        return "—"
    return printable(value if isinstance(value, str) else json.dumps(value), SHOWN_VALUE)


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
        for change in group.changes[:SHOWN_CHANGES]:
            long = long_texts(change.a, change.b, SHOWN_VALUE)
            if change.inside is not None or (is_composite(change.a) and is_composite(change.b)):
                text = ui.untrusted(excerpt(change.a, change.b, change.inside))
            elif long is not None:
                text = ui.untrusted(long)
            elif change.kind == "added":
                text = f"[green]+ {ui.untrusted(show(change.b))}[/] (only in B)"
            elif change.kind == "removed":
                text = f"[red]- {ui.untrusted(show(change.a))}[/] (only in A)"
            else:
                text = f"{ui.untrusted(show(change.a))} → {ui.untrusted(show(change.b))}"
            text = change_text(group.name, change) or text  # metrics and data say their own
            if change.also:  # the same change, recorded again by another source
                text += f" [dim](also {ui.untrusted(', '.join(change.also))})[/]"
            table.add_row(ui.untrusted(change.key), text)
        ui.table(table)
        if len(group.changes) > SHOWN_CHANGES:
            more = len(group.changes) - SHOWN_CHANGES
            ui.out.print(f"  [dim]… {more:,} more changes (--json lists them)[/]")
