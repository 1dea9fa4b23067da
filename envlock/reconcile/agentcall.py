"""Calling the target-side agent over a transport: one command line, JSON in and out."""

from __future__ import annotations

import json
import re
import signal
import threading
from collections.abc import Callable
from typing import IO, Any, cast

from envlock import ui
from envlock.base.pythons import own_python
from envlock.errors import OperationError, UsageError
from envlock.reconcile.agentcode import agent_bootstrap as agent_bootstrap
from envlock.targets.base import ConnectionLost, Result, Transport, TransportFailed

PROGRESS_PREFIX = "envlock-progress: "
OS_HINTS = {
    "ENOSPC": "the target's disk is full: run `envlock gc` (it removes old generations; "
    "`--dry-run` lists them) or free space otherwise, and apply again",
    "EROFS": "the root is on a read-only filesystem: set [target] root to a writable path",
    "EACCES": "permission denied: run as a user who may write the root, or change the root",
    "EPERM": "operation not permitted: run as a user who may write the root",
}


def agent_argv(transport: Transport, root: str, command: str, *, env_python: bool) -> list[str]:
    """The agent's command line: an isolated interpreter (pythons.py), the environment's own
    when `env_python` (a probe reads the generation it runs in), else the target's python."""
    return own_python(
        transport, agent_bootstrap(command), command, root=root if env_python else None
    )


def call_agent_raw(
    transport: Transport,
    root: str,
    command: str,
    request: dict[str, Any],
    *,
    stdin: bytes | IO[bytes] | None = None,
) -> Result:
    """Run an agent command whose stdout is data (a stream), the request as an argument."""
    argv = [*agent_argv(transport, root, command, env_python=False), json.dumps(request)]
    return transport.run(argv, stdin=stdin)


def call_agent(
    transport: Transport,
    root: str,
    command: str,
    request: dict[str, Any],
    *,
    env_python: bool = False,
    on_progress: Callable[[str], None] | None = None,
    meanwhile: Callable[[], object] | None = None,
    when_locked: Callable[[], object] | None = None,
) -> dict[str, Any]:
    """Run one agent command; returns its JSON answer or raises OperationError.

    `meanwhile` runs here while the target works (the controller loading what renders the
    answer: on two cores the two overlap). `when_locked` (apply only) runs once the agent
    holds the root's lock and found the plan still holds, before its first change; the
    agent waits for it, and stops without changing anything if it raises."""
    listener = Listener(json.dumps(request).encode(), on_progress, when_locked)

    def run() -> Result:
        return transport.run(
            agent_argv(transport, root, command, env_python=env_python),
            stdin=listener.stdin(),
            on_stderr_line=listener.line,
        )

    try:
        result = run() if meanwhile is None else run_while(run, meanwhile)
    except OperationError as exc:
        raise cut_short(transport, command, listener.said, exc) from exc
    if listener.failed:
        raise listener.failed[0]
    if listener.said and not answered(result):
        try:
            parse_answer(transport, command, result)
        except OperationError as exc:
            raise cut_short(transport, command, listener.said, exc) from exc
    return parse_answer(transport, command, result)


class Listener:
    """What an agent call hears on the agent's stderr: its progress lines (kept, as proof
    that it started, and handed on), and with `when_locked` its word that it holds the lock,
    answered through its stdin (a Dialogue)."""

    def __init__(
        self,
        request: bytes,
        on_progress: Callable[[str], None] | None,
        when_locked: Callable[[], object] | None,
    ) -> None:
        self.request = request
        self.on_progress = on_progress
        self.when_locked = when_locked
        self.dialogue = Dialogue(request) if when_locked is not None else None
        self.said: list[str] = []  # the agent's progress lines: proof that it started
        self.failed: list[BaseException] = []  # when_locked's, raised once the agent stopped

    def stdin(self) -> bytes | IO[bytes]:
        return cast(IO[bytes], self.dialogue) if self.dialogue else self.request

    def line(self, line: str) -> None:
        progress = line[len(PROGRESS_PREFIX) :] if line.startswith(PROGRESS_PREFIX) else None
        if progress is not None:
            self.said.append(progress)
        if self.dialogue is not None and line == LOCKED_READY:
            self.answer_locked(self.dialogue)
        elif self.on_progress is not None and progress is not None:
            from envlock.agent.core import LIVE  # a count a terminal shows in place

            if progress.startswith(LIVE):  # to a terminal only: never a pipe, a log, --json
                ui.live(progress[len(LIVE) :])
            else:
                self.on_progress(progress)

    def answer_locked(self, dialogue: Dialogue) -> None:
        """The agent holds the lock: run when_locked, and tell it to go on or to stop."""
        assert self.when_locked is not None
        try:
            self.when_locked()
        except BaseException as exc:  # raised by call_agent, after the agent stopped
            self.failed.append(exc)
            dialogue.answer(b"abort\n")
        else:
            dialogue.answer(b"go\n")


def answered(result: Result) -> bool:
    """Whether the agent's last line is its JSON answer (or its error)."""
    lines = result.text().strip().splitlines()
    try:
        return isinstance(json.loads(lines[-1]), dict) if lines else False
    except ValueError:
        return False


