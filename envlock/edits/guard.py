"""Guarded installs (`envlock add`, `envlock remove`): a profile edit resolved into a
candidate lock beside the current one, never written until confirmed.

The candidate is resolved exactly as `envlock lock` resolves a profile, torch pin included:
an added package that wants another torch resolves to an older release that fits, or fails.
Which one happened, and what the newest release would have needed, is found by resolving
the added requirements alone without the pin, only when the pinned resolution fell short.
"""

from __future__ import annotations

import dataclasses
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from envlock.base.atomic import write_atomic
from envlock.base.uvbin import uv_path
from envlock.edits.changes import LockChanges, lock_changes, torch_moves
from envlock.errors import EXIT_DRIFT, EnvlockError, UsageError
from envlock.lock.policy import SHOWN
from envlock.lock.read import Lock, lock_policy, parse_lock
from envlock.lock.resolve import ResolutionFailed, resolve
from envlock.profile.edit import Edit
from envlock.profile.read import Profile, load_profile


class Refused(EnvlockError):
    """An add or remove that envlock will not carry out as asked: exit 1, nothing written."""

    exit_code = EXIT_DRIFT


@dataclass(frozen=True)
class Proposal:
    """A profile edit and the lock it resolves to, against the current profile and lock."""

    profile: Profile
    lock: Lock
    edit: Edit
    candidate: Lock
    changes: LockChanges
    notes: tuple[str, ...] = ()
    torch_moves: tuple[str, ...] = ()

    @property
    def installs_differently(self) -> bool:
        return self.candidate.short_hash != self.lock.short_hash


def propose(profile: Profile, lock: Lock, edit: Edit, added: list[str]) -> Proposal:
    """Resolve the edited profile; explain older releases chosen; list torch moves."""
    looked_up = open_ended(added) if profile.torch is not None else []
    # The newest-release lookup needs nothing from the pinned resolution: run them together.
    # uv's path first, in this thread: finding it reads sysconfig, whose first use is not
    # thread-safe (a racing thread sees its config vars half-built).
    uv_path()
    with ThreadPoolExecutor(max_workers=1) as pool:
        newest = pool.submit(newest_versions, profile, looked_up) if looked_up else None
        try:
            candidate = parse_lock(
                profile.lock_path, resolve_candidate(profile, edit.text), lock_policy(profile)
            )
        except ResolutionFailed as failure:
            raise refusal(profile, added, failure, lock) from None
        notes = older_release_notes(
            profile, candidate, looked_up, newest.result() if newest else {}
        )
    moves = [f"[torch] packages: {', '.join(edit.torch_packages)}"] if edit.touches_torch else []
    return Proposal(
        profile=profile,
        lock=lock,
        edit=edit,
        candidate=candidate,
        changes=lock_changes(lock, candidate),
        notes=tuple(notes),
        torch_moves=tuple(moves + torch_moves(lock, candidate)),
    )


def resolve_candidate(profile: Profile, text: str) -> str:
    """Resolve profile text as `envlock lock` would, from a temp file beside the profile
    (relative paths mean the same); the real profile is not touched."""
    temp = profile.path.parent / f".{profile.path.stem}.envlock-candidate-{os.getpid()}.toml"
    try:
        write_atomic(temp, text.encode())  # never through a link planted at its name
        try:
            candidate = load_profile(temp)
        except UsageError as exc:
            raise UsageError(
                exc.message.replace(str(temp), str(profile.path)), hint=exc.hint
            ) from None
        return resolve(candidate)
    finally:
        temp.unlink(missing_ok=True)


# -- explaining what the torch pin did ------------------------------------------------------
def torch_pin(profile: Profile) -> str:
    return f"torch {profile.torch.pinned_version}" if profile.torch else "the profile's torch"


def unpinned(profile: Profile, requirements: list[str]) -> Profile:
    """The profile's Python, platform and indexes, with only these requirements: no torch."""
    deps = dataclasses.replace(profile.dependencies, packages=tuple(requirements))
    return dataclasses.replace(profile, torch=None, dependencies=deps, scripts=None)


def versions_of(text: str) -> dict[str, str]:
    return parse_lock(Path("pylock.toml"), text, SHOWN).versions()


def newest_versions(profile: Profile, requirements: list[str]) -> dict[str, str]:
    """The newest release matching each requirement, dependencies ignored (one quick uv
    call); empty when uv cannot tell."""
    try:
        return versions_of(resolve(unpinned(profile, requirements), extra_args=("--no-deps",)))
    except ResolutionFailed:
        return {}


def is_exact(requirement: str) -> bool:
    return any(spec.operator in ("==", "===") for spec in Requirement(requirement).specifier)


def open_ended(requirements: list[str]) -> list[str]:
    """The requirements whose release uv chooses (an `==` pin leaves nothing to explain)."""
    return [r for r in requirements if not is_exact(r)]


