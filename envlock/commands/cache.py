"""`envlock cache PROFILE status|save FILE|restore FILE`: the build's compile cache."""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from envlock import ui
from envlock.base.atomic import refuse_non_regular
from envlock.commands.common import across_fleet, json_option, with_context
from envlock.converge.fleet import MemberResult, Progress
from envlock.errors import EXIT_DRIFT, UsageError
from envlock.reconcile.context import Context
from envlock.runs.cache import cache_status, restore_cache, save_cache

# Each subcommand prints its own document.
KINDS = ("cache-status", "cache-save", "cache-restore")


@dataclass(frozen=True)
class CacheDir:
    """One build's compile-cache directory: its fingerprint id, warmth and users."""

    id: str
    dir: str
    generations: tuple[str, ...]  # the generations built for this fingerprint
    active: bool  # the active generation's build
    files: int
    bytes: int
    last_used: float | None

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "generations": list(self.generations)}


@dataclass(frozen=True)
class CacheStatus:
    """The caches under the profile's cache dir, and which build is active."""

    cache_dir: str
    active: str | None  # the active build's fingerprint id
    active_parts: dict[str, Any] | None  # what that fingerprint is made of
    current: str | None  # the active generation
    dirs: tuple[CacheDir, ...]

    @classmethod
    def of(cls, answer: dict[str, Any]) -> CacheStatus:
        """The agent's answer, typed once at the edge."""
        dirs = tuple(
            CacheDir(
                entry["id"],
                entry["dir"],
                tuple(entry["generations"]),
                entry["active"],
                entry.get("files", 0),
                entry.get("bytes", 0),
                entry.get("last_used"),
            )
            for entry in answer["dirs"]
        )
        return cls(
            answer["cache_dir"],
            answer.get("active"),
            answer.get("active_parts"),
            answer.get("current"),
            dirs,
        )

    @property
    def active_dir(self) -> CacheDir | None:
        return next((entry for entry in self.dirs if entry.active), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "cache_dir": self.cache_dir,
            "active": self.active,
            "active_parts": self.active_parts,
            "current": self.current,
            "dirs": [entry.to_json() for entry in self.dirs],
        }


@dataclass(frozen=True)
class Restored:
    """What `cache restore` put back: how many files, into which build's directory."""

    restored: int
    dir: str
    fingerprint: str


@dataclass(frozen=True)
class CacheResult:
    """One of cache's three answers: the status, the archive saved, or what was restored."""

    action: str  # status, save, restore
    status: CacheStatus | None = None
    file: Path | None = None  # save's archive
    size: int = 0  # its bytes
    restored: Restored | None = None

    code = 0

    @property
    def kind(self) -> str:
        return KINDS[("status", "save", "restore").index(self.action)]

    def to_json(self) -> dict[str, Any]:
        if self.status is not None:
            return self.status.to_json()
        if self.restored is not None:
            return asdict(self.restored)
        return {"file": str(self.file), "bytes": self.size}

    def member(self) -> MemberResult:
        """A fleet member's row (status only): the active build's cache, its warmth."""
        active = self.status.active_dir if self.status else None
        warmth = ui.warmth(active.files, active.bytes) if active else "no cache"
        return MemberResult(0, warmth, data={"cache": self.to_json()})


def cache_of(
    ctx: Context, action: str, file: Path | None, *, force: bool, quiet: bool
) -> CacheResult:
    """The one producer of cache's result, for each subcommand."""
    if action == "status":
        return CacheResult(action, status=CacheStatus.of(cache_status(ctx)))
    if file is None:
        raise UsageError(
            f"`envlock cache PROFILE {action}` needs a FILE",
            hint=f"envlock cache {ctx.profile.path} {action} compile-cache.tar.gz",
        )
    if action == "save":
        refuse_pointless_save(ctx, file, force)
        with ui.status("archiving the compile cache", quiet=quiet):
            return CacheResult(action, file=file, size=save_cache(ctx, file))
    with ui.status("restoring the compile cache", quiet=quiet):
        answer = restore_cache(ctx, file, force=force)
    restored = Restored(answer["restored"], answer["dir"], answer["fingerprint"])
    return CacheResult(action, file=file, restored=restored)


def render_text(result: CacheResult) -> None:
    if result.status is not None:
        print_status(result.status)
    elif result.restored is not None:
        restored = result.restored
        ui.out.print(f"[green]✓[/] restored {restored.restored} files into {restored.dir}")
    else:
        ui.out.print(
            f"[green]✓[/] saved the active build's compile cache to {result.file} "
            f"({ui.size(result.size)})"
        )


def cache_member(
    ctx: Context, progress: Progress, *, action: str, file: Path | None, force: bool, as_json: bool
) -> MemberResult:
    """cache status of one fleet member: the active build's cache, its warmth."""
    result = cache_of(ctx, "status", None, force=False, quiet=True)
    return result.member()


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
    result = cache_of(ctx, action, file, force=force, quiet=as_json)
    if as_json:
        ui.emit_json(result.kind, result.to_json())
    else:
        render_text(result)


def refuse_pointless_save(ctx: Context, file: Path, force: bool) -> None:
    """Never overwrite an archive unasked, nor write one that holds nothing; never replace
    what is not a regular file (a link, a device such as /dev/null), --force or not."""
    refuse_non_regular(str(file))
    if file.exists() and not force:
        raise UsageError(f"{file} exists", hint="pass --force to overwrite it, or another FILE")
    active = CacheStatus.of(cache_status(ctx)).active_dir
    if active is None or not active.files:
        where = active.dir if active else "the active build's cache dir"
        ui.error(f"the active build's compile cache is empty ({where}): nothing to save")
        sys.exit(EXIT_DRIFT)


def print_status(status: CacheStatus) -> None:
    if not status.dirs:
        ui.out.print(f"no compile caches under {status.cache_dir} yet")
        return
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("", "fingerprint", "warmth", "last used", "generations"):
        table.add_column(column)
    for entry in status.dirs:
        table.add_row(
            "*" if entry.active else "",
            entry.id,
            ui.warmth(entry.files, entry.bytes),
            ui.ago(entry.last_used),
            ", ".join(entry.generations) or "none (kept: never deleted)",
        )
    ui.out.print(f"compile caches under {status.cache_dir} (* = the active build)")
    ui.table(table)
