"""What every target shares: the transport interface (run an argv, get a Result) and how a
transport fails, the target types of the registry (with what `envlock init` writes for each),
and the provisioner interface of a container."""

from __future__ import annotations

import re
import shlex
import subprocess
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import IO, Any, ClassVar, Protocol, TypeVar, runtime_checkable

from envlock.base.drift_kinds import Drift
from envlock.base.tomlread import Table
from envlock.errors import OperationError

T = TypeVar("T")


@dataclass(frozen=True)
class Result:
    argv: tuple[str, ...]
    exit_code: int
    stdout: bytes
    stderr: bytes

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def text(self) -> str:
        return self.stdout.decode(errors="replace")

    def error_text(self) -> str:
        return self.stderr.decode(errors="replace").strip()


class CommandFailed(OperationError):
    """A command on a target exited non-zero; carries its Result."""

    def __init__(self, where: str, result: Result) -> None:
        tail = result.error_text().splitlines()[-8:]
        super().__init__(
            f"{where}: `{shlex.join(result.argv)}` exited {result.exit_code}"
            + ("\n  " + "\n  ".join(tail) if tail else "")
        )
        self.result = result


class Transport(Protocol):
    """How commands reach a target. Every command is an argv list; quoting is the
    transport's business, done once per hop."""

    name: str
    system_python: str

    def run(
        self,
        argv: list[str],
        *,
        stdin: bytes | IO[bytes] | None = None,
        env: Mapping[str, str] | None = None,
        on_stderr_line: Callable[[str], None] | None = None,
    ) -> Result: ...

    def spawn(self, argv: list[str], *, piped: bool = False) -> subprocess.Popen[bytes]:
        """Start argv with stdio passed through (interactive), or with pipes for the caller
        to speak through (`piped`: never a terminal); the caller waits for it."""
        ...


# -- how a transport fails ----------------------------------------------------------------
# Each transport's own errors derive from TransportFailed; code outside targets/ catches
# these classes (or asks the error), never a transport's own: a new type's transport adds
# its classes, and every caller already knows what to do with them.


class TransportFailed(OperationError):
    """A transport could not carry a command to the target, or lost it under way: never the
    command's own failure (a command that ran and exited non-zero is a Result)."""

    # Its hint says the command did not start (pct's own refusals): a caller that knows the
    # command had started (the agent's progress proves it) drops that hint.
    hint_says_not_started: ClassVar[bool] = False