def cut_short(
    transport: Transport, command: str, said: list[str], exc: OperationError
) -> OperationError:
    """A transport failure after the agent had started (its progress lines prove it) is
    not "the command did not start" (pct's words): say what cut it short, and how far it
    got. The transport's errors are asked through their base classes (targets/base.py)."""
    if not said:
        return exc
    how_far = f'the agent\'s {command} had started (its last words: "{said[-1]}")'
    after = "nothing is half-switched (a switch is one rename); `envlock check` says "
    if isinstance(exc, ConnectionLost):
        return OperationError(
            f"{transport.name}: {exc.connection} was lost after {how_far}",
            hint=f"check the network path to the host; {after}what the target holds now, and "
            "`envlock apply` again converges",
        )
    stopped = getattr(transport, "stopped", None)
    if callable(stopped) and stopped():
        return OperationError(
            f"{transport.name} stopped while {how_far}",
            hint=f"start it and run the command again; {after}what the container holds",
        )
    detail = exc.message.removeprefix(f"{transport.name}: ")
    return OperationError(
        f"{transport.name}: {how_far} when it was cut short: {detail}",
        # Its hint says the command did not start (pct's): here it did.
        hint=None if isinstance(exc, TransportFailed) and exc.hint_says_not_started else exc.hint,
    )


# The agent's apply says this on stderr when it holds the lock and waits for a word.
LOCKED_READY = "envlock-locked: ready"


class Dialogue:
    """An agent's stdin that answers once: the request line first, then one word when the
    agent asks for it (on stderr), then its end. Read by the transport's stdin feeder."""

    def __init__(self, request: bytes) -> None:
        self.pending = [request + b"\n"]
        self.over = False
        self.ready = threading.Condition()

    def read(self, size: int = -1) -> bytes:
        with self.ready:
            while not self.pending and not self.over:
                self.ready.wait()
            return self.pending.pop(0) if self.pending else b""

    def answer(self, word: bytes) -> None:
        with self.ready:
            self.pending.append(word)
            self.over = True
            self.ready.notify_all()

    def ended(self) -> None:
        """The command exited: nothing more to say (the feeder stops waiting)."""
        with self.ready:
            self.over = True
            self.ready.notify_all()


def run_while(work: Callable[[], Result], meanwhile: Callable[[], object]) -> Result:
    """`work()` in a thread (it waits on a process, the GIL released) while `meanwhile()`
    runs here; the work's exception, if any, is raised here."""
    outcome: list[Result | BaseException] = []

    def target() -> None:
        try:
            outcome.append(work())
        except BaseException as exc:  # handed to the caller's thread
            outcome.append(exc)

    thread = threading.Thread(target=target, name="envlock-agent", daemon=True)
    thread.start()
    meanwhile()
    thread.join()
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    return outcome[0]


def parse_answer(transport: Transport, command: str, result: Result) -> dict[str, Any]:
    lines = result.text().strip().splitlines()
    try:
        answer = json.loads(lines[-1]) if lines else None
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        raise no_answer(transport, command, result)
    if "error" in answer:
        error = answer["error"]
        if error.get("kind") == "refused":  # the agent refused what it was asked: exit 2
            raise UsageError(f"{transport.name}: {error['message']}")
        message, errno = cause_first(str(error["message"]), str(error.get("errno", "")))
        raise OperationError(f"{transport.name}: {message}", hint=OS_HINTS.get(errno))
    return answer


def no_answer(transport: Transport, command: str, result: Result) -> OperationError:
    """The agent ended without its answer: its own lines (not the dialogue's), and how it
    ended. A negative status is a signal to the local process (the agent on a local target,
    the ssh or pct client otherwise): the connection was lost, not an exit of the agent."""
    stderr = "\n  ".join(
        line
        for line in result.error_text().splitlines()
        if not line.startswith(PROGRESS_PREFIX) and line != LOCKED_READY
    )
    how = f"failed with exit {result.exit_code}"
    if result.exit_code < 0 and transport.name == "local":
        how = f"was stopped ({signal_name(-result.exit_code)})"
    elif result.exit_code < 0:
        how = (
            "was cut off: the connection to the target was lost (the local client ended by "
            f"{signal_name(-result.exit_code)})"
        )
    return OperationError(
        f"{transport.name}: the envlock agent ({command}) {how}"
        + (f":\n  {stderr}" if stderr else "")
    )


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


# uv's (Rust's) words for a full disk, and Python's.
DISK_FULL = re.compile(r"No space left on device|os error 28|\[Errno 28\]")
# A step's failure as the agent words it: "uv pip sync failed (exit 2): <the command line>".
STEP_FAILED = re.compile(r"(?P<what>.+? failed \(exit -?\d+\)): (?P<argv>.*)")


def cause_first(message: str, errno: str) -> tuple[str, str]:
    """A failed step whose output names a cause envlock knows (a full disk) says the cause
    first, then the tool's own lines, then the command line (long: a lock and a venv path);
    the errno that picks the hint. Anything else is left as the agent said it."""
    if errno == "ENOSPC" or not DISK_FULL.search(message):
        return message, errno  # Python's own OSError already says it first
    first, _, rest = message.partition("\n")
    step = STEP_FAILED.fullmatch(first)
    if step is None:
        return f"No space left on device: {message}", "ENOSPC"
    said = "\n  ".join(line for line in rest.splitlines() if line.strip())
    return (
        f"No space left on device: {step['what']}; it said:\n  {said}\n"
        f"  the command: {step['argv']}",
        "ENOSPC",
    )
