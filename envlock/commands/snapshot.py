"""`envlock snapshot PROFILE DIR`: record the environment next to a checkpoint."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from envlock import ui
from envlock.commands.common import json_option, with_context
from envlock.errors import UsageError
from envlock.reconcile.context import Context
from envlock.runs.snapshot import take_snapshot, write_snapshot


@click.command("snapshot")
@with_context(allow_stale=True)
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False, exists=True),
    help="A JSON file with the run's config (hyperparameters) to record.",
)
@json_option
def command(ctx: Context, directory: Path, config_file: str | None, as_json: bool) -> None:
    """Write DIR/envlock-snapshot.json: lock, observed state, scripts, env, cache, config."""
    config = None
    if config_file:
        try:
            config = json.loads(Path(config_file).read_text())
        except ValueError as exc:
            raise UsageError(f"{config_file}: not valid JSON: {exc}") from None
    data = take_snapshot(ctx, command=sys.argv, config=config)
    path = write_snapshot(directory, data)
    torch = (data["torch"] or {}).get("version")
    if as_json:
        ui.emit_json(
            {
                "snapshot": str(path),
                "generation": data["generation"],
                "packages": len(data["packages"]),
                "torch": torch,
            }
        )
        return
    ui.out.print(
        f"[green]✓[/] wrote {path}: generation {data['generation']}, "
        f"{len(data['packages'])} packages" + (f", torch {torch}" if torch else "")
    )
