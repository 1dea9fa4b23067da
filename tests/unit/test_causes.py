"""A failure's cause in one short line (errors.cause_of), as the fleet's summary table shows
it: not the first line of the message, which for a failed uv step is its command line."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from envlock.converge.fleet import MemberResult, member_json, summary_table
from envlock.errors import cause_of
from envlock.proxmox.members import Member

# What uv 0.13 said when a generation's install ran out of space (captured on a full tmpfs),
# behind the agent's "what failed: the command line" first line, as a member's note holds it.
UV_COMMAND = (
    "/opt/envroot/.envlock/uv pip sync --python /opt/envroot/generations/2-3691be6fb9cb/bin/python"
    " --offline --no-index --find-links /srv/wheels /opt/envroot/generations/2-3691be6fb9cb"
    "/.envlock/pylock.toml"
)
FULL_DISK = (
    f"pct 201: uv pip sync failed (exit 2): {UV_COMMAND}\n"
    "warning: Failed to hardlink files; falling back to full copy.\n"
    "error: Failed to install: flashinfer_python-0.2.0-py3-none-any.whl "
    "(flashinfer-python==0.2.0)\n"
    "  cause: Failed to copy to `/opt/envroot/generations/2-3691be6fb9cb/lib/python3.11/"
    "site-packages/flashinfer_python-0.2.0.dist-info/RECORD`\n"
    "  cause: failed to copy file from /var/cache/uv/archive-v0/jzdw/RECORD to /opt/envroot/"
    "generations/2-3691be6fb9cb/RECORD: No space left on device (os error 28)"
)


@pytest.mark.parametrize(
    ("message", "cause"),
    [
        (FULL_DISK, "No space left on device (os error 28)"),
        # a command's failure without uv's chain: its own last words
        (f"pct 201: venv failed (exit 1): {UV_COMMAND}\nsomething broke", "something broke"),
        # Python's own wording of an OS error
        ("pct 201: [Errno 30] Read-only file system: '/opt/envroot'", "Read-only file system"),
        # an older uv's chain
        ("error: Failed to fetch\n  Caused by: connection refused", "connection refused"),
        # one plain line is its own cause
        ("hosts has no entry for the node pve3", "hosts has no entry for the node pve3"),
        ("", ""),
    ],
)
def test_the_cause_of_a_message(message: str, cause: str) -> None:
    assert cause_of(message) == cause


def test_the_fleet_table_shows_a_failures_cause_not_its_command_line() -> None:
    member = Member(201, "pve1", "ct201", "running")
    failed = MemberResult(3, "failed", note=FULL_DISK, seconds=1.5)
    console = Console(file=io.StringIO(), width=200, record=True)
    console.print(summary_table([(member, failed)]))
    text = console.export_text()
    assert "failed: No space left on device (os error 28)" in text
    assert "uv pip sync" not in text
    document = member_json(member, failed)
    assert document["cause"] == "No space left on device (os error 28)"
    assert document["note"] == FULL_DISK  # the whole message stays in --json
