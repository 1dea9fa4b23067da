"""What a lock may ask of the installer, by where it came from (lock_schema.py enforces it).

Its own module so that a reader of a lock whose verdict is cached (lock_cache.py) never loads
the validator and `packaging`'s wheel-tag code: names are canonicalised here only when a
policy names packages.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class LockPolicy:
    """What a lock may ask of the installer, by where it came from."""

    # Packages whose sdist may be built; None: those the lock's own `[tool.envlock] build`
    # names, for readers that only show a lock and never install it (diff).
    build: frozenset[str] | None = frozenset()
    # Plain http:// wheel URLs (still pinned by sha256): a profile may name an http index;
    # a snapshot may not.
    http: bool = True
    # Packages whose wheels may install a top-level .pth (code run by every interpreter of
    # the environment); None: any. Only the install can tell, so the agent checks it.
    pth: frozenset[str] | None = None
    # What to do about a refused lock.
    fix: str = ""
    # Whose lock it is, for the hint about an sdist: "profile", "snapshot" or "lock".
    origin: str = "lock"

    def key(self) -> list[object]:
        """The policy as JSON data: part of what a cached verdict answers."""
        return [
            None if self.build is None else sorted(self.build),
            self.http,
            None if self.pth is None else sorted(self.pth),
            self.fix,
            self.origin,
        ]


def canonical_names(names: Iterable[str]) -> frozenset[str]:
    names = tuple(names)
    if not names:
        return frozenset()
    from packaging.utils import canonicalize_name  # loads packaging.tags: only when needed

    return frozenset(canonicalize_name(n) for n in names)


def profile_policy(build: tuple[str, ...], profile_path: str) -> LockPolicy:
    """The profile's own lock: it builds what the profile's build list names."""
    return LockPolicy(
        build=canonical_names(build),
        fix=f"run `envlock lock {profile_path}` to write it again (envlock writes locks)",
        origin="profile",
    )


def snapshot_policy(allow_pth: tuple[str, ...] = ()) -> LockPolicy:
    """A snapshot's lock rebuilt by `apply --from-snapshot`: a stranger's data. It never
    builds from source, and installs a .pth only from packages the user named."""
    return LockPolicy(http=False, pth=canonical_names(allow_pth), origin="snapshot")


# The default: builds nothing.
STRICT = LockPolicy()
# Read to be shown (diff, a snapshot loaded to compare): never installed from; a stranger's.
SHOWN = LockPolicy(build=None, http=False)
