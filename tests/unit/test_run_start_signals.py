"""A signal at each moment of a remote run's start (runs/one_call.py), placed exactly.

The agent's `run` process (this checkout's agent, or a scripted one) is started with its
stdio behind wrappers that raise the signal in envlock at one moment, and only then let the
dialogue go on: as the request is about to be sent; while the agent checks (it is stopped
with SIGSTOP until envlock has the signal, then continued: it has not answered yet); and
while its answer is on the wire (written, not yet read). Whatever the moment, a signal is
kept until the answer is in: forwarded to the command's group when it started, else envlock
stops as interrupted, and the run loop (commands/run.py) never judges a changed state again
to start the command the user tried to stop. test_launch.py's signal tests send theirs after
the command's start; these cover the moments before it."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

import pytest

from envlock.commands.run import run_in_one_call
from envlock.profile.read import load_profile
from envlock.reconcile.context import Context
from envlock.runs.one_call import Changed, Started, call_run, state_digest
from tests.projects import torch_profile_text
from tests.scripted import Call, Script, ScriptedTransport, replied
from tests.unit.test_converge import in_sync
from tests.unit.test_core import LOCK
from tests.unit.test_launch import (
    TRAPPED,
    TRAPPING,
    launch_request,
    real,
    spawn_here,
    stdin_of,
    the_state,
    through,
    watchdog,
)

MOMENTS = (
    "before the request is sent",
    "while the agent checks",
    "while the answer is on the wire",
)


class Moment:
    """Raises `signum` in envlock once, at `moment` of the dialogue with `proc`."""

    def __init__(self, proc: subprocess.Popen[bytes], moment: str, signum: int) -> None:
        self.proc, self.moment, self.signum = proc, moment, signum
        self.fired = False

    def fire(self) -> None:
        self.fired = True
        signal.raise_signal(self.signum)  # its handler has run when this returns


class SentWire:
    """The agent's stdin: the signal comes as the request is about to be written."""

    def __init__(self, pipe: IO[bytes], at: Moment) -> None:
        self._pipe, self._at = pipe, at

    def write(self, data: bytes) -> int:
        if self._at.moment == MOMENTS[0] and not self._at.fired:
            self._at.fire()
        return self._pipe.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pipe, name)


class AnswerWire:
    """The agent's stdout: the signal comes while the agent checks (it was stopped from its
    start and is continued only after), or once its answer is there to read."""

    def __init__(self, pipe: IO[bytes], at: Moment) -> None:
        self._pipe, self._at = pipe, at

    def readline(self, *args: Any) -> bytes:
        at = self._at
        if at.moment == MOMENTS[1] and not at.fired:
            at.fire()
            os.kill(at.proc.pid, signal.SIGCONT)
        elif at.moment == MOMENTS[2] and not at.fired:
            ready, _, _ = select.select([self._pipe], [], [], 15)
            assert ready, "the agent never answered"
            at.fire()
        return self._pipe.readline(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pipe, name)


def wired(proc: subprocess.Popen[bytes], moment: str, signum: int) -> subprocess.Popen[bytes]:
    at = Moment(proc, moment, signum)
    if moment == MOMENTS[1]:
        os.kill(proc.pid, signal.SIGSTOP)  # it checks nothing before envlock has the signal
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin = SentWire(proc.stdin, at)  # type: ignore[assignment]
    proc.stdout = AnswerWire(proc.stdout, at)  # type: ignore[assignment]
    return proc


def agent_at(moment: str, signum: int, seen: list[Call]) -> ScriptedTransport:
    """This checkout's agent, its dialogue wired to raise `signum` at `moment`; `sh` runs
    for real (the forwarded kill), each call recorded in `seen`. Named `local`: a command
    ended by the signal reads as such (over ssh, the client's own status says it)."""

    def spawner(call: Call, piped: bool) -> subprocess.Popen[bytes]:
        return wired(spawn_here(call, piped), moment, signum)

    return ScriptedTransport(
        through("sh", seen=seen), name="local", python=sys.executable, spawner=spawner
    )


def forwarded(seen: list[Call]) -> list[str]:
    """The signals forwarded to a command's group (Forwarder's `kill -s NAME -- -PGID`)."""
    return [c.argv[4] for c in seen if c.argv[:4] == ("sh", "-c", 'kill -s "$1" -- "$2"', "sh")]


