"""`envlock lock PROFILE`: resolve the profile into pylock.<name>.toml."""

from __future__ import annotations

import sys
from collections.abc import Callable

import click

from envlock import ui
from envlock.commands.common import json_option, profile_argument
from envlock.errors import EXIT_DRIFT, UsageError
from envlock.lock import Lock, lock_policy, read_lock, stale_reasons
from envlock.lock_links import target_paths
from envlock.lock_resolve import write_lock
from envlock.profile import Profile, load_profile


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
    prof = load_profile(profile)
    if check_only:
        found = None
        if not prof.lock_path.exists():
            reasons = ["no lock"]
        else:  # a lock that does not validate is refused (exit 2, naming the field): not stale
            found = read_lock(prof.lock_path, lock_policy(prof))
            reasons = stale_reasons(prof, found)
        if as_json:
            ui.emit_json(
                "lock-check",
                {
                    "lock": str(prof.lock_path),
                    "lock_id": found.short_hash if found else None,
                    "fresh": not reasons,
                    "reasons": reasons,
                },
            )
        elif reasons:
            ui.out.print(f"[red]✗[/] {prof.lock_path.name} is stale: {'; '.join(reasons)}")
        else:
            ui.out.print(f"[green]✓[/] {prof.lock_path.name} is fresh")
        sys.exit(EXIT_DRIFT if reasons else 0)
    with ui.status(f"resolving {prof.path.name} with uv", quiet=as_json):
        # Refused before it is written: the file on disk stays what it was, and
        # `lock --check` keeps telling the truth about it.
        lock, changed = write_lock(prof, accept=refuse_tied(prof) if portable else None)
    torch = lock.packages.get("torch")
    tied = lock.machine_paths()
    needed = target_paths(prof, lock.text, lock.path.parent)
    if as_json:
        ui.emit_json(
            "lock",
            {
                "lock": str(lock.path),
                "changed": changed,
                "lock_id": lock.short_hash,  # the 12 hex digits every message names
                "sha256": lock.sha256,
                "packages": lock.versions(),
                "torch": torch.version if torch else None,
                "machine_paths": tied,
                "target_paths": needed,
            },
        )
        return
    verb = "wrote" if changed else "unchanged:"
    torch_text = f", torch {torch.version}" if torch else ""
    ui.out.print(
        f"[green]✓[/] {verb} {lock.path.name}: {len(lock.packages)} packages"
        f"{torch_text}, lock {lock.short_hash}"
    )
    if needed:
        # A remote target installs these wheels from the same paths: they must be there too.
        ui.info(
            f"the target must also have: {', '.join(needed)} (its install reads the lock's "
            "wheels there, at the same paths)"
        )
    elif tied:
        ui.info(
            f"note: the lock is tied to this machine: {len(tied)} wheel(s) by a local path "
            f"({', '.join(tied[:2])}{' …' if len(tied) > 2 else ''}); `lock --portable` "
            "refuses that"
        )


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
