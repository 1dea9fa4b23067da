"""The container side of a proxmox-lxc target: drift of its config and provisioning.

The Proxmox API (proxmox/containers, snapshots, guest) creates, starts, configures and
snapshots the container; everything inside it goes through the pct transport like any
other target.
"""

from __future__ import annotations

from collections.abc import Callable

from envlock.errors import UsageError
from envlock.proxmox.api import connect
from envlock.proxmox.config import config_differences, desired_config
from envlock.proxmox.containers import ensure_container
from envlock.proxmox.guest import container_status, read_config
from envlock.proxmox.settings import Container, LxcSettings
from envlock.proxmox.snapshots import list_snapshots, rollback, snapshot
from envlock.reconcile.kinds import Drift
from envlock.targets.base import ContainerCheck


class LxcProvisioner:
    """A profile's [container] on its node, through the Proxmox API."""

    def __init__(self, settings: LxcSettings, container: Container) -> None:
        assert settings.vmid is not None and settings.node is not None
        self.settings = settings
        self.container = container

    def describe(self) -> str:
        return f"container {self.settings.vmid} on {self.settings.node}"

    def check(self) -> ContainerCheck:
        """Compare the container's config (through the API) with the profile's [container]."""
        target = self.settings
        assert target.vmid is not None and target.node is not None
        session = connect(target)
        status = container_status(session, target)
        subject = self.describe()
        if not status.exists:
            drift = Drift(
                "container", subject, "exists", "absent", "apply creates it from [container]"
            )
            return ContainerCheck(False, False, (drift,))
        drifts = []
        if status.status != "running":
            drifts.append(Drift("container", subject, "running", status.status, "apply starts it"))
        actual = read_config(session, target.node, target.vmid)
        for diff in config_differences(desired_config(self.container), actual):
            how = (
                "apply changes it through the API"
                if diff.live
                else diff.note or "cannot be changed through the API"
            )
            drifts.append(
                Drift("container-config", diff.key, show(diff.expected), show(diff.actual), how)
            )
        return ContainerCheck(True, status.status == "running", tuple(drifts))

    def provision(
        self, *, snapshot_label: str | None, on_progress: Callable[[str], None] | None
    ) -> list[str]:
        """Snapshot (when asked and possible), then create/start/fix the container."""
        session = connect(self.settings)
        done = []
        snapshot_first = None
        if self.container.snapshot_before_apply and snapshot_label:
            snapshot_first = snapshot_name(snapshot_label)
        if snapshot_first and container_status(session, self.settings).exists:
            if on_progress:
                on_progress(f"taking LXC snapshot {snapshot_first}")
            snapshot(session, self.settings, snapshot_first, "envlock: before apply")
            done.append(f"snapshot {snapshot_first}")
        report = ensure_container(session, self.settings, self.container, on_progress=on_progress)
        return done + report.describe()

    def rollback(self, name: str | None, on_progress: Callable[[str], None] | None) -> str:
        """Roll the container back to snapshot `name` (default: the newest envlock one)."""
        session = connect(self.settings)
        if not name:
            ours = [
                s.name
                for s in list_snapshots(session, self.settings)
                if s.name.startswith("envlock-")
            ]
            if not ours:
                raise UsageError(
                    f"container {self.settings.vmid} has no envlock snapshot",
                    hint="set snapshot-before-apply = true in [container], or name "
                    "a snapshot: --container NAME",
                )
            name = ours[-1]
        rollback(session, self.settings, name, on_progress=on_progress)
        return name


def show(value: object) -> str:
    return "unset" if value is None else str(value)


def snapshot_name(generation: str) -> str:
    """A PVE snapshot name for a generation: a letter first, [A-Za-z0-9_-], ≤ 40 chars."""
    return f"envlock-{generation}"[:40]
