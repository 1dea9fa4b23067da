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
