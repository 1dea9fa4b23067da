"""The proxmox-lxc target type: a container on a Proxmox node.

Commands reach the container through ssh to the node and `pct exec` (targets/pct.py); the
container itself is checked, provisioned and rolled back through the Proxmox API
(proxmox/provision.py), loaded only when the profile declares a [container].
"""

from __future__ import annotations

from envlock.proxmox.settings import Container, LxcSettings, read_container, read_lxc_settings
from envlock.targets.base import Provisioner, TargetType, Transport
from envlock.targets.pct import PctTransport


def lxc_transport(settings: LxcSettings) -> Transport:
    assert settings.vmid is not None
    return PctTransport(settings.ssh.transport(), settings.vmid)


def lxc_provisioner(settings: LxcSettings, container: Container) -> Provisioner:
    # The API layer (proxmoxer, requests) loads only for profiles that use it.
    from envlock.proxmox.provision import LxcProvisioner

    return LxcProvisioner(settings, container)


PROXMOX_LXC = TargetType(
    name="proxmox-lxc",
    remote=True,
    read_settings=read_lxc_settings,
    transport=lxc_transport,
    read_container=read_container,
    provisioner=lxc_provisioner,
)
