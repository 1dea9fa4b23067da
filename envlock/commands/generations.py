"""`envlock generations PROFILE`: the generations on the target and which is active."""

from __future__ import annotations

import click
from rich.table import Table

from envlock import ui
from envlock.commands.common import json_option, with_context
from envlock.reconcile.context import Context, gather_state, held_context


@click.command("generations")
@with_context(allow_stale=True)
@json_option
def command(ctx: Context, as_json: bool) -> None:
    """List generations, their locks and which one is active."""
    state = gather_state(ctx, verify=False)  # listing needs no file verification
    hold = state.hold if held_context(ctx, state) else None
    rows = [
        {
            "number": g.number,
            "name": g.name,
            "lock": g.lock_hash,
            "complete": g.complete,
            "active": g.name == state.current,
            "built": g.meta.get("built"),
            "files": g.meta.get("files"),
            "bytes": g.meta.get("bytes"),
            "matches_lock": g.lock_hash == ctx.lock.short_hash,
            "held": hold is not None and g.name == hold.generation,
        }
        for g in state.generations
    ]
    if as_json:
        ui.emit_json(
            {
                "current": state.current,
                "hold": hold.to_json() if hold else None,
                "generations": rows,
                "history": [s.to_json() for s in state.history],
            }
        )
        return
    if not rows:
        ui.out.print("no generations yet: run `envlock apply`")
        return
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("", "gen", "lock", "built", "files", "size", "note"):
        table.add_column(column)
    for row in rows:
        note = "incomplete" if not row["complete"] else ""
        if row["matches_lock"]:
            note = "the profile's lock"
        if row["held"] and hold is not None:
            note = f"held (rolled back from {hold.from_} at {hold.time})"
        table.add_row(
            "*" if row["active"] else "",
            str(row["number"]),
            str(row["lock"]),
            str(row["built"] or ""),
            str(row["files"] or ""),
            ui.size(int(row["bytes"])) if row["bytes"] else "",
            note,
        )
    ui.out.print(table)
