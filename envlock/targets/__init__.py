"""Targets: where environments live, reached through a Transport."""

from __future__ import annotations

from envlock.profile import Profile, Target
from envlock.targets.base import Transport
from envlock.targets.local import LocalTransport
from envlock.targets.pct import PctTransport
from envlock.targets.ssh import SshTransport
from envlock.uvbin import uv_path


def ssh_to(target: Target) -> SshTransport:
    assert target.host is not None
    return SshTransport(
        target.host,
        user=target.user,
        port=target.port,
        identity_file=target.identity_file,
        options=target.ssh_options,
    )


def transport_for(profile: Profile) -> Transport:
    target = profile.target
    if target.type == "ssh":
        return ssh_to(target)
    if target.type == "proxmox-lxc":
        assert target.vmid is not None
        return PctTransport(ssh_to(target), target.vmid)
    return LocalTransport()


def is_remote(profile: Profile) -> bool:
    return profile.target.type != "local"


def target_uv(profile: Profile) -> str:
    """The uv binary on the target: ours locally, the bootstrapped one under <root>/bin remotely."""
    if profile.target.type == "local":
        return uv_path()
    return f"{profile.target.root}/bin/uv"
