"""Proxmox LXC containers through the PVE API: make one match the profile.

`ensure_container` re-reads the container before each change and checks it after. Tasks
(create, start, destroy) are asynchronous in PVE: each is waited for and its exit status
checked. A create that fails leaves nothing behind, so a re-run starts clean; a create that
outlives the timeout goes on on the node, and the next run waits for it and takes it over.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from envlock.errors import OperationError
from envlock.proxmox.api import Progress, ProxmoxSession, api_call
from envlock.proxmox.config import (
    ConfigDifference,
    config_differences,
    config_update,
    create_params,
    desired_config,
)
from envlock.proxmox.guest import (
    TASK_TIMEOUT,
    container_status,
    destroy_container,
    find_container,
    pending_keys,
    quiet,
    read_config,
    start_container,
    where,
    write_config,
)
from envlock.proxmox.settings import Container, LxcSettings
from envlock.proxmox.tasks import TaskFailed, TaskTimeout, active_task, run_task


@dataclass(frozen=True)
class ContainerReport:
    """What ensure_container found and did."""

    vmid: int
    node: str
    created: bool
    started: bool
    applied: tuple[ConfigDifference, ...]
    not_fixed: tuple[ConfigDifference, ...]  # need a new container or work on the node
    pending_restart: tuple[str, ...]  # keys the running container takes at its next start
    status: str

    def describe(self) -> list[str]:
        """One line per thing done or left, for people."""
        lines = [f"created container {self.vmid} on {self.node}"] if self.created else []
        lines += [f"changed {d.describe()}" for d in self.applied]
        lines += [f"started container {self.vmid}"] if self.started else []
        lines += [f"not fixed: {d.describe()}" for d in self.not_fixed]
        if self.pending_restart:
            keys = ", ".join(self.pending_restart)
            lines.append(f"container {self.vmid} takes {keys} at its next restart")
        return lines or [f"container {self.vmid} on {self.node} matches the profile"]


def ensure_container(
    session: ProxmoxSession,
    target: LxcSettings,
    container: Container,
    *,
    timeout: float = TASK_TIMEOUT,
    on_progress: Progress | None = None,
) -> ContainerReport:
    """Create the container if absent, fix its config where the API can, and start it.

    `timeout` is the number of seconds to wait for each Proxmox task. Differences the
    config API cannot fix (root disk, privilege) are reported in `not_fixed`, not forced.
    """
    node, vmid = where(target)
    say = on_progress or quiet
    state = container_status(session, target)
    created = False
    if state.lock == "create":
        _finish_earlier_create(session, node, vmid, timeout, say)
        created, state = True, container_status(session, target)
    if not state.exists:
        _create(session, node, vmid, container, timeout, say)
        created, state = True, container_status(session, target)
    actual = read_config(session, node, vmid)
    differences = config_differences(desired_config(container), actual)
    fixable = tuple(d for d in differences if d.live)
    if fixable:
        _update_config(session, node, vmid, fixable, actual, say)
    started = False
    if state.status != "running":
        start_container(session, node, vmid, timeout, say)
        started = True
    state = container_status(session, target)
    if state.status != "running":
        raise OperationError(
            f"container {vmid} on {node} is {state.status} after a start that ended OK",
            hint="look at the node's task log, and `pct start VMID --debug` on the node",
        )
    return ContainerReport(
        vmid=vmid,
        node=node,
        created=created,
        started=started,
        applied=fixable,
        not_fixed=tuple(d for d in differences if not d.live),
        pending_restart=pending_keys(session, node, vmid),
        status=state.status,
    )


# -- steps ------------------------------------------------------------------------------


def _create(
    session: ProxmoxSession,
    node: str,
    vmid: int,
    container: Container,
    timeout: float,
    say: Progress,
) -> None:
    params = create_params(container, vmid)
    what = f"creating container {vmid} on node {node}"
    say(f"{what} from {container.ostemplate}")
    try:
        with api_call(session, what, params):
            upid = session.api.nodes(node).lxc.post(**params)
    except OperationError as exc:
        raise OperationError(
            f"{exc.message}\n{_after_refused_create(session, node, vmid)}", hint=exc.hint
        ) from exc
    say(f"waiting for task {upid}")
    _wait_for_create(session, node, vmid, upid, what, timeout, container.ostemplate, say)


def _after_refused_create(session: ProxmoxSession, node: str, vmid: int) -> str:
    """What a refused create request left: normally nothing, as PVE checks before it claims."""
    try:
        found = find_container(session, node, vmid)
    except OperationError:
        return f"whether container {vmid} exists now could not be checked"
    if found is None:
        return f"nothing was created: container {vmid} does not exist"
    return f"container {vmid} exists now ({found.status}, lock {found.lock or 'none'})"


def _finish_earlier_create(
    session: ProxmoxSession, node: str, vmid: int, timeout: float, say: Progress
) -> None:
    upid = active_task(session, node, vmid, ("vzcreate", "vzrestore"))
    if upid is None:
        raise OperationError(
            f"container {vmid} on node {node} is locked (create) but no create task is "
            "running: an earlier create was interrupted",
            hint=f"on the node, `pct unlock {vmid} && pct destroy {vmid} --purge`, then re-run",
        )
    say(f"waiting for task {upid}, which an earlier run started")
    what = f"creating container {vmid} on node {node} (started earlier)"
    _wait_for_create(session, node, vmid, upid, what, timeout, None, say)


def _wait_for_create(
    session: ProxmoxSession,
    node: str,
    vmid: int,
    upid: str,
    what: str,
    timeout: float,
    ostemplate: str | None,
    say: Progress,
) -> None:
    try:
        run_task(session, upid, what=what, timeout=timeout)
    except TaskTimeout as exc:
        hint = (
            f"the create goes on on the node and container {vmid} stays locked (create) until "
            "it ends; a re-run waits for it and takes the container over"
        )
        raise TaskTimeout(what, exc.upid, exc.waited, hint=hint) from None
    except TaskFailed as exc:
        left = _remove_leftover(session, node, vmid, timeout, say, exc)
        fix = _create_hint(exc.result.exitstatus, ostemplate) or "fix the cause and re-run"
        raise TaskFailed(what, exc.result, detail=left, hint=fix) from exc


def _remove_leftover(
    session: ProxmoxSession, node: str, vmid: int, timeout: float, say: Progress, cause: TaskFailed
) -> str:
    """Delete what a failed create left; returns what happened, for the error.

    The create's POST claimed the VMID, so a container there now is the failed create's.
    """
    found = find_container(session, node, vmid)
    if found is None:
        return f"nothing was left behind: container {vmid} does not exist"
    if found.lock:
        raise OperationError(
            f"{cause.message}\nthe failed create left container {vmid} locked ({found.lock})",
            hint=f"on the node, `pct unlock {vmid} && pct destroy {vmid} --purge`, then re-run",
        ) from cause
    try:
        destroy_container(session, node, vmid, timeout, say)
    except OperationError as exc:
        raise OperationError(
            f"{cause.message}\nremoving the container it left behind failed too: {exc.message}",
            hint=f"on the node, `pct destroy {vmid} --purge`, then re-run",
        ) from exc
    return f"the container {vmid} it left behind was removed"


def _update_config(
    session: ProxmoxSession,
    node: str,
    vmid: int,
    fixable: tuple[ConfigDifference, ...],
    actual: dict[str, Any],
    say: Progress,
) -> None:
    body = config_update(fixable, actual)
    if actual.get("digest"):
        body["digest"] = str(actual["digest"])  # refuse to write over a concurrent change
    keys = ", ".join(d.key for d in fixable)
    say(f"changing {keys} of container {vmid}")
    write_config(session, node, vmid, body, f"changing {keys} of container {vmid}")


def _create_hint(exitstatus: str, ostemplate: str | None) -> str | None:
    if ostemplate and ostemplate in exitstatus and "does not exist" in exitstatus:
        storage, _, name = ostemplate.partition(":")
        return (
            f"the OS template is not on the node: `pveam update && pveam download {storage} "
            f"{name.rsplit('/', 1)[-1]}` on the node, or fix [container] ostemplate"
        )
    return None
