"""`envlock snapshot PROFILE DIR`: record the environment next to a checkpoint."""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from envlock import ui
from envlock.base.limits import printable
from envlock.base.untrusted import read_named
from envlock.commands.common import across_fleet, json_option, with_context
from envlock.converge.fleet import MemberResult, Progress
from envlock.errors import UsageError
from envlock.reconcile.context import Context
from envlock.runs.snapshot import take_snapshot, write_snapshot
from envlock.runs.snapshot_doc import checked_metrics

KIND = "snapshot"


@dataclass(frozen=True)
class SnapshotResult:
    """The snapshot written: where (and, for a remote target, on which machine), the
    generation it records, how many packages, and torch's version."""

    path: Path
    generation: str | None  # "3-<lock id>"
    packages: int
    torch: str | None
    where: str = ""  # " on this machine (HOST…), recording TARGET" for a remote target

    code = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "snapshot": str(self.path),
            "generation": self.generation,
            "packages": self.packages,
            "torch": self.torch,
        }

    def member(self) -> MemberResult:
        """A fleet member's row: the same value, summed up."""
        number, _, lock = str(self.generation or "").partition("-")
        return MemberResult(
            0,
            "recorded",
            generation=int(number) if number.isdigit() else None,
            lock=lock,
            note=str(self.path),
            data={"snapshot": str(self.path), "packages": self.packages},
        )


def snapshot_of(
    ctx: Context,
    directory: Path,
    *,
    config_file: str | None,
    metrics: dict[str, int | float],
    force: bool,
) -> SnapshotResult:
    """The one producer of snapshot's result: take it, write it into `directory`."""
    data = take_snapshot(ctx, command=sys.argv, config=read_config(config_file), metrics=metrics)
    created = not directory.exists()
    path = write_snapshot(directory, data, replace=force)
    return SnapshotResult(
        path,
        data["generation"],
        len(data["packages"]),
        (data["torch"] or {}).get("version"),
        written_where(ctx, created),
    )


def render_text(result: SnapshotResult) -> None:
    ui.out.print(
        f"[green]✓[/] wrote {result.path}{result.where}: generation "
        f"{result.generation}, {result.packages} packages"
        + (f", torch {result.torch}" if result.torch else "")
    )


def snapshot_member(
    ctx: Context,
    progress: Progress,
    *,
    directory: Path,
    config_file: str | None,
    metrics: dict[str, int | float],
    force: bool,
    as_json: bool,
) -> MemberResult:
    """snapshot of one fleet member, into DIR/<vmid>/ (a Docker fleet's: DIR/ENGINE/NAME/):
    each container records its own."""
    settings = ctx.profile.target.settings
    result = snapshot_of(
        ctx,
        directory / settings.member_key,
        config_file=config_file,
        metrics=metrics,
        force=force,
    )
    return result.member()


def read_config(config_file: str | None) -> object:
    if not config_file:
        return None
    try:
        return json.loads(read_named(config_file, "config"))
    except FileNotFoundError:
        raise UsageError(f"{config_file}: no such file", hint="check the path") from None
    except ValueError as exc:
        raise UsageError(f"{config_file}: not valid JSON: {exc}") from None


def parse_metrics(values: tuple[str, ...]) -> dict[str, int | float]:
    """--metric NAME=NUMBER, each checked as envlock.snapshot(metrics=…) checks them."""
    metrics: dict[str, int | float] = {}
    for value in values:
        name, sep, number = value.partition("=")
        try:
            metrics[name] = int(number) if re.fullmatch(r"[+-]?\d+", number) else float(number)
        except ValueError:
            sep = ""
        if not sep:
            raise UsageError(
                f"--metric {printable(value, 80)}: expected NAME=NUMBER",
                hint="e.g. --metric tok_per_s=11600",
            )
    try:
        return checked_metrics(metrics)
    except ValueError as exc:
        raise UsageError(str(exc).replace("metrics: ", "--metric ", 1)) from None


@click.command("snapshot")
@with_context(allow_stale=True)
@across_fleet(snapshot_member, command="snapshot")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False, exists=True),
    help="A JSON file with the run's config (hyperparameters) to record.",
)
@click.option(
    "--metric",
    "metrics",
    multiple=True,
    callback=lambda _ctx, _param, value: parse_metrics(value),
    metavar="NAME=NUMBER",
    help="A number the run measured (tok_per_s=11600, step=20); repeatable.",
)
@click.option(
    "--force", is_flag=True, help="Replace a snapshot already in DIR (refused without it)."
)
@json_option
def command(
    ctx: Context,
    directory: Path,
    config_file: str | None,
    metrics: dict[str, int | float],
    force: bool,
    as_json: bool,
) -> None:
    """Write DIR/envlock-snapshot.json: lock, observed state, scripts, env, cache, config,
    the fingerprints of the profile's [data] and the metrics given."""
    result = snapshot_of(ctx, directory, config_file=config_file, metrics=metrics, force=force)
    if as_json:
        ui.emit_json(KIND, result.to_json())
    else:
        render_text(result)


def written_where(ctx: Context, created: bool) -> str:
    """For a remote target, which machine DIR is on: this one, not the target."""
    if not ctx.profile.target.remote:
        return ""
    import socket

    made = ", a directory created here" if created else ""
    return f" on this machine ({socket.gethostname()}{made}), recording {ctx.transport.name}"
