"""Cause-first errors (issue #31), over a scripted node: what cut a remote agent short is told
by what the agent had already said (its progress lines prove it started) — an ssh connection
lost, the container stopped under it, or pct refusing before it ran — and a full disk under
uv says so first. The node's answers are scripted (ssh's and pct's own words, as OpenSSH
and PVE print them); the classification is envlock's real code."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import IO

import pytest

from envlock.errors import OperationError
from envlock.reconcile.agentcall import call_agent, cause_first
from envlock.targets.base import Result
from envlock.targets.pct import PctFailed, PctTransport
from envlock.targets.ssh import SshTransport

STARTED = (
    "envlock-progress: creating venv for Python 3.11",
    "envlock-progress: installing 35 packages from the lock",
)
LOST = "Connection to 127.0.0.1 closed by remote host."


class ScriptedNode(SshTransport):
    """The ssh hop to a node, its answers scripted: `pct exec` says `said` on stderr and
    ends with `code` (255 and ssh's words: the real connection check runs); `pct status`
    answers `status`."""

    def __init__(self, said: tuple[str, ...], code: int, status: str = "running") -> None:
        super().__init__("127.0.0.1", user="root")
        self.said, self.code, self.status = said, code, status

    def run(
        self,
        argv: list[str],
        *,
        stdin: bytes | IO[bytes] | None = None,
        env: Mapping[str, str] | None = None,
        on_stderr_line: Callable[[str], None] | None = None,
    ) -> Result:
        if argv[:2] == ["pct", "status"]:
            return Result(tuple(argv), 0, f"status: {self.status}\n".encode(), b"")
        for line in self.said:
            if on_stderr_line is not None:
                on_stderr_line(line)
        result = Result(tuple(argv), self.code, b"", "\n".join(self.said).encode())
        if result.exit_code == 255:
            self.raise_for_connection(result)
        return result


def apply_through(node: ScriptedNode) -> OperationError:
    with pytest.raises(OperationError) as info:
        call_agent(PctTransport(node, 905, "pve1"), "/opt/envroot", "apply", {"actions": []})
    return info.value


def test_an_ssh_connection_lost_after_the_agent_started_says_so() -> None:
    error = apply_through(ScriptedNode((*STARTED, LOST), 255))
    assert error.message == (
        "container 905 on 127.0.0.1: the ssh connection was lost after the agent's apply had "
        'started (its last words: "installing 35 packages from the lock")'
    )
    assert "did not start" not in str(error) and "`envlock check`" in str(error.hint)
    before = apply_through(ScriptedNode((LOST,), 255))  # nothing said: it may not have started
    assert before.message == (
        f"ssh root@127.0.0.1: the ssh connection was lost while the command ran: {LOST}"
    )


def test_a_container_stopped_under_the_agent_says_so() -> None:
    error = apply_through(ScriptedNode(STARTED, 137, status="stopped"))
    assert error.message == (
        "container 905 on 127.0.0.1 stopped while the agent's apply had started "
        '(its last words: "installing 35 packages from the lock")'
    )
    assert "start it" in str(error.hint)
    running = apply_through(ScriptedNode(STARTED, 137))
    assert running.message.startswith(
        "container 905 on 127.0.0.1: the agent's apply had started (its last words: "
        '"installing 35 packages from the lock") when it was cut short: the envlock agent '
        "(apply) failed with exit 137"
    )


def test_pct_refusing_before_the_agent_started_keeps_pct_s_words() -> None:
    error = apply_through(ScriptedNode(("Unknown option: foo", "400 unable to parse"), 2))
    assert isinstance(error, PctFailed)
    assert "`pct exec 905` on the node pve1 failed (exit 2)" in error.message
    assert error.hint == "these are pct's own words: the command did not start in the container"


def test_a_full_disk_under_uv_says_so_first_and_points_at_gc() -> None:
    raw = (
        "uv pip sync failed (exit 2): /opt/envroot/bin/uv pip sync /opt/envroot/generations/"
        "2-abc/.envlock/pylock.toml --python /opt/envroot/generations/2-abc/bin/python --quiet\n"
        "error: Failed to install: torch-2.11.0-cp311-none-linux_x86_64.whl (torch==2.11.0)\n"
        "  Caused by: failed to write to file `/opt/envroot/generations/2-abc/lib/x.so`: "
        "No space left on device (os error 28)"
    )
    message, errno = cause_first(raw, "")
    first, *rest = message.splitlines()
    assert first == "No space left on device: uv pip sync failed (exit 2); it said:"
    assert rest[0] == "  error: Failed to install: torch-2.11.0-cp311-none-linux_x86_64.whl " + (
        "(torch==2.11.0)"
    )
    assert rest[-1].startswith("  the command: /opt/envroot/bin/uv pip sync ")
    assert errno == "ENOSPC"
    assert cause_first("uv venv failed (exit 1): uv venv\nerror: boom", "") == (
        "uv venv failed (exit 1): uv venv\nerror: boom",
        "",
    )
