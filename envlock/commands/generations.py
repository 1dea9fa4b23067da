"""`envlock generations PROFILE`: the generations on the target and which is active."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import click
from rich.table import Table

from envlock import ui
from envlock.commands.common import across_fleet, json_option, with_context
from envlock.converge.fleet import MemberResult, Progress
from envlock.reconcile.context import Context, Probe, gather_state, held_context
from envlock.reconcile.state import Hold, State, Switch
from envlock.targets.base import ContainerSnapshot
from envlock.targets.registry import needs_a_container

KIND = "generations"


@dataclass(frozen=True)
class GenerationRow:
    """One generation on the target, as the table and --json show it."""

    number: int
    name: str
    lock_id: str  # the lock id it was built from
    complete: bool
    active: bool
    built: str | None
    files: int | None
    bytes: int | None
    adds_bytes: int | None  # what it adds beside the others (hardlinks shared)
    matches_lock: bool  # built from the profile's lock
    held: bool  # a rollback holds the root on it
    adopted_from: str | None  # `apply --adopt`: no lock built it
    irreplaceable: str | None = None  # why no lock can rebuild it (adopted, lock gone): gc keeps it

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def note(self, hold: Hold | None) -> str:
        """The table's note: incomplete, the profile's lock, adopted, held."""
        note = "incomplete" if not self.complete else ""
        if self.matches_lock:
            note = "the profile's lock"
        if self.irreplaceable:
            note = ui.escape(self.irreplaceable)
        if self.held and hold is not None:
            note += ("; " if note else "") + f"held (rolled back from {hold.from_} at {hold.time})"
        return note


@dataclass(frozen=True)
class GenerationsResult:
    """The generations on the target (one row each), which is active, and the hold."""

    generation: str | None  # the active generation's name
    number: int | None  # its number, and the lock it was built from
    lock: str
    hold: Hold | None  # the rollback that holds the root, when one does
    rows: tuple[GenerationRow, ...]
    history: tuple[Switch, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "generation": self.generation,
            "current": self.generation,  # the old name of "generation", kept one release
            "hold": self.hold.to_json() if self.hold else None,
            "generations": [row.to_json() for row in self.rows],
            "history": [switch.to_json() for switch in self.history],
        }

    def member(self) -> MemberResult:
        """A fleet member's row: the same value, summed up."""
        return MemberResult(
            0,
            f"{len(self.rows)} generation(s)",
            generation=self.number,
            lock=self.lock,
            hold=self.hold is not None,
            data=self.to_json(),
        )


def generations_of(ctx: Context) -> GenerationsResult:
    """The one producer of the generations' result (a single target's, or one member's)."""
    state = gather_state(ctx, Probe(verify=False))  # listing needs no file verification
    gen = state.current_generation
    return GenerationsResult(
        state.current,
        gen.number if gen else None,
        gen.lock_hash if gen else "",
        state.hold if held_context(ctx, state) else None,
        generation_rows(ctx, state),
        state.history,
    )


def generations_member(
    ctx: Context, progress: Progress, *, container: bool, as_json: bool
) -> MemberResult:
    """generations on one fleet member: how many, which is active, on which lock."""
    if container:
        if ctx.provisioner is None:
            raise needs_a_container("--container")
        snaps = ctx.provisioner.snapshots()
        return MemberResult(
            0, f"{len(snaps)} snapshot(s)", data={"snapshots": [s.to_json() for s in snaps]}
        )
    result = generations_of(ctx)
    return result.member()


@click.command("generations")
@with_context(allow_stale=True)
@across_fleet(generations_member, command="generations")
@click.option(
    "--container",
    is_flag=True,
    help="List the container's snapshots instead (Proxmox snapshots, Docker commits).",
)
@json_option
def command(ctx: Context, container: bool, as_json: bool) -> None:
    """List generations, their locks and which one is active."""
    if container:
        list_snapshots(ctx, as_json)
        return
    result = generations_of(ctx)
    if as_json:
        ui.emit_json(KIND, result.to_json())
    else:
        render_text(result)


def render_text(result: GenerationsResult) -> None:
    if not result.rows:
        ui.out.print("no generations yet: run `envlock apply`")
        return
    hold = result.hold
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("", "gen", "lock", "built", "files", "size", "adds", "note"):
        table.add_column(column)
    for row in result.rows:
        table.add_row(
            "*" if row.active else "",
            str(row.number),
            "-" if row.adopted_from else row.lock_id,
            str(row.built or ""),
            str(row.files or ""),
            ui.size(int(row.bytes)) if row.bytes else "",
            ui.size(int(row.adds_bytes)) if row.adds_bytes is not None else "",
            row.note(hold),
        )
    ui.table(table)


def list_snapshots(ctx: Context, as_json: bool) -> None:
    """The container's snapshots, oldest first, with the generation and lock in each."""
    provisioner = ctx.provisioner
    if provisioner is None:
        raise needs_a_container("--container")
    snaps = provisioner.snapshots()
    if as_json:
        ui.emit_json("generations-container", container_document(provisioner.describe(), snaps))
        return
    if not snaps:
        ui.out.print(f"{provisioner.describe()} has no snapshots")
        return
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("snapshot", "taken (UTC)", "generation", "lock", "note"):
        table.add_column(column)
    for snap in snaps:
        note = f"kept by {provisioner.keep_key}" if snap.ours else "not envlock's: never pruned"
        table.add_row(
            ui.escape(snap.name),
            snap.taken,
            ui.escape(snap.generation),
            ui.escape(snap.lock),
            note,
        )
    ui.table(table)


def container_document(container: str, snaps: list[ContainerSnapshot]) -> dict[str, Any]:
    """`generations --container --json`: the container and its snapshots, unknowns null."""
    return {"container": container, "snapshots": [s.to_json() for s in snaps]}


def generation_rows(ctx: Context, state: State) -> tuple[GenerationRow, ...]:
    """One row per generation: the single target's table and --json, and a fleet member's."""
    hold = state.hold if held_context(ctx, state) else None
    return tuple(
        GenerationRow(
            g.number,
            g.name,
            g.lock_hash,
            g.complete,
            active=g.name == state.current,
            built=g.meta.get("built"),
            files=g.meta.get("files"),
            bytes=g.meta.get("bytes"),
            adds_bytes=g.meta.get("own_bytes"),
            matches_lock=g.lock_hash == ctx.lock.short_hash,
            held=hold is not None and g.name == hold.generation,
            adopted_from=g.adopted_from,
            irreplaceable=g.irreplaceable if g.complete else None,
        )
        for g in state.generations
    )
