"""`envlock run` on a remote target in one agent call: check, environment and launch.

The agent's `run` (envlock/agent/launch.py) probes and, when the state is exactly one the
controller judged (the sha256 of its JSON), execs the command in the same process; else it
answers the state and starts nothing. So the controller judges a state before it sends the
call: the one it remembers from its last run on this target (`remembered`), or, the first
time and after a change, the one a probe just returned. A remembered state that is stale
costs nothing but the fallback: the agent answers the fresh state, which the controller
judges and explains exactly as after a probe.

The environment travels inside the request on stdin (never on a command line, never in a
file); the command's stdin follows it once the agent said it starts (nothing of ours is
read before: a fallback loses none of it). stdout and stderr are relayed; SIGINT, SIGTERM
and SIGHUP are forwarded to the command's process group, which the agent names when it
starts (runs/launch.py's Forwarder, over a second multiplexed connection). One that comes
while the agent checks and starts is kept until its answer is in: forwarded when the command
started, else envlock stops as interrupted (`Pending`): a signal never ends envlock while
the command it was starting runs on unseen.

Remembered states are kept in the user's cache (usercache.py: this user's alone, read
through the one gate), named by the target, root and probe request. They are data that can
only make the controller *propose* a state: the agent starts the command only when the
target's own state hashes to the same value.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any

from envlock.agent.core import state_digest as state_digest  # for commands/run.py
from envlock.base.usercache import read_entry, write_entry
from envlock.errors import OperationError
from envlock.reconcile.agentcall import agent_argv, parse_answer
from envlock.reconcile.context import Context, Probe, ProbeRequest
from envlock.reconcile.state import State
from envlock.runs.launch import FORWARDED, Forwarder
from envlock.runs.startup_set import remote_dir
from envlock.targets.base import Result, Transport

KIND = "run-states"
SCHEMA = 1


@dataclass(frozen=True)
class Started:
    """The agent started the command; its exit status."""

    code: int


@dataclass(frozen=True)
class Changed:
    """The target's state was not the one judged: here it is, nothing was started."""

    raw: dict[str, Any]


@dataclass(frozen=True)
class Stopped:
    """The state was the one judged, but the gate said no: nothing was started."""


@dataclass(frozen=True)
class Failed:
    """No answer (the transport or pct failed first): the caller asks again the usual way,
    which words the failure."""

    result: Result


def state_key(transport: Transport, root: str, request: dict[str, Any]) -> list[object]:
    return [SCHEMA, transport.name, root, request]


def remembered(transport: Transport, root: str, request: dict[str, Any]) -> dict[str, Any] | None:
    """The state last judged runnable for this target, root and request (None: none kept)."""
    entry = read_entry(KIND, state_key(transport, root, request))
    if isinstance(entry, dict) and entry.get("schema") == SCHEMA:
        state = entry.get("state")
        if isinstance(state, dict):
            return state
    return None


def remember(transport: Transport, root: str, request: dict[str, Any], raw: dict[str, Any]) -> None:
    write_entry(KIND, state_key(transport, root, request), {"schema": SCHEMA, "state": raw})


def run_probe(ctx: Context, *, deep: bool = False, snapshot: bool = False) -> Probe:
    """What a remote run's probe asks (the request its remembered states are kept under)."""
    startup = remote_dir(ctx.profile.target.root)
    return Probe(deep=deep, startup=startup, warmth=snapshot, lock=snapshot)


def keep_state(ctx: Context, asked: Probe, raw: dict[str, Any]) -> None:
    """Remember `raw` as the state the next run asked as `asked` proposes. One that counted
    the cache and read the generation's lock (a --snapshot-into run's, an apply's last) is
    kept for a run without --snapshot-into too, as its lighter probe finds it (`lighter`)."""
    transport, root = ctx.transport, ctx.profile.target.root
    remember(transport, root, ProbeRequest.of(ctx, asked).to_json(), raw)
    if asked.warmth and asked.lock:
        plain = dataclasses.replace(asked, warmth=False, lock=False)
        remember(transport, root, ProbeRequest.of(ctx, plain).to_json(), lighter(raw))


def lighter(raw: dict[str, Any]) -> dict[str, Any]:
    """The state a probe not asked for the cache's warmth nor the generation's lock finds,
    from one asked both (agent/probe.py): the lock only while a hold is judged by it, the
    cache's files as "any" (0 or 1), not counted, without their bytes and last use. Wrong,
    it costs only the fallback: the agent starts nothing on a state it does not find."""
    light = dict(raw)
    if not light.get("hold"):
        light.pop("active_lock", None)
    cache = light.get("cache")
    if isinstance(cache, dict) and "files" in cache:
        counted = {k: v for k, v in cache.items() if k not in ("bytes", "last_used")}
        light["cache"] = {**counted, "files": int(bool(cache["files"]))}
    return light