@pytest.mark.parametrize("moment", MOMENTS)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_before_the_start_reaches_the_command_once_it_started(
    tmp_path: Path, moment: str, signum: int, capfd: pytest.CaptureFixture[str]
) -> None:
    raw = the_state(tmp_path, real(through()))
    seen: list[Call] = []
    marker = tmp_path / "started"
    request = launch_request(tmp_path, state_digest(raw), TRAPPING, str(marker))
    with stdin_of(b""):
        outcome = call_run(agent_at(moment, signum, seen), str(tmp_path / "root"), request)
    # The command got it (trapped, or killed before its trap was set), never ran on to 99.
    assert isinstance(outcome, Started) and outcome.code != 99, outcome
    assert outcome.code in (TRAPPED[signum], 128 + signum, -signum), outcome
    assert forwarded(seen) == [signal.Signals(signum).name.removeprefix("SIG")]
    # Forwarded maybe before the agent's exec: it ends by the signal, never by a traceback.
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.parametrize("moment", MOMENTS)
def test_a_signal_before_the_start_stops_envlock_when_the_state_changed(
    tmp_path: Path, moment: str
) -> None:
    raw = the_state(tmp_path, real(through()))
    seen: list[Call] = []
    transport = agent_at(moment, signal.SIGTERM, seen)
    request = launch_request(tmp_path, "0", "echo started")  # not the state: it answers it
    with stdin_of(b""), pytest.raises(KeyboardInterrupt):
        call_run(transport, str(tmp_path / "root"), request)
    assert [c.agent for c in transport.calls] == ["run"] and forwarded(seen) == []
    # Without the signal, the same call answers the state (what the run loop judges again).
    assert call_run(real(through()), str(tmp_path / "root"), request) == Changed(raw)


# -- the run loop: a changed state after a signal is never judged again ---------------------
def loop_context(tmp_path: Path, spawned: list[Call]) -> Context:
    """A local profile with LOCK, probed in sync; the agent's `run` is a script that answers
    the state (the agent's "changed"), its answer wired to raise SIGINT while on the wire."""
    path = tmp_path / "unit.toml"
    path.write_text(torch_profile_text("unit", torch=None))
    profile = load_profile(path)
    state = in_sync(profile.target.root)

    def spawner(call: Call, piped: bool) -> subprocess.Popen[bytes]:
        assert call.agent == "run" and piped
        spawned.append(call)
        script = 'head -n 1 >/dev/null; printf "%s\\n" "$1"'
        proc = subprocess.Popen(
            ["sh", "-c", script, "sh", json.dumps(state)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        watchdog(proc)
        return wired(proc, MOMENTS[2], signal.SIGINT) if len(spawned) == 1 else proc

    transport = ScriptedTransport(
        Script(("probe", replied(state))), python=sys.executable, spawner=spawner
    )
    return Context(profile, LOCK, transport)


def test_the_run_loop_starts_nothing_after_a_signal_when_the_agent_answers_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    spawned: list[Call] = []
    ctx = loop_context(tmp_path, spawned)
    with stdin_of(b""), pytest.raises(KeyboardInterrupt):
        run_in_one_call(ctx, ["echo", "started"], dict(os.environ), deep=False, allow_drift=False)
    assert len(spawned) == 1, "the run loop judged the changed state again and sent the run"


class TwiceWire:
    """The agent's stdout: the signal comes twice before any answer (the user asked again)."""

    def __init__(self, pipe: IO[bytes], signum: int) -> None:
        self._pipe, self._signum = pipe, signum

    def readline(self, *args: Any) -> bytes:
        signal.raise_signal(self._signum)
        signal.raise_signal(self._signum)
        return self._pipe.readline(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pipe, name)


def test_a_second_signal_while_the_agent_checks_stops_waiting_for_it(tmp_path: Path) -> None:
    spawned: list[subprocess.Popen[bytes]] = []

    def spawner(call: Call, piped: bool) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(  # an agent that never answers
            ["sh", "-c", "exec sleep 30"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        watchdog(proc)
        assert proc.stdout is not None
        proc.stdout = TwiceWire(proc.stdout, signal.SIGTERM)  # type: ignore[assignment]
        spawned.append(proc)
        return proc

    transport = ScriptedTransport(through(), python=sys.executable, spawner=spawner)
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        call_run(transport, str(tmp_path / "root"), launch_request(tmp_path, "0", "true"))
    (proc,) = spawned
    assert proc.wait(timeout=5) == -signal.SIGKILL  # the local client ended at once
    assert time.monotonic() - started < 10  # not the watchdog's
