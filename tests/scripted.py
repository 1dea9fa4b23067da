"""A scripted transport for fast tests of orchestration (httpx's MockTransport, for argv).

A test fake, never shipped: the transport is a plain function of the command (argv, stdin,
env) to a Result, and it RAISES `Unscripted` on any command nobody scripted, so a test
cannot pass by a command it did not expect. The envlock agent's calls are recognised by
their shape (`pythons.own_python` around the agent's bootstrap) and routed by agent command
(probe, apply, …) to a function of the request; `Script` answers them in a fixed order.

The apply handshake runs as with a real agent: the scripted apply says `LOCKED_READY` on
stderr (`call.say`), the controller's dialogue answers on stdin (`call.read_more()`).
"""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import IO, Any

from envlock.base.pythons import START
from envlock.reconcile.agentcall import LOCKED_READY
from envlock.targets.base import Result
from envlock.targets.local import LocalTransport


class Unscripted(AssertionError):
    """A command reached the scripted transport that no test scripted."""


@dataclass
class Call:
    """One command as the transport received it."""

    argv: tuple[str, ...]
    stdin: bytes  # the bytes given, or the first chunk of a stream (an agent's request line)
    env: dict[str, str]
    stream: IO[bytes] | None = field(default=None, repr=False)
    say: Callable[[str], None] = field(default=lambda line: None, repr=False)

    @property
    def agent(self) -> str | None:
        """The agent command this call runs, None when it is not an agent call: argv is
        `sh -c START sh ROOT PYTHON PROGRAM COMMAND [REQUEST]` (pythons.own_python)."""
        own = len(self.argv) >= 8 and self.argv[:4] == ("sh", "-c", START, "sh")
        return self.argv[7] if own and "envlock_agent" in self.argv[6] else None

    @property
    def root(self) -> str:
        """The root whose interpreter an agent call may use ("" for the system python)."""
        return self.argv[4]

    @property
    def request(self) -> dict[str, Any]:
        """The agent's request: the argument after the command, else the stdin line."""
        raw = self.argv[8] if len(self.argv) > 8 else self.stdin.decode().splitlines()[0]
        loaded = json.loads(raw)
        assert isinstance(loaded, dict)
        return loaded

    def read_more(self) -> bytes:
        """What the controller writes on stdin after the first chunk (the dialogue's word)."""
        assert self.stream is not None, "this call's stdin was not a stream"
        return self.stream.read(65536)


Handler = Callable[[Call], Result]
Answer = Callable[[Call], Result]
# Starts a spawned command (`piped`: stdio through pipes) and returns its process.
Spawner = Callable[[Call, bool], "subprocess.Popen[bytes]"]


def answer(call: Call, data: dict[str, Any], *, code: int = 0, stderr: str = "") -> Result:
    """The agent's JSON answer (its last stdout line), as a Result of `call`."""
    return Result(call.argv, code, (json.dumps(data) + "\n").encode(), stderr.encode())


def replied(data: dict[str, Any]) -> Answer:
    """An agent step that answers `data` whatever it was asked."""
    return lambda call: answer(call, data)


class ScriptedTransport:
    """A Transport whose commands are answered by `handler`; every call is recorded."""

    def __init__(
        self,
        handler: Handler,
        *,
        name: str = "scripted",
        python: str = "python3",
        spawner: Spawner | None = None,
    ):
        self.handler = handler
        self.spawner = spawner
        self.name = name
        self.system_python = python
        self.calls: list[Call] = []
        self.lock = threading.Lock()

    def run(
        self,
        argv: list[str],
        *,
        stdin: bytes | IO[bytes] | None = None,
        env: Mapping[str, str] | None = None,
        on_stderr_line: Callable[[str], None] | None = None,
    ) -> Result:
        stream = None if stdin is None or isinstance(stdin, bytes) else stdin
        first = stream.read(65536) if stream is not None else (stdin or b"")
        assert isinstance(first, bytes)
        call = Call(tuple(argv), first, dict(env or {}), stream, on_stderr_line or (lambda _: None))
        with self.lock:
            self.calls.append(call)
        result = self.handler(call)
        if stream is not None and hasattr(stream, "ended"):
            stream.ended()  # as a real transport does once the command exited
        return result

    def spawn(self, argv: list[str], *, piped: bool = False) -> Any:
        """A started command, by `spawner` (recorded as a call); without one it raises."""
        if self.spawner is None:
            raise Unscripted(f"{self.name}: nothing scripted to spawn {argv!r}")
        call = Call(tuple(argv), b"", {})
        with self.lock:
            self.calls.append(call)
        return self.spawner(call, piped)

    def agent_calls(self) -> list[str]:
        return [c.agent or "?" for c in self.calls]


def agents(**steps: Answer) -> Handler:
    """A handler that answers each agent command by its function; anything else raises."""

    def handle(call: Call) -> Result:
        if call.agent is None or call.agent not in steps:
            raise Unscripted(f"unscripted command: {call.argv[:3]!r}… agent={call.agent!r}")
        return steps[call.agent](call)

    return handle


class Script:
    """Agent calls expected in this order, each answered by its function; a call out of
    order or past the end raises. `done()` says whether every step was taken."""

    def __init__(self, *steps: tuple[str, Answer]) -> None:
        self.steps = list(steps)
        self.taken = 0

    def __call__(self, call: Call) -> Result:
        if self.taken >= len(self.steps):
            raise Unscripted(f"agent {call.agent!r} called after the script's end")
        command, step = self.steps[self.taken]
        if call.agent != command:
            raise Unscripted(f"step {self.taken}: expected agent {command!r}, got {call.agent!r}")
        self.taken += 1
        return step(call)

    def done(self) -> bool:
        return self.taken == len(self.steps)


def handshake(then: dict[str, Any]) -> Answer:
    """An agent apply that holds the lock, asks the controller (`LOCKED_READY`), and answers
    `then` on "go"; on "abort" it stops as the real agent does, having changed nothing."""

    def apply(call: Call) -> Result:
        assert call.request.get("handshake") is True, "apply was not asked for the handshake"
        call.say(LOCKED_READY)
        word = call.read_more()
        if word == b"go\n":
            return answer(call, then)
        assert word == b"abort\n", word
        return answer(call, {"error": {"kind": "refused", "message": "aborted"}})

    return apply


def locally(call: Call) -> Result:
    """Run the call for real on this machine (a scripted handler that lets a command through)."""
    return LocalTransport().run(list(call.argv), stdin=call.stream or call.stdin or None)


def spawn_locally(call: Call, piped: bool) -> subprocess.Popen[bytes]:
    """Start the spawned command for real on this machine, as a target's sshd starts it:
    signals at their defaults (the local transport's client ignores them; sshd's child
    does not), stdio through pipes when `piped`."""
    pipe = subprocess.PIPE if piped else None
    return subprocess.Popen(list(call.argv), stdin=pipe, stdout=pipe, stderr=pipe)
