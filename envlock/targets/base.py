"""What every target shares: the transport interface (run an argv, get a Result), the
target types of the registry, and the provisioner interface of a container."""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import IO, Any, Protocol

from envlock.base.drift_kinds import Drift
from envlock.base.tomlread import Table
from envlock.errors import OperationError


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


@dataclass(frozen=True)
class TargetType:
    """One kind of target, as registered in targets/registry.py."""

    name: str
    remote: bool  # paths are the target's (absolute), uv and the agent are pushed there
    read_settings: Callable[[Table, LocalPath], Any]
    transport: Callable[[Any], Transport]
    # [container]: parsed by the type that has one, given the type's [target] settings;
    # None means the table is refused.
    read_container: Callable[[Table, Any], Any] | None = None
    provisioner: Callable[[Any, Any], Provisioner] | None = None


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
