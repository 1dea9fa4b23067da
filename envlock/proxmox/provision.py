"""The container side of a proxmox-lxc target: drift of its config and provisioning.

The Proxmox API (proxmox/containers, snapshots, guest) creates, starts, configures and
snapshots the container; everything inside it goes through the pct transport like any
other target. One provisioner serves one command, over one API session.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime, timezone

from envlock.base.drift_kinds import Drift
from envlock.errors import UsageError
from envlock.proxmox.api import ProxmoxSession, connect
from envlock.proxmox.config import config_differences, desired_config
from envlock.proxmox.containers import ensure_container
from envlock.proxmox.guest import (
    TASK_TIMEOUT,
    container_status,
    pending_changes,
    quiet,
    read_config,
    reboot_container,
)
from envlock.proxmox.settings import Container, LxcSettings
from envlock.proxmox.snapshots import (
    SNAPSHOT_NAME,
    SnapshotInfo,
    delete_snapshot,
    list_snapshots,
    rollback,
    snapshot,
)
from envlock.targets.base import (
    ContainerCheck,
    ContainerSnapshot,
    prune_oldest,
    restore_point_name,
    restore_point_record,
)

PREFIX = "envlock-"  # envlock's own snapshots; keep-snapshots never touches the others
RESTART_FIX = "takes effect after a restart: `envlock apply --restart`"


class LxcProvisioner:
    """A profile's [container] on its node, through the Proxmox API."""

    keep_key = "keep-snapshots"

    def __init__(self, settings: LxcSettings, container: Container) -> None:
        assert settings.vmid is not None and settings.node is not None
        self.settings = settings
        self.container = container
        self._session: ProxmoxSession | None = None

    @property
    def session(self) -> ProxmoxSession:
        """One login per command: check, snapshot and provision share it."""
        if self._session is None:
            self._session = connect(self.settings)
        return self._session

    def describe(self) -> str:
        return f"container {self.settings.vmid} on {self.settings.node}"

    def check(self) -> ContainerCheck:
        """Compare the container's config (through the API) with the profile's [container];
        a running container's changes that wait for its next start are drift of their own."""
        target = self.settings
        assert target.vmid is not None and target.node is not None
        status = container_status(self.session, target)
        subject = self.describe()
        if not status.exists:
            drift = Drift(
                "container", subject, "exists", "absent", "apply creates it from [container]"
            )
            return ContainerCheck(False, False, (drift,))
        drifts = []
        running = status.status == "running"
        if not running:
            drifts.append(Drift("container", subject, "running", status.status, "apply starts it"))
        actual = read_config(self.session, target.node, target.vmid)
        for diff in config_differences(desired_config(self.container), actual):
            how = (
                "apply changes it through the API"
                if diff.live
                else diff.note or "cannot be changed through the API"
            )
            drifts.append(
                Drift("container-config", diff.key, show(diff.expected), show(diff.actual), how)
            )
        if running:
            for change in pending_changes(self.session, target.node, target.vmid):
                drifts.append(
                    Drift(
                        "container-restart",
                        change.key,
                        show(change.pending),
                        show(change.current),
                        f"{change.describe()} {RESTART_FIX}",
                    )
                )
        return ContainerCheck(True, running, tuple(drifts))

    def snapshot(
        self,
        *,
        generation: str | None,
        lock: str,
        applying: str,
        on_progress: Callable[[str], None] | None,
    ) -> str | None:
        """Snapshot the container before an apply changes it (when the profile asks and the
        container exists), then prune envlock's own snapshots beyond keep-snapshots."""
        if not self.container.snapshot_before_apply:
            return None
        if not container_status(self.session, self.settings).exists:
            return None  # nothing to go back to
        say = on_progress or quiet
        taken = {s.name for s in list_snapshots(self.session, self.settings)}
        name = snapshot_name(generation, datetime.now(timezone.utc), taken)
        say(f"taking LXC snapshot {name}")
        description = snapshot_description(generation, lock, applying)
        snapshot(self.session, self.settings, name, description, on_progress=say)
        self.prune(say)
        return name

    def prune(self, say: Callable[[str], None]) -> None:
        """Delete envlock's oldest snapshots beyond keep-snapshots; never anyone else's."""
        prune_oldest(
            [s.name for s in list_snapshots(self.session, self.settings) if is_ours(s.name)],
            self.container.keep_snapshots,
            key=self.keep_key,
            say=say,
            describe=lambda name: f"deleting LXC snapshot {name}",
            remove=lambda name: delete_snapshot(self.session, self.settings, name),
        )

    def provision(self, *, restart: bool, on_progress: Callable[[str], None] | None) -> list[str]:
        """Create/start/fix the container; with `restart`, restart it when config changes
        wait for its next start."""
        say = on_progress or quiet
        report = ensure_container(
            self.session, self.settings, self.container, on_progress=on_progress
        )
        done = report.describe()
        if report.pending_restart and restart:
            node, vmid = report.node, report.vmid
            reboot_container(self.session, node, vmid, TASK_TIMEOUT, say)
            keys = ", ".join(report.pending_restart)
            done = [line for line in done if "next restart" not in line]
            done.append(f"restarted container {vmid}: {keys} took effect")
        elif report.pending_restart:
            done[-1] += ": `envlock apply --restart`"
        return done

    def snapshots(self) -> list[ContainerSnapshot]:
        """The container's snapshots, oldest first, with what envlock recorded in each."""
        return [listed(s) for s in list_snapshots(self.session, self.settings)]

    def rollback(self, name: str | None, on_progress: Callable[[str], None] | None) -> str:
        """Roll the container back to snapshot `name` (default: the newest envlock one)."""
        if not name:
            ours = [s.name for s in list_snapshots(self.session, self.settings) if is_ours(s.name)]
            if not ours:
                raise UsageError(
                    f"container {self.settings.vmid} has no envlock snapshot",
                    hint="set snapshot-before-apply = true in [container], or name "
                    "a snapshot: --container --snapshot NAME",
                )
            name = ours[-1]
        rollback(self.session, self.settings, name, on_progress=on_progress)
        return name


def show(value: object) -> str:
    return "unset" if value is None else str(value)


def is_ours(name: str) -> bool:
    return name.startswith(PREFIX)


def snapshot_name(generation: str | None, now: datetime, taken: set[str]) -> str:
    """`envlock-<generation number>-<UTC yyyymmddHHMMSS>`, unique among `taken`: PVE wants
    a letter first, then [A-Za-z0-9_-], at most 40 characters in all."""
    name = restore_point_name(PREFIX, generation, now, taken)
    assert SNAPSHOT_NAME.match(name), name
    return name


def snapshot_description(generation: str | None, lock: str, applying: str) -> str:
    """What the snapshot holds, in lines `snapshots()` reads back."""
    return restore_point_record("taken", generation, lock, applying)


def listed(snap: SnapshotInfo) -> ContainerSnapshot:
    fields = dict(re.findall(r"^(generation|lock): (.*)$", snap.description, re.M))
    taken = ""
    if snap.snaptime:
        taken = datetime.fromtimestamp(snap.snaptime, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    return ContainerSnapshot(
        name=snap.name,
        taken=taken,
        generation=fields.get("generation", ""),
        lock=fields.get("lock", ""),
        ours=is_ours(snap.name),
    )
