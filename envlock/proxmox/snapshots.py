"""LXC snapshots through the PVE API: take, list, roll back."""

from __future__ import annotations

import re
from dataclasses import dataclass

from envlock.errors import OperationError, UsageError
from envlock.proxmox.api import Progress, ProxmoxSession, api_call
from envlock.proxmox.guest import TASK_TIMEOUT, container_status, quiet, start_container, where
from envlock.proxmox.settings import LxcSettings
from envlock.proxmox.tasks import run_task

# PVE's pve-configid format, which snapshot names must have.
SNAPSHOT_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{1,39}$")


@dataclass(frozen=True)
class SnapshotInfo:
    name: str
    description: str
    snaptime: int | None
    parent: str | None


@dataclass(frozen=True)
class RollbackReport:
    vmid: int
    snapshot: str
    was_running: bool
    started: bool  # started again after the rollback, which stops a running container


def snapshot(
    session: ProxmoxSession,
    target: LxcSettings,
    name: str,
    description: str = "",
    *,
    timeout: float = TASK_TIMEOUT,
    on_progress: Progress | None = None,
) -> SnapshotInfo:
    """Take an LXC snapshot of the container and wait for it."""
    node, vmid = where(target)
    if not SNAPSHOT_NAME.match(name):
        raise UsageError(
            f'invalid snapshot name "{name}": Proxmox wants a letter, then 1-39 letters, '
            'digits, "-" or "_"'
        )
    what = f"taking snapshot {name!r} of container {vmid}"
    params = {"snapname": name, "description": description}
    with api_call(session, what, params):
        upid = session.api.nodes(node).lxc(vmid).snapshot.post(**params)
    (on_progress or quiet)(f"waiting for task {upid}")
    run_task(session, upid, what=what, timeout=timeout, hint=_snapshot_hint)
    for snap in list_snapshots(session, target):
        if snap.name == name:
            return snap
    raise OperationError(f"snapshot {name!r} of container {vmid} is missing after it was taken")


def list_snapshots(session: ProxmoxSession, target: LxcSettings) -> list[SnapshotInfo]:
    """The container's snapshots, oldest first (without PVE's pseudo-entry "current")."""
    node, vmid = where(target)
    with api_call(session, f"listing the snapshots of container {vmid}"):
        items = session.api.nodes(node).lxc(vmid).snapshot.get()
    snaps = [
        SnapshotInfo(
            name=str(item["name"]),
            description=str(item.get("description") or "").strip(),
            snaptime=int(item["snaptime"]) if item.get("snaptime") else None,
            parent=item.get("parent") or None,
        )
        for item in items or []
        if item.get("name") != "current"
    ]
    return sorted(snaps, key=lambda s: (s.snaptime or 0, s.name))


def delete_snapshot(
    session: ProxmoxSession, target: LxcSettings, name: str, *, timeout: float = TASK_TIMEOUT
) -> None:
    """Delete one snapshot of the container and wait for it."""
    node, vmid = where(target)
    what = f"deleting snapshot {name!r} of container {vmid}"
    with api_call(session, what):
        upid = session.api.nodes(node).lxc(vmid).snapshot(name).delete()
    run_task(session, upid, what=what, timeout=timeout)


def rollback(
    session: ProxmoxSession,
    target: LxcSettings,
    name: str,
    *,
    timeout: float = TASK_TIMEOUT,
    on_progress: Progress | None = None,
) -> RollbackReport:
    """Roll the container back to a snapshot; start it again if it was running.

    PVE stops a running container for the rollback (no clean shutdown).
    """
    node, vmid = where(target)
    say = on_progress or quiet
    known = [s.name for s in list_snapshots(session, target)]
    if name not in known:
        raise UsageError(
            f"container {vmid} has no snapshot {name!r}",
            hint=f"its snapshots: {', '.join(known)}" if known else "it has no snapshots",
        )
    was_running = container_status(session, target).status == "running"
    what = f"rolling container {vmid} back to snapshot {name!r}"
    say(what)
    with api_call(session, what):
        upid = session.api.nodes(node).lxc(vmid).snapshot(name).rollback.post()
    run_task(session, upid, what=what, timeout=timeout)
    started = False
    if was_running and container_status(session, target).status != "running":
        start_container(session, node, vmid, timeout, say)
        started = True
    return RollbackReport(vmid=vmid, snapshot=name, was_running=was_running, started=started)


def _snapshot_hint(exitstatus: str) -> str | None:
    if "snapshot feature is not available" in exitstatus:
        return (
            "the container's volumes must live on a storage with snapshots (LVM-thin, ZFS, "
            "Ceph RBD, Btrfs); bind mounts are not snapshotted"
        )
    if "already used" in exitstatus:
        return "pick another snapshot name, or delete the old snapshot first"
    return None
