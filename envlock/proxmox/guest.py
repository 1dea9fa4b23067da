"""One container through the PVE API: where it is, its state and config, start and destroy."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from envlock.errors import UsageError
from envlock.proxmox.api import Progress, ProxmoxSession, api_call
from envlock.proxmox.config import ConfigValue, natural
from envlock.proxmox.settings import LxcSettings
from envlock.proxmox.tasks import run_task

TASK_TIMEOUT = 600.0


@dataclass(frozen=True)
class ContainerStatus:
    vmid: int
    node: str
    status: str  # running, stopped, ... or absent
    lock: str | None = None  # PVE's config lock: create, backup, snapshot, migrate, ...
    name: str | None = None

    @property
    def exists(self) -> bool:
        return self.status != "absent"


def where(target: LxcSettings) -> tuple[str, int]:
    """(node, vmid) of a proxmox-lxc target."""
    if target.node is None or target.vmid is None:
        raise UsageError("[target] node and vmid are required for a proxmox-lxc target")
    return target.node, target.vmid


def container_status(session: ProxmoxSession, target: LxcSettings) -> ContainerStatus:
    """The container's state on its node; status "absent" if it does not exist.

    UsageError if its VMID is a VM, or a container on another node than the profile says.
    """
    node, vmid = where(target)
    found = find_container(session, node, vmid)
    if found is not None:
        return found
    _check_vmid_free(session, node, vmid)
    return ContainerStatus(vmid=vmid, node=node, status="absent")


def find_container(session: ProxmoxSession, node: str, vmid: int) -> ContainerStatus | None:
    with api_call(session, f"listing the containers on node {node}"):
        items = session.api.nodes(node).lxc.get()
    for item in items or []:
        if int(item.get("vmid", -1)) == vmid:
            return ContainerStatus(
                vmid=vmid,
                node=node,
                status=str(item.get("status") or "unknown"),
                lock=item.get("lock") or None,
                name=item.get("name"),
            )
    return None


def read_config(session: ProxmoxSession, node: str, vmid: int) -> dict[str, Any]:
    """The container's config with pending changes applied (what its next start uses)."""
    with api_call(session, f"reading the config of container {vmid}"):
        return dict(session.api.nodes(node).lxc(vmid).config.get() or {})


def write_config(
    session: ProxmoxSession, node: str, vmid: int, body: dict[str, ConfigValue], doing: str
) -> None:
    """PUT /config: synchronous for containers; `digest` in body refuses concurrent changes."""
    with api_call(session, doing, body):
        session.api.nodes(node).lxc(vmid).config.put(**body)


def pending_keys(session: ProxmoxSession, node: str, vmid: int) -> tuple[str, ...]:
    """Keys changed on a running container that it takes only at its next start."""
    with api_call(session, f"reading the pending changes of container {vmid}"):
        items = session.api.nodes(node).lxc(vmid).pending.get()
    keys = [str(i["key"]) for i in items or [] if "pending" in i or i.get("delete")]
    return tuple(sorted(keys, key=natural))


@dataclass(frozen=True)
class PendingChange:
    """A config change a running container takes only at its next start."""

    key: str
    current: str | None  # None: not set now
    pending: str | None  # None: deleted at the next start

    def describe(self) -> str:
        return f"{self.key} {self.current or 'unset'} → {self.pending or 'unset'}"


def pending_changes(session: ProxmoxSession, node: str, vmid: int) -> tuple[PendingChange, ...]:
    """What the running container takes at its next start, key by key."""
    with api_call(session, f"reading the pending changes of container {vmid}"):
        items = session.api.nodes(node).lxc(vmid).pending.get()
    changes = [
        PendingChange(
            key=str(item["key"]),
            current=None if item.get("value") is None else str(item["value"]),
            pending=None if item.get("delete") else str(item["pending"]),
        )
        for item in items or []
        if "pending" in item or item.get("delete")
    ]
    return tuple(sorted(changes, key=lambda c: natural(c.key)))


def reboot_container(
    session: ProxmoxSession, node: str, vmid: int, timeout: float, say: Progress
) -> None:
    """Shut the container down and start it again: it takes its pending changes."""
    what = f"restarting container {vmid} on node {node}"
    say(what)
    with api_call(session, what):
        upid = session.api.nodes(node).lxc(vmid).status.reboot.post()
    run_task(session, upid, what=what, timeout=timeout)


def start_container(
    session: ProxmoxSession, node: str, vmid: int, timeout: float, say: Progress
) -> None:
    what = f"starting container {vmid} on node {node}"
    say(f"starting container {vmid}")
    with api_call(session, what):
        upid = session.api.nodes(node).lxc(vmid).status.start.post()
    run_task(session, upid, what=what, timeout=timeout)


def destroy_container(
    session: ProxmoxSession, node: str, vmid: int, timeout: float, say: Progress
) -> None:
    """Delete the container and its volumes (stopping it first), and wait for it."""
    what = f"removing container {vmid} from node {node}"
    say(what)
    with api_call(session, what):
        upid = session.api.nodes(node).lxc(vmid).delete(purge=1, force=1)
    run_task(session, upid, what=what, timeout=timeout)


def quiet(message: str) -> None:
    """A progress callback that says nothing."""
    del message


def _check_vmid_free(session: ProxmoxSession, node: str, vmid: int) -> None:
    """UsageError if the VMID is a VM, or a container on another node."""
    with api_call(session, "listing the cluster's guests"):
        guests = session.api.cluster.resources.get(type="vm")
    for guest in guests or []:
        if int(guest.get("vmid", -1)) != vmid:
            continue
        if guest.get("type") != "lxc":
            raise UsageError(
                f"VMID {vmid} is a QEMU virtual machine on node {guest.get('node')}, "
                "not a container",
                hint="set [target] vmid to a free id (`pvesh get /cluster/nextid`)",
            )
        raise UsageError(
            f"container {vmid} lives on node {guest.get('node')}, [target] says node {node}",
            hint=f'set [target] node = "{guest.get("node")}", or migrate the container',
        )