def older_release_notes(
    profile: Profile, candidate: Lock, added: list[str], newest: dict[str, str]
) -> list[str]:
    """For each added package resolved below its newest release: what the newest needs,
    from a resolution of the added requirements alone, without the torch pin."""
    chosen = candidate.versions()
    behind = [n for n in names(added) if is_newer(newest.get(n), chosen.get(n))]
    if not behind:
        return []
    try:
        free = versions_of(resolve(unpinned(profile, added)))
    except ResolutionFailed:
        free = {}
    return [older_note(profile, name, chosen[name], newest[name], free) for name in behind]


def older_note(profile: Profile, name: str, chosen: str, newest: str, free: dict[str, str]) -> str:
    needs = needs_text(profile, free)
    return (
        f"{name} resolved to {chosen}, the newest release compatible with {torch_pin(profile)}"
        f" (the newest, {newest}, {needs})"
    )


def needs_text(profile: Profile, free: dict[str, str]) -> str:
    torch = free.get("torch")
    if torch and profile.torch and not same_release(torch, profile.torch.pinned_version):
        return f"needs torch {torch}"
    return "conflicts with the profile's other requirements"


def refusal(
    profile: Profile, added: list[str], failure: ResolutionFailed, lock: Lock | None = None
) -> Refused:
    """Why the pinned resolution failed: torch, when the added requirements alone resolve
    with another torch (an exact pin named as asked, with the release the lock has that
    works); otherwise uv's reason as it stands."""
    listed = ", ".join(names(added)) or "the profile"
    hint = f"nothing was written; {profile.path.name} and its lock are unchanged"
    if not added or profile.torch is None:
        return Refused(f"uv cannot resolve {listed}:\n{failure.reason}", hint=hint)
    try:
        free = versions_of(resolve(unpinned(profile, added)))
    except ResolutionFailed:
        free = {}
    torch = free.get("torch")
    if torch and not same_release(torch, profile.torch.pinned_version):
        if all(is_exact(r) for r in added):
            said = "; ".join(pinned_cause(profile, r, torch, lock) for r in added)
            return Refused(f"{said}; uv says:\n{failure.reason}", hint=hint)
        newest = ", ".join(f"{n} {free[n]}" for n in names(added) if n in free)
        return Refused(
            f"no release of {listed} works with {torch_pin(profile)}: the newest "
            f"({newest}) needs torch {torch}; uv says:\n{failure.reason}",
            hint=hint,
        )
    return Refused(f"{listed} cannot be added to {profile.path.name}:\n{failure.reason}", hint=hint)


def pinned_cause(profile: Profile, requirement: str, torch: str, lock: Lock | None) -> str:
    """An exact pin that needs another torch, as asked (`xformers==0.0.28 needs torch
    2.4.1`), and the release the lock has, which works with the pin."""
    name = names([requirement])[0]
    has = lock.versions().get(name) if lock is not None else None
    if has is not None:
        return f"{requirement} needs torch {torch}; {has} works with the pinned torch (the lock's)"
    return f"{requirement} needs torch {torch}; the profile pins {torch_pin(profile)}"


def torch_refusal(proposal: Proposal) -> Refused:
    """An edit that moves torch's own packages, refused without --allow-torch-change: what
    moves, why that is asked for, that torch itself stays when it does, and what to do."""
    edit, versions = proposal.edit, proposal.candidate.versions()
    listed = names(list(edit.torch_packages)) if edit.touches_torch else []
    moved = [m for m in proposal.torch_moves if not m.startswith("[torch] packages")]
    others = [m for m in moved if m.split(":", 1)[0] not in listed]
    verb = "remove" if edit.removing else "add"
    if listed:
        what = f"{verb} {', '.join(listed)}"
        one = len(listed) == 1
        why = (
            f"{' and '.join(listed)} {'is one' if one else 'are'} of torch's own packages, "
            "released with torch, and envlock changes those only when asked"
        )
    else:
        what = f"move torch's own packages ({'; '.join(moved)})"
        why = "they ship with torch's build, and another version of them can break torch"
    said = f"refusing to {what} without --allow-torch-change: {why}"
    if others and listed:
        said += f"; it also moves {'; '.join(others)}"
    if not any(m.startswith("torch:") for m in moved):
        fits = [f"{n} {versions[n]}" for n in listed if n in versions and not edit.removing]
        said += f" — even when torch itself stays, as here ({torch_pin(proposal.profile)}"
        said += f", unchanged above{'; ' + ', '.join(fits) + ' fits it' if fits else ''})"
    return Refused(
        said,
        hint="to accept it, run the same command with --allow-torch-change (it installs the "
        "lock shown above); nothing was written",
    )


def names(requirements: list[str]) -> list[str]:
    return [canonicalize_name(Requirement(r).name) for r in requirements]


def same_release(a: str, b: str) -> bool:
    """2.11.0 and 2.11.0+cu128 are one release (builds differ only by label)."""
    try:
        return Version(a).public == Version(b).public
    except InvalidVersion:
        return a == b


def is_newer(a: str | None, b: str | None) -> bool:
    if a is None or b is None:
        return False
    try:
        return Version(a) > Version(b)
    except InvalidVersion:
        return False
