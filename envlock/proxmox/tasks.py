"""Proxmox tasks: the asynchronous jobs (create, start, snapshot, ...) behind a UPID.

Each is polled until it stops and its exit status checked: proxmoxer's own
`Tasks.blocking_status` returns None on timeout and never raises on a failed task.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from envlock.errors import OperationError
from envlock.proxmox.api import ProxmoxSession, api_call


@dataclass(frozen=True)
class TaskResult:
    upid: str
    exitstatus: str

    @property
    def ok(self) -> bool:
        # PVE ends a task that succeeded with warnings as "WARNINGS: N": it did its work.
        return self.exitstatus == "OK" or self.exitstatus.startswith("WARNINGS:")


class TaskFailed(OperationError):
    """A Proxmox task ended with an error: carries its UPID and exit status."""

    def __init__(
        self, what: str, result: TaskResult, *, detail: str = "", hint: str | None = None
    ) -> None:
        message = f"{what} failed: task {result.upid} ended with: {result.exitstatus}"
        super().__init__(f"{message}\n{detail}" if detail else message, hint=hint)
        self.what = what
        self.result = result


class TaskTimeout(OperationError):
    """A Proxmox task still ran when we stopped waiting; it goes on on the node."""

    def __init__(self, what: str, upid: str, waited: float, *, hint: str | None = None) -> None:
        node = upid_node(upid)
        super().__init__(
            f"{what}: task {upid} did not finish within {waited:g} s; it is still running "
            f"on node {node}",
            hint=hint
            or "see it in the node's task log (`pvenode task status UPID` on the node); "
            "re-run when it has ended, or give the task more time",
        )
        self.upid = upid
        self.waited = waited


def upid_node(upid: str) -> str:
    """The node a task runs on: the second field of `UPID:node:pid:pstart:start:type:id:user:`."""
    parts = upid.split(":")
    if len(parts) < 8 or parts[0] != "UPID":
        raise OperationError(f"the Proxmox API returned {upid!r} where a task UPID was expected")
    return parts[1]


def wait_for_task(session: ProxmoxSession, upid: str, *, what: str, timeout: float) -> TaskResult:
    """Poll a task until it stops; TaskTimeout if it outlives `timeout` seconds."""
    node = upid_node(upid)
    started = time.monotonic()
    delay = 0.05
    while True:
        with api_call(session, f"{what}: reading the status of task {upid}"):
            status = session.api.nodes(node).tasks(upid).status.get()
        if status.get("status") == "stopped":
            return TaskResult(upid, str(status.get("exitstatus") or "unknown"))
        remaining = timeout - (time.monotonic() - started)
        if remaining <= 0:
            raise TaskTimeout(what, upid, timeout)
        time.sleep(min(delay, remaining))
        delay = min(delay * 1.5, 2.0)


def run_task(
    session: ProxmoxSession,
    upid: str,
    *,
    what: str,
    timeout: float,
    hint: Callable[[str], str | None] | None = None,
) -> TaskResult:
    """Wait for a task and raise TaskFailed unless it ended OK."""
    result = wait_for_task(session, upid, what=what, timeout=timeout)
    if not result.ok:
        raise TaskFailed(what, result, hint=hint(result.exitstatus) if hint else None)
    return result


def active_task(
    session: ProxmoxSession, node: str, vmid: int, types: tuple[str, ...]
) -> str | None:
    """The UPID of a task of one of these types still running for the guest, if any."""
    with api_call(session, f"listing the tasks of guest {vmid} on node {node}"):
        tasks = session.api.nodes(node).tasks.get(vmid=vmid, source="active")
    for task in tasks or []:
        if task.get("type") not in types or task.get("endtime"):
            continue
        upid = str(task["upid"])
        with api_call(session, f"reading the status of task {upid}"):
            status = session.api.nodes(node).tasks(upid).status.get()
        if status.get("status") == "running":
            return upid
    return None
