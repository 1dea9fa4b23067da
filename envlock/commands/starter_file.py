"""Writing a starter profile (`init`, `init --from`): validated first, never over a file."""

from __future__ import annotations

from pathlib import Path

from envlock.base.atomic import write_atomic
from envlock.errors import UsageError
from envlock.profile.read import Profile, parse_profile


def refuse_existing(profile: Path) -> None:
    if profile.exists() or profile.is_symlink():
        raise UsageError(
            f"{profile} exists: init never overwrites a profile",
            hint="pick another name, or edit that file",
        )
    if not profile.parent.is_dir():
        raise UsageError(f"{profile.parent} is not a directory", hint="create it first")


def write_starter(profile: Path, text: str) -> Profile:
    """Validate the text as the profile it will be, then write it; never over a file."""
    refuse_existing(profile)
    parsed = parse_profile(profile, text)  # a flag's bad value is a ProfileError naming it
    write_atomic(profile, text.encode())
    return parsed
