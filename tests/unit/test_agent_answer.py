"""What envlock says when its agent ends without an answer (envlock/reconcile/agentcall.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from envlock.errors import OperationError
from envlock.reconcile.agentcall import parse_answer
from envlock.targets.base import Result

DIALOGUE = b"envlock-progress: switch current\nenvlock-locked: ready\n"


def said(name: str, code: int, stderr: bytes) -> str:
    transport = cast(Any, SimpleNamespace(name=name))
    with pytest.raises(OperationError) as caught:
        parse_answer(transport, "apply", Result(("ssh",), code, b"", stderr))
    return str(caught.value)


def test_a_killed_ssh_client_is_a_lost_connection_without_the_dialogue_s_lines() -> None:
    text = said("ssh root@node", -9, DIALOGUE)
    assert "the connection to the target was lost" in text and "SIGKILL" in text, text
    assert "exit -9" not in text and "envlock-locked" not in text, text


def test_a_failing_agent_still_says_its_exit_and_its_own_lines() -> None:
    text = said("local", 1, DIALOGUE + b"boom\n")
    assert "failed with exit 1:\n  boom" in text and "envlock-locked" not in text, text


class Recording:
    """A remote transport whose ssh client was killed; it records what envlock sends next."""

    name = "ssh root@node"

    def __init__(self, code: int) -> None:
        self.code = code
        self.sent: list[list[str]] = []

    def run(self, argv: list[str], **_: Any) -> Result:
        self.sent.append(argv)
        return Result(tuple(argv), self.code, b"", b"")


@pytest.mark.parametrize("stopped", [True, False])
def test_a_killed_client_during_a_remote_run_is_exit_3_and_the_command_is_stopped(
    stopped: bool,
) -> None:
    """Before: the client's -9 left envlock as exit 247, and no word."""
    import subprocess

    from envlock.runs.one_call import follow

    transport = Recording(0 if stopped else 255)
    pipe = subprocess.PIPE
    client = subprocess.Popen(["sh", "-c", "kill -9 $$"], stdin=pipe, stdout=pipe, stderr=pipe)
    with pytest.raises(OperationError) as caught:
        follow(client, cast(Any, transport), "-4242", lambda handler: None, [])
    assert caught.value.exit_code == 3
    assert str(caught.value).startswith(
        "the connection to ssh root@node was lost while the command ran"
    )
    assert transport.sent == [["sh", "-c", 'kill -s TERM -- "$1"', "sh", "-4242"]]
    assert ("(it was stopped)" in str(caught.value)) == stopped
    if not stopped:
        assert "kill -- -4242" in str(caught.value.hint)