def remember_seen(ctx: Context, state: State) -> None:
    """A state an apply's last probe (asked as a --snapshot-into run asks: run_probe) found
    converged, kept as a run's own: the next run of either kind proposes it in its one
    call, no probe first."""
    if ctx.profile.target.remote and isinstance(state.raw, dict):
        keep_state(ctx, run_probe(ctx, snapshot=True), state.raw)


def call_run(
    transport: Transport,
    root: str,
    request: dict[str, Any],
    gate: Callable[[], bool] | None = None,
    on_ready: Callable[[], None] | None = None,
) -> Started | Changed | Failed | Stopped:
    """Send the agent's `run` (request: probe, expect, spec, argv, startup, terminal) and
    follow it. `gate` (the container API's word) runs while the target probes; the agent
    then waits for it before it starts anything. `on_ready` (a snapshot written) runs once
    the state is the one judged, before the word to start. A signal from the moment the
    call is sent is envlock's to handle (`Pending`): none can end envlock while the agent
    may be starting the command."""
    argv = agent_argv(transport, root, "run", env_python=True)
    proc = transport.spawn(argv, piped=True)
    pending = Pending(proc)
    with signals_to(pending) as handle:
        outcome = send_and_read(proc, argv, transport, request, Gates(gate, on_ready))
        if isinstance(outcome, dict):  # the command started: its process group, its terminal
            target = str(outcome.get("target", ""))
            with raw_terminal(outcome.get("terminal") is True):
                code = follow(proc, transport, target, handle, pending.signals)
            return Started(code)
    if pending.signals:
        raise KeyboardInterrupt  # nothing started: envlock stops as interrupted
    return outcome


@dataclass(frozen=True)
class Gates:
    """What runs between the agent's probe and its start: the container API's word, asked
    while the target probes, and what is done once the state is the one judged."""

    word: Callable[[], bool] | None = None
    on_ready: Callable[[], None] | None = None

    @property
    def awaited(self) -> bool:
        return self.word is not None or self.on_ready is not None


def send_and_read(
    proc: subprocess.Popen[bytes],
    argv: list[str],
    transport: Transport,
    request: dict[str, Any],
    gates: Gates,
) -> dict[str, Any] | Changed | Failed | Stopped:
    """The request on the agent's stdin, then its answers: the started command's (its
    process group, whether it has a terminal of the agent's), or what stopped it from
    starting."""
    payload = json.dumps({**request, "await": gates.awaited}).encode()
    verdict: list[bool | BaseException] = []
    asking = None
    if gates.word is not None:
        asking = threading.Thread(target=ask, args=(gates.word, verdict), daemon=True)
        asking.start()
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    try:
        proc.stdin.write(b"%d\n" % len(payload) + payload)
        proc.stdin.flush()
    except BrokenPipeError:
        pass  # it ended before reading: its answer (or its failure) says why
    answer, first = read_answer(proc.stdout)
    if asking is not None:
        asking.join()
        if isinstance(verdict[0], BaseException):
            end_agent(proc)
            raise verdict[0]
    if isinstance(answer, dict) and answer.get("ready"):
        if verdict and verdict[0] is not True:
            say(proc, b"stop\n")
            proc.communicate()
            return Stopped()
        ready(proc, gates.on_ready)
        answer, first = read_answer(proc.stdout)
    if isinstance(answer, dict) and isinstance(answer.get("run"), dict):
        return dict(answer["run"])
    out, err = proc.communicate()
    result = Result(tuple(argv), proc.returncode, first + out, err)
    if answer is None:
        return Failed(result)
    return Changed(parse_answer(transport, "run", result))


def ready(proc: subprocess.Popen[bytes], on_ready: Callable[[], None] | None) -> None:
    """The state is the one judged: do what comes first (its failure stops the agent and
    is raised), then the word to start."""
    if on_ready is not None:
        try:
            on_ready()
        except BaseException:
            end_agent(proc)
            raise
    say(proc, b"go\n")


def say(proc: subprocess.Popen[bytes], word: bytes) -> None:
    assert proc.stdin is not None
    with contextlib.suppress(BrokenPipeError):
        proc.stdin.write(word)
        proc.stdin.flush()


def end_agent(proc: subprocess.Popen[bytes]) -> None:
    """The agent waits for a word that will not come: it is ended."""
    proc.kill()
    proc.wait()


