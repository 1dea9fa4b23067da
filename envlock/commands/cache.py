"""`envlock cache PROFILE status|save FILE|restore FILE`: the build's compile cache."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.table import Table

from envlock import ui
from envlock.atomic import refuse_non_regular
from envlock.commands.common import across_fleet, json_option, with_context
from envlock.errors import EXIT_DRIFT, UsageError
from envlock.fleet import MemberResult, Progress
from envlock.reconcile.context import Context
from envlock.runs.cache import cache_status, restore_cache, save_cache


def cache_member(
    ctx: Context, progress: Progress, *, action: str, file: Path | None, force: bool, as_json: bool
) -> MemberResult:
    """cache status of one fleet member: the active build's cache, its warmth."""
    status = cache_status(ctx)
    active = [entry for entry in status["dirs"] if entry["active"]]
    warmth = ui.warmth(active[0]["files"], active[0]["bytes"]) if active else "no cache"
    return MemberResult(0, warmth, data={"cache": status})


@click.command("cache")
@with_context(allow_stale=True)
@across_fleet(cache_member, command="cache", one=lambda options: options["action"] != "status")
@click.argument("action", type=click.Choice(["status", "save", "restore"]))
@click.argument("file", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--force",
    is_flag=True,
    help="save: overwrite FILE; restore: accept an archive of another build.",
)
@json_option
def command(ctx: Context, action: str, file: Path | None, force: bool, as_json: bool) -> None:
    """Show, save or restore the compile cache of the active build."""
    if action == "status":
        status = cache_status(ctx)
        if as_json:
            ui.emit_json("cache-status", status)
        else:
            print_status(status)
        return
    if file is None:
        raise UsageError(
            f"`envlock cache PROFILE {action}` needs a FILE",
            hint=f"envlock cache {ctx.profile.path} {action} compile-cache.tar.gz",
        )
    if action == "save":
        refuse_pointless_save(ctx, file, force)
        with ui.status("archiving the compile cache", quiet=as_json):
            size = save_cache(ctx, file)
        if as_json:
            ui.emit_json("cache-save", {"file": str(file), "bytes": size})
        else:
            ui.out.print(
                f"[green]✓[/] saved the active build's compile cache to {file} ({ui.size(size)})"
            )
        return
    with ui.status("restoring the compile cache", quiet=as_json):
        answer = restore_cache(ctx, file, force=force)
    if as_json:
        ui.emit_json("cache-restore", answer)
    else:
        ui.out.print(f"[green]✓[/] restored {answer['restored']} files into {answer['dir']}")


def refuse_pointless_save(ctx: Context, file: Path, force: bool) -> None:
    """Never overwrite an archive unasked, nor write one that holds nothing; never replace
    what is not a regular file (a link, a device such as /dev/null), --force or not."""
    refuse_non_regular(str(file))
    if file.exists() and not force:
        raise UsageError(f"{file} exists", hint="pass --force to overwrite it, or another FILE")
    active = [entry for entry in cache_status(ctx)["dirs"] if entry["active"]]
    if not active or not active[0]["files"]:
        where = active[0]["dir"] if active else "the active build's cache dir"
        ui.error(f"the active build's compile cache is empty ({where}): nothing to save")
        sys.exit(EXIT_DRIFT)


def print_status(status: dict) -> None:
    dirs = status["dirs"]
    if not dirs:
        ui.out.print(f"no compile caches under {status['cache_dir']} yet")
        return
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("", "fingerprint", "warmth", "last used", "generations"):
        table.add_column(column)
    for entry in dirs:
        table.add_row(
            "*" if entry["active"] else "",
            entry["id"],
            ui.warmth(entry["files"], entry["bytes"]),
            ui.ago(entry["last_used"]),
            ", ".join(entry["generations"]) or "none (kept: never deleted)",
        )
    ui.out.print(f"compile caches under {status['cache_dir']} (* = the active build)")
    ui.out.print(table)
