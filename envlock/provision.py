"""The container side of a proxmox-lxc target: drift of its config and provisioning.

The Proxmox API (envlock.proxmox) creates, starts, configures and snapshots the container;
everything inside it goes through the pct transport like any other target.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from envlock.drift import Drift
from envlock.profile import Profile


@dataclass(frozen=True)
class ContainerCheck:
    """What the API says about the profile's container, before anything is changed."""

    exists: bool
    running: bool
    drifts: tuple[Drift, ...]


def has_container(profile: Profile) -> bool:
    return profile.target.type == "proxmox-lxc" and profile.container is not None


def check_container(profile: Profile) -> ContainerCheck:
    """Compare the container's config (through the API) with the profile's [container]."""
    from envlock.proxmox import (
        config_differences,
        connect,
        container_status,
        desired_config,
        read_config,
    )

    target, container = profile.target, profile.container
    assert container is not None and target.vmid is not None and target.node is not None
    session = connect(target)
    status = container_status(session, target)
    subject = f"container {target.vmid} on {target.node}"
    if not status.exists:
        drift = Drift("container", subject, "exists", "absent", "apply creates it from [container]")
        return ContainerCheck(False, False, (drift,))
    drifts = []
    if status.status != "running":
        drifts.append(Drift("container", subject, "running", status.status, "apply starts it"))
    actual = read_config(session, target.node, target.vmid)
    for diff in config_differences(desired_config(container), actual):
        how = (
            "apply changes it through the API"
            if diff.live
            else diff.note or "cannot be changed through the API"
        )
        drifts.append(
            Drift("container-config", diff.key, show(diff.expected), show(diff.actual), how)
        )
    return ContainerCheck(True, status.status == "running", tuple(drifts))


def show(value: object) -> str:
    return "unset" if value is None else str(value)


def snapshot_name(generation: str) -> str:
    """A PVE snapshot name for a generation: a letter first, [A-Za-z0-9_-], ≤ 40 chars."""
    return f"envlock-{generation}"[:40]


def provision(
    profile: Profile,
    *,
    snapshot_first: str | None,
    on_progress: Callable[[str], None] | None,
) -> list[str]:
    """Snapshot (when asked and possible), then create/start/fix the container."""
    from envlock.proxmox import connect, container_status, ensure_container, snapshot

    target, container = profile.target, profile.container
    assert container is not None
    session = connect(target)
    done = []
    if snapshot_first and container_status(session, target).exists:
        if on_progress:
            on_progress(f"taking LXC snapshot {snapshot_first}")
        snapshot(session, target, snapshot_first, "envlock: before apply")
        done.append(f"snapshot {snapshot_first}")
    report = ensure_container(session, target, container, on_progress=on_progress)
    return done + report.describe()


def rollback_container(
    profile: Profile, name: str | None, on_progress: Callable[[str], None] | None
) -> str:
    """Roll the container back to snapshot `name` (default: the newest envlock snapshot)."""
    from envlock.errors import UsageError
    from envlock.proxmox import connect, list_snapshots, rollback

    session = connect(profile.target)
    if not name:
        ours = [
            s.name for s in list_snapshots(session, profile.target) if s.name.startswith("envlock-")
        ]
        if not ours:
            raise UsageError(
                f"container {profile.target.vmid} has no envlock snapshot",
                hint="set snapshot-before-apply = true in [container], or name "
                "a snapshot: --container NAME",
            )
        name = ours[-1]
    rollback(session, profile.target, name, on_progress=on_progress)
    return name