@contextlib.contextmanager
def raw_terminal(wanted: bool) -> Iterator[None]:
    """Our terminal raw while the command runs in the agent's (keys pass as bytes: Ctrl-C
    is the command's, its terminal's to turn into SIGINT), restored after."""
    if not wanted or not os.isatty(0):
        yield
        return
    import termios
    import tty

    saved = termios.tcgetattr(0)
    tty.setraw(0, termios.TCSADRAIN)  # keys typed ahead are kept (TCSAFLUSH drops them)
    try:
        yield
    finally:
        termios.tcsetattr(0, termios.TCSADRAIN, saved)


def terminal_size() -> dict[str, int] | None:
    """The request's `terminal` for a run from one (stdin a tty): its size; else None."""
    if not os.isatty(0):
        return None
    try:
        size = os.get_terminal_size(0)
    except OSError:
        return {"rows": 0, "cols": 0}
    return {"rows": size.lines, "cols": size.columns}


class Pending:
    """The signals envlock forwards, kept while the agent checks and may start the command:
    once it has started they go on to it (as a command started here gets a Ctrl-C pressed
    as it starts); when nothing started, envlock stops as interrupted. Either way the
    agent's answer is read first, so a command is never left running unseen. A second
    signal stops waiting: the local ssh client ends, and an agent still checking, once its
    session is closed, finds no reader for its answer, which it writes before it starts
    anything (one already past that point runs the command on: the user asked twice)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.signals: list[int] = []

    def __call__(self, signum: int, frame: object) -> None:
        self.signals.append(signum)
        if len(self.signals) > 1:
            with contextlib.suppress(OSError):
                self.proc.kill()
            raise KeyboardInterrupt


@contextlib.contextmanager
def signals_to(handler: Callable[[int, Any], None]) -> Iterator[Callable[..., None]]:
    """The forwarded signals go to `handler` until the block ends; inside, the function it
    yields hands them to another handler (no moment in between without one)."""
    previous = {sig: signal.signal(sig, handler) for sig in FORWARDED}

    def hand_to(other: Callable[[int, Any], None]) -> None:
        for sig in FORWARDED:
            signal.signal(sig, other)

    try:
        yield hand_to
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def read_answer(stdout: IO[bytes]) -> tuple[Any, bytes]:
    """The agent's next line as JSON (None when it is not), and the line."""
    line = stdout.readline()
    try:
        return (json.loads(line) if line.strip() else None), line
    except ValueError:
        return None, line


def ask(gate: Callable[[], bool], verdict: list[bool | BaseException]) -> None:
    try:
        verdict.append(gate())
    except BaseException as exc:  # raised in the caller's thread
        verdict.append(exc)


def follow(
    proc: subprocess.Popen[bytes],
    transport: Transport,
    target: str,
    hand_to: Callable[[Callable[..., None]], None],
    pending: list[int],
) -> int:
    """Relay the started command's stdio, forward signals to its group (those that came
    while it started first); its exit status."""
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    forward = Forwarder(transport, target=target)
    hand_to(forward)
    for signum in pending:
        forward(signum, None)
    relays = [
        threading.Thread(target=relay, args=(proc.stdout, sys.stdout), daemon=True),
        threading.Thread(target=relay, args=(proc.stderr, sys.stderr), daemon=True),
    ]
    for thread in relays:
        thread.start()
    threading.Thread(target=feed_stdin, args=(proc.stdin,), daemon=True).start()
    code = proc.wait()
    for thread in relays:
        thread.join()
    if code < 0 and transport.name != "local":
        raise connection_lost(transport, target)
    return code


def connection_lost(transport: Transport, target: str) -> OperationError:
    """The local ssh (or pct) client was killed while the command ran: the command is
    stopped over a new connection (a lost session alone may leave it running), exit 3."""
    try:
        stopped = transport.run(["sh", "-c", 'kill -s TERM -- "$1"', "sh", target]).ok
    except OperationError:
        stopped = False
    if stopped:
        return OperationError(
            f"the connection to {transport.name} was lost while the command ran (it was stopped)"
        )
    return OperationError(
        f"the connection to {transport.name} was lost while the command ran",
        hint=f"it may still run there: stop it with `kill -- {target}` on the target",
    )


def relay(source: IO[bytes], sink: IO[str]) -> None:
    """Copy a pipe to our stream as it comes (what the buffer already holds first)."""
    sink.flush()
    fd = sink.fileno()
    read = getattr(source, "read1", source.read)
    while True:
        chunk = read(1 << 16)
        if not chunk:
            return
        view = memoryview(chunk)
        while view:
            view = view[os.write(fd, view) :]


def feed_stdin(pipe: IO[bytes]) -> None:
    """Our stdin to the command, until either ends."""
    try:
        while True:
            chunk = os.read(0, 1 << 16)
            if not chunk:
                break
            pipe.write(chunk)
            pipe.flush()
    except (OSError, ValueError):
        pass
    finally:
        with contextlib.suppress(OSError, ValueError):
            pipe.close()
