"""Targets: where environments live, reached through a Transport."""

from __future__ import annotations

from envlock.errors import UsageError
from envlock.profile import Profile
from envlock.targets.base import Transport
from envlock.targets.local import LocalTransport
from envlock.uvbin import uv_path


def transport_for(profile: Profile) -> Transport:
    kind = profile.target.type
    if kind == "local":
        return LocalTransport()
    raise UsageError(
        f'{profile.path}: [target] type = "{kind}" is not supported by this version yet',
        hint="use a local target for now",
    )


def target_uv(profile: Profile) -> str:
    """The uv binary on the target: ours locally, the bootstrapped one under <root>/bin remotely."""
    if profile.target.type == "local":
        return uv_path()
    return f"{profile.target.root}/bin/uv"