class ConnectionLost(TransportFailed):
    """The connection ended under a running command (it may have started, or finished)."""

    def __init__(self, message: str, *, connection: str, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.connection = connection  # in words: "the ssh connection"


class NotRunning(TransportFailed):
    """The machine or container the commands run in is not running."""


class StopsUnder:
    """A container's transport: a command cut short may be so because the container stopped
    under it. Its class says how to ask (`stopped`) and how to start it (`start_hint`)."""

    name: str

    def stopped(self) -> bool:
        """Whether the container is stopped now; False when that cannot be asked."""
        raise NotImplementedError

    def start_hint(self) -> str:
        raise NotImplementedError

    def stopped_while(self, what: str) -> OperationError | None:
        """The error for a command cut short because the container stopped under it (None
        when it still runs): what to do is to start it again, not "start it" as if it never
        had been."""
        if not self.stopped():
            return None
        return OperationError(
            f"{self.name} stopped while {what}: it was cut short",
            hint=f"{self.start_hint()}, then run it again; what it wrote before the stop "
            "is as it left it",
        )


@runtime_checkable
class Multiplexed(Protocol):
    """A transport whose commands share one connection per machine (ssh's master): a fleet
    opens it once per node before the node's members run, and starts their clients in
    sessions of its own."""

    def open_master(self) -> None: ...

    def use_sessions(self, sessions: Sessions) -> None: ...


class Sessions:
    """Local clients (ssh) started in sessions of their own, for a fleet's members: a
    terminal's Ctrl-C goes to its whole foreground process group, and the fleet lets the
    members in flight finish rather than lose their connections. `end()` ends the local
    clients still running (when a second Ctrl-C stops waiting for them) and refuses new ones."""

    def __init__(self) -> None:
        self.live: set[subprocess.Popen[bytes]] = set()
        self.lock = threading.Lock()
        self.ended = False

    @contextmanager
    def started(self, argv: list[str]) -> Iterator[subprocess.Popen[bytes]]:
        with self.lock:
            if self.ended:
                raise OperationError("interrupted: no new connection starts")
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
            self.live.add(proc)
        try:
            yield proc
        finally:
            with self.lock:
                self.live.discard(proc)

    def end(self) -> None:
        with self.lock:
            self.ended = True
            for proc in self.live:
                proc.terminate()  # a no-op once it has exited


# -- target types -------------------------------------------------------------------------
# A profile's [target] names a type; each type is one module (local, ssh, lxc) that parses
# its own settings, builds its transport, and may provide a provisioner for the machine or
# container around the environment. Commands ask the target, never compare type names.

# Turns a path written in a profile into an absolute controller-side path.
LocalPath = Callable[[str], str]


@dataclass(frozen=True)
class ContainerCheck:
    """What a provisioner found about the container, before anything is changed."""

    exists: bool
    running: bool
    drifts: tuple[Drift, ...]
    # Its changes replace the container (docker's recreate): what is inside is planned
    # after them, as for a stopped one, never before.
    replaces: bool = False


@dataclass(frozen=True)
class ContainerSnapshot:
    """A snapshot of the container, as `envlock generations --container` lists it."""

    name: str
    taken: str  # UTC "YYYY-MM-DD HH:MM:SS", or "" when the API did not say
    generation: str  # the generation active in it: a name, "none", or "unknown"
    lock: str  # that generation's lock ("" when unknown)
    ours: bool  # envlock's own (named envlock-…): the only ones keep-snapshots prunes

    def to_json(self) -> dict[str, Any]:
        """The row of `generations --container --json`: what is not known is null there, as
        in every document, never the description's words ("none", "unknown …", "")."""
        return {
            "name": self.name,
            "taken": self.taken or None,
            "generation": known(self.generation),
            "lock_id": known(self.lock),
            "ours": self.ours,
        }


def known(said: str) -> str | None:
    """A snapshot description's value, or None for the placeholders envlock writes there
    (`generation: none` before any apply, `unknown (the container was stopped)`)."""
    return None if said in ("", "none") or said.startswith("unknown") else said


class Provisioner(Protocol):
    """The container (or machine) around an environment: checked, provisioned, rolled back."""

    # The key of its table that bounds envlock's own snapshots ("keep-snapshots").
    keep_key: str

    def describe(self) -> str: ...

    def check(self) -> ContainerCheck: ...

    def snapshot(
        self,
        *,
        generation: str | None,
        lock: str,
        applying: str,
        on_progress: Callable[[str], None] | None,
    ) -> str | None:
        """Before an apply changes anything, snapshot the container when the profile asks
        for it (and prune envlock's oldest); returns the snapshot's name, or None.
        `generation` is the active one ("none"), None when it could not be read."""
        ...

    def provision(self, *, restart: bool, on_progress: Callable[[str], None] | None) -> list[str]:
        """Bring the container to the profile; with `restart`, restart it when config
        changes wait for its next start."""
        ...

    def snapshots(self) -> list[ContainerSnapshot]: ...

    def rollback(self, name: str | None, on_progress: Callable[[str], None] | None) -> str: ...


def prune_oldest(
    ours: Sequence[T],
    keep: int,
    *,
    key: str,
    say: Callable[[str], None],
    describe: Callable[[T], str],
    remove: Callable[[T], None],
) -> None:
    """Remove envlock's own snapshots (`ours`, oldest first) beyond the newest `keep`, each
    said first ("deleting LXC snapshot NAME (keep-snapshots = 3)"); never anyone else's:
    the caller passes only its own."""
    for old in ours[: max(0, len(ours) - keep)]:
        say(f"{describe(old)} ({key} = {keep})")
        remove(old)


def restore_point_name(prefix: str, generation: str | None, now: datetime, taken: set[str]) -> str:
    """`<prefix><generation number>-<UTC yyyymmddHHMMSS>`, unique among `taken` (`-2`, `-3`
    when two applies fall within one second): a Proxmox snapshot's name, a Docker commit's
    tag."""
    number = "unknown" if generation is None else generation.split("-", 1)[0] or "none"
    number = re.sub(r"[^A-Za-z0-9_]", "_", number)[:12]
    base = f"{prefix}{number}-{now.strftime('%Y%m%d%H%M%S')}"
    name, count = base, 1
    while name in taken:
        count += 1
        name = f"{base}-{count}"
    return name


def restore_point_record(made: str, generation: str | None, lock: str, applying: str) -> str:
    """What a snapshot or commit holds, in the lines each type's listing reads back
    ("envlock: taken before an apply", generation, lock, applying)."""
    return "\n".join(
        [
            f"envlock: {made} before an apply",
            f"generation: {generation or 'unknown (the container was stopped)'}",
            f"lock: {lock or 'unknown'}",
            f"applying: {applying}",
        ]
    )


@dataclass(frozen=True)
class InitFlag:
    """One option of `envlock init` that sets a [target] key of the starter profile. The
    types whose starter rows hold the same flag share the option; its help names them."""

    option: str  # "--ssh-option"
    key: str  # the [target] key it writes ("ssh-options"); click's name is key with "_"
    help: str  # after the names of the types that take it: "ssh / proxmox-lxc: …"
    metavar: str | None = None
    integer: tuple[int, int | None] | None = None  # an integer in this range, else text
    repeatable: bool = False  # a list: the option may be given again
    placeholder: str | int | None = None  # written when not given, for the user to edit
    example: str = ""  # for the hint when a type needs it: "e.g. --host pve1"
    # An option of the ssh connection: given for a type that is not reached over ssh, init
    # refuses it rather than drop a key or an option the user meant.
    over_ssh: bool = False


@dataclass(frozen=True)
class StarterRow:
    """What `envlock init` writes for a type, and the options it takes for it."""

    explain: str  # the comment above [target]
    root: str  # default root and venv ({name}: the profile's); relative: beside the profile
    venv: str
    flags: tuple[InitFlag, ...] = ()  # in the order their keys are written
    required: tuple[str, ...] = ()  # the keys of the flags it cannot do without
    notes: tuple[str, ...] = ()  # comment lines after the keys (where a secret comes from)


@dataclass(frozen=True)
class TargetType:
    """One kind of target, as registered in targets/registry.py: everything the rest of
    envlock asks of a type is here, so a new type is one module and one registry line."""

    name: str
    remote: bool  # paths are the target's (absolute), uv and the agent are pushed there
    read_settings: Callable[[Table, LocalPath], Any]
    transport: Callable[[Any], Transport]
    starter: StarterRow  # what `envlock init --target NAME` writes, and its options
    over_ssh: bool = False  # reached over ssh: init's ssh options apply to it
    # The classes its transport raises (each a TransportFailed; callers catch the base).
    failures: tuple[type[TransportFailed], ...] = ()
    # [container]: parsed by the type that has one, given the type's [target] settings;
    # None means the table is refused.
    read_container: Callable[[Table, Any], Any] | None = None
    provisioner: Callable[[Any, Any], Provisioner] | None = None
    # The name of that table in a profile ([container] for Proxmox, [docker] for Docker).
    container_table: str = "container"
    # A fleet profile's members (envlock.targets.members.Member), listed now from its
    # settings; None: the type has no fleets. A member's own settings are `settings.member(m)`.
    members: Callable[[Any], list[Any]] | None = None
    # What to check when a fleet's selection matches no member (the type's own words).
    no_members_hint: str = "check [target] select against the containers there"


@dataclass(frozen=True)
class Target:
    """Where the environment lives: root and stable venv path, plus the type's settings."""

    kind: TargetType
    root: str
    venv: str
    settings: Any = None

    @property
    def type(self) -> str:
        return self.kind.name

    @property
    def remote(self) -> bool:
        return self.kind.remote

    def transport(self) -> Transport:
        return self.kind.transport(self.settings)
