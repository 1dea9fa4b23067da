"""`envlock lock PROFILE`: resolve the profile into pylock.<name>.toml."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from envlock import ui
from envlock.commands.common import json_option, profile_argument
from envlock.errors import EXIT_DRIFT, UsageError
from envlock.lock.links import target_paths
from envlock.lock.read import Lock, lock_policy, read_lock, stale_reasons
from envlock.lock.resolve import write_lock
from envlock.profile.read import Profile, load_profile

KIND = "lock"
KINDS = (KIND, "lock-check")  # `lock --check` prints the lock's freshness


@dataclass(frozen=True)
class LockResult:
    """The lock written (or left unchanged), or, under --check, whether the one on disk is
    fresh (`reasons` why it is not; None when the lock was written)."""

    path: Path  # the lock's file
    lock: Lock | None  # None: --check found no lock
    reasons: tuple[str, ...] | None = None
    changed: bool = False
    target_paths: tuple[str, ...] = ()  # what a remote target must also have

    @property
    def checked(self) -> bool:
        return self.reasons is not None

    @property
    def kind(self) -> str:
        return KINDS[1] if self.checked else KIND

    @property
    def code(self) -> int:
        return EXIT_DRIFT if self.reasons else 0

    def to_json(self) -> dict[str, Any]:
        lock = self.lock
        lock_id = lock.short_hash if lock else None  # the 12 hex digits every message names
        if self.reasons is not None:
            reasons = list(self.reasons)
            return {
                "lock_file": str(self.path),
                "lock_id": lock_id,
                "fresh": not reasons,
                "reasons": reasons,
            }
        assert lock is not None  # a lock was written
        torch = lock.packages.get("torch")
        return {
            "lock_file": str(self.path),
            "changed": self.changed,
            "lock_id": lock_id,
            "sha256": lock.sha256,
            "packages": lock.versions(),
            "torch": torch.version if torch else None,
            "machine_paths": lock.machine_paths(),
            "target_paths": list(self.target_paths),
        }


def lock_of(profile: str, *, check_only: bool, portable: bool, quiet: bool) -> LockResult:
    """The one producer of lock's result: --check reads the lock; otherwise resolve and write."""
    prof = load_profile(profile)
    if check_only:
        if not prof.lock_path.exists():
            return LockResult(prof.lock_path, None, ("no lock",))
        # a lock that does not validate is refused (exit 2, naming the field): not stale
        found = read_lock(prof.lock_path, lock_policy(prof))
        return LockResult(prof.lock_path, found, tuple(stale_reasons(prof, found)))
    with ui.status(f"resolving {prof.path.name} with uv", quiet=quiet):
        # Refused before it is written: the file on disk stays what it was, and
        # `lock --check` keeps telling the truth about it.
        lock, changed = write_lock(prof, accept=refuse_tied(prof) if portable else None)
    needed = target_paths(prof, lock.text, lock.path.parent)
    return LockResult(lock.path, lock, None, changed, tuple(needed))


def render_text(result: LockResult) -> None:
    lock = result.lock
    name = result.path.name
    if result.reasons:
        ui.out.print(f"[red]✗[/] {name} is stale: {'; '.join(result.reasons)}")
        return
    if result.checked or lock is None:
        ui.out.print(f"[green]✓[/] {name} is fresh")
        return
    torch = lock.packages.get("torch")
    verb = "wrote" if result.changed else "unchanged:"
    torch_text = f", torch {torch.version}" if torch else ""
    ui.out.print(
        f"[green]✓[/] {verb} {name}: {len(lock.packages)} packages"
        f"{torch_text}, lock {lock.short_hash}"
    )
    tied = lock.machine_paths()
    if result.target_paths:
        # A remote target installs these wheels from the same paths: they must be there too.
        ui.info(
            f"the target must also have: {', '.join(result.target_paths)} (its install reads "
            "the lock's wheels there, at the same paths)"
        )
    elif tied:
        ui.info(
            f"note: the lock is tied to this machine: {len(tied)} wheel(s) by a local path "
            f"({', '.join(tied[:2])}{' …' if len(tied) > 2 else ''}); `lock --portable` "
            "refuses that"
        )


@click.command("lock")
@profile_argument
@click.option(
    "--check",
    "check_only",
    is_flag=True,
    help="Write nothing; exit 1 when the lock is missing or stale.",
)
@click.option(
    "--portable",
    is_flag=True,
    help="Refuse a lock that names wheels by a path of this machine.",
)
@json_option
def command(profile: str, check_only: bool, portable: bool, as_json: bool) -> None:
    """Write or refresh pylock.<name>.toml beside PROFILE."""
    result = lock_of(profile, check_only=check_only, portable=portable, quiet=as_json)
    if as_json:
        ui.emit_json(result.kind, result.to_json())
    else:
        render_text(result)
    sys.exit(result.code)


def refuse_tied(prof: Profile) -> Callable[[Lock], None]:
    """`--portable`: refuse a resolved lock that names wheels by a path of this machine."""

    def accept(lock: Lock) -> None:
        tied = lock.machine_paths()
        if tied:
            raise UsageError(
                f"{lock.path.name} is tied to this machine: it names {len(tied)} wheel(s) by "
                f"a local path outside {prof.path.parent}: {', '.join(tied[:3])}"
                + (" …" if len(tied) > 3 else ""),
                hint="put those wheels in a find-links directory beside the profile (recorded "
                f"relative to the lock), or let an index serve them; {lock.path.name} was "
                "not written",
            )

    return accept
