"""The proxmox-lxc target type: a container on a Proxmox node.

Commands reach the container through ssh to the node and `pct exec` (targets/pct.py); the
container itself is checked, provisioned and rolled back through the Proxmox API
(proxmox/provision.py), loaded only when the profile declares a [container]. Without one
(a container managed by hand) only ssh, pct and the vmid are needed: the API is never used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from envlock.base.tomlread import Table
from envlock.targets.base import (
    InitFlag,
    LocalPath,
    Provisioner,
    StarterRow,
    TargetType,
    Transport,
)
from envlock.targets.members import FleetTransport, Member
from envlock.targets.pct import PCT_FAILURES, PctTransport
from envlock.targets.ssh import SSH_FAILURES, SSH_FLAGS

if TYPE_CHECKING:
    # Read when a profile names this type: the registry lists every type, and a local
    # profile's `check` or `run` loads none of the Proxmox code.
    from envlock.proxmox.settings import Container, LxcSettings


def lxc_transport(settings: LxcSettings) -> Transport:
    if settings.fleet is not None:
        return FleetTransport()
    assert settings.vmid is not None
    return PctTransport(settings.ssh.transport(), settings.vmid, settings.node)


def lxc_members(settings: LxcSettings) -> list[Member]:
    """A fleet profile's containers, read from the cluster now (the Proxmox API)."""
    from envlock.proxmox.members import list_members

    return list_members(settings)


def read_lxc_settings(t: Table, local_path: LocalPath) -> LxcSettings:
    from envlock.proxmox.settings import read_lxc_settings as read

    return read(t, local_path)


def read_lxc_container(t: Table, settings: LxcSettings) -> Container:
    """[container], and the API settings that managing it needs."""
    from envlock.proxmox.settings import read_container, require_api_settings

    container = read_container(t)
    require_api_settings(settings, t)
    return container


def lxc_provisioner(settings: LxcSettings, container: Container) -> Provisioner:
    # The API layer (proxmoxer, requests) loads only for profiles that use it.
    from envlock.proxmox.provision import LxcProvisioner

    return LxcProvisioner(settings, container)


# `envlock init`'s options for a container, after ssh's (to its node).
CONTAINER_FLAGS = (
    InitFlag("--node", "node", "the Proxmox node's name."),
    InitFlag(
        "--vmid",
        "vmid",
        "the container's VMID.",
        integer=(100, None),
        placeholder=100,
        example="200",
    ),
    InitFlag("--api-url", "api-url", "the Proxmox API (https://NODE:8006)."),
)

PROXMOX_LXC = TargetType(
    name="proxmox-lxc",
    remote=True,
    read_settings=read_lxc_settings,
    transport=lxc_transport,
    starter=StarterRow(
        "# Where: a Proxmox LXC container, reached over ssh to its node and `pct exec`.",
        root="/opt/envlock",
        venv="/opt/venv",
        flags=(*SSH_FLAGS, *CONTAINER_FLAGS),
        required=("host", "vmid"),
        notes=(
            "# The API secret (for [container] provisioning) comes from the environment:",
            '# secret-env = "PVE_PASSWORD"',
        ),
    ),
    over_ssh=True,
    # Its commands go through ssh to the node, then pct: either may fail.
    failures=(*SSH_FAILURES, *PCT_FAILURES),
    read_container=read_lxc_container,
    provisioner=lxc_provisioner,
    members=lxc_members,
    no_members_hint="check [target] vmids or select against the cluster's containers (the API "
    "lists only those the login holds VM.Audit on)",
)
