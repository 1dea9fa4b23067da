"""The docker target type: a Docker container, reached through the docker CLI's `docker exec`.

Each command is one `docker [-H HOST] exec -i CONTAINER env -i K=V … argv`: the docker CLI
passes the argv on as a list (no shell anywhere), `env -i` clears what the container's
config and the engine would pass on, and envlock sets what it needs, as `pct exec` does for
a Proxmox container. HOST is a DOCKER_HOST (`unix:///run/docker.sock`, `ssh://gpu-node`);
without one the CLI's own default (DOCKER_HOST, the current context) is used. The
container's lifecycle (a [docker] table) goes through the Docker SDK for Python, loaded
only for a profile that declares one (envlock/docker/).
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING

from envlock.base import started
from envlock.base.tomlread import Table, shown
from envlock.targets.base import (
    InitFlag,
    LocalPath,
    NotRunning,
    Provisioner,
    Result,
    Sessions,
    StarterRow,
    StopsUnder,
    TargetType,
    Transport,
    TransportFailed,
)
from envlock.targets.docker_fleet import (
    DEFAULT_ENGINE,
    DockerFleet,
    list_members,
    read_engines,
    read_select,
)
from envlock.targets.local import communicate, spawn_ignoring_signals
from envlock.targets.members import FleetTransport, Member

if TYPE_CHECKING:
    # Read when a profile declares [docker]: a profile without one loads none of it.
    from envlock.docker.settings import DockerSpec

CONTAINER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
BASE_ENV = {"PATH": CONTAINER_PATH, "HOME": "/root", "LANG": "C.UTF-8", "USER": "root"}
# A container's name as the engine accepts it.
NAME_RE = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}")
HOST_SCHEMES = ("unix://", "ssh://")


class EngineUnreachable(TransportFailed):
    """The docker CLI could not reach the engine (its daemon down, a wrong host)."""

    hint_says_not_started = True


class EnginePermission(TransportFailed):
    """The engine's socket refused this user."""

    hint_says_not_started = True


class ContainerMissing(TransportFailed):
    hint_says_not_started = True


class ContainerNotRunning(NotRunning):
    hint_says_not_started = True


class CommandMissing(TransportFailed):
    pass


class DockerCliMissing(TransportFailed):
    """No `docker` on this machine's PATH."""


DOCKER_FAILURES: tuple[type[TransportFailed], ...] = (
    EngineUnreachable,
    EnginePermission,
    ContainerMissing,
    ContainerNotRunning,
    CommandMissing,
    DockerCliMissing,
)

# The docker CLI's own words (20.10 to 28), before the command ever ran.
NO_ENGINE = re.compile(
    r"^(Cannot connect to the Docker daemon|error during connect|"
    r"failed to connect to the docker API)",
    re.M | re.I,
)
NO_PERMISSION = re.compile(r"permission denied while trying to connect to the Docker daemon", re.I)
NO_CONTAINER = re.compile(r"^Error response from daemon: No such container", re.M)
NOT_RUNNING = re.compile(
    r"^Error response from daemon: Container \S+ is (not running|paused)", re.M
)
MISSING_COMMAND = re.compile(
    r"executable file not found|env: [‘'](?P<env>[^’']+)[’']: No such file"
)
DOCKER_OWN_EXITS = (1, 125, 126, 127)


@dataclass(frozen=True)
class DockerSettings:
    """[target] container and host; a fleet profile has `fleet` (select, hosts) instead of
    a container, and each member its container, engine name (`node`) and host."""

    container: str
    host: str | None = None
    node: str | None = None  # a fleet member's engine, by its name in [target] hosts
    fleet: DockerFleet | None = None

    def where(self) -> str:
        return f"container {self.container}" + (f" on {self.host}" if self.host else "")

    def member(self, member: Member) -> DockerSettings:
        """The settings of one fleet member: its container on its engine."""
        assert self.fleet is not None
        host = self.fleet.host_of(member.node)
        return DockerSettings(container=member.name, host=host, node=member.node)

    @property
    def member_key(self) -> str:
        """A fleet member's own folder name (`snapshot` into DIR/ENGINE/NAME/)."""
        engine = re.sub(r"[^A-Za-z0-9_.-]+", "_", self.node or DEFAULT_ENGINE).strip("_")
        return f"{engine}/{self.container}"


class DockerTransport(StopsUnder):
    """Runs argv in a container with `docker exec`, through the local docker CLI."""

    system_python = "python3"

    def __init__(self, settings: DockerSettings) -> None:
        self.settings = settings
        self.container = settings.container
        self.name = settings.where()
        self.sessions: Sessions | None = None  # a fleet's: its clients in sessions of their own

    def open_master(self) -> None:
        """Nothing to open: each `docker exec` is its own connection to the engine."""

    def use_sessions(self, sessions: Sessions) -> None:
        """Start every docker client of this transport in a session of its own (a fleet's:
        the Ctrl-C a terminal sends its foreground group leaves the members in flight be)."""
        self.sessions = sessions

    def docker_argv(self) -> list[str]:
        return ["docker", *(["-H", self.settings.host] if self.settings.host else [])]

    def wrap(
        self, argv: list[str], env: Mapping[str, str] | None, *, tty: bool = False
    ) -> list[str]:
        variables = {**BASE_ENV, **(env or {})}
        return [
            *self.docker_argv(),
            "exec",
            "-i",
            *(["-t"] if tty else []),
            self.container,
            "env",
            "-i",
            *(f"{k}={v}" for k, v in variables.items()),
            *argv,
        ]

    def command_line(self, argv: list[str]) -> list[str] | None:
        """The local command line `run(argv)` starts (commands/ahead.py); None in a fleet's
        sessions."""
        return None if self.sessions is not None else self.wrap(argv, None)

    def run(
        self,
        argv: list[str],
        *,
        stdin: bytes | IO[bytes] | None = None,
        env: Mapping[str, str] | None = None,
        on_stderr_line: Callable[[str], None] | None = None,
    ) -> Result:
        full = self.wrap(argv, env)
        # The same command with the same request, begun ahead (envlock/base/started.py).
        ahead = None
        if self.sessions is None and isinstance(stdin, bytes):
            ahead = started.take(full, stdin)
        if self.sessions is not None:
            try:
                with self.sessions.started(full) as proc:
                    result = communicate(proc, argv, stdin, on_stderr_line)
            except FileNotFoundError:
                raise self.no_cli() from None
        elif ahead is not None:
            result = communicate(ahead, argv, None, on_stderr_line)
        else:
            result = communicate(self.start(full), argv, stdin, on_stderr_line)
        if not result.ok:
            self.raise_for_docker(result, argv)
        return result

    def start(self, full: list[str]) -> subprocess.Popen[bytes]:
        pipe = subprocess.PIPE
        try:
            return subprocess.Popen(full, stdin=pipe, stdout=pipe, stderr=pipe)
        except FileNotFoundError:
            raise self.no_cli() from None

    def no_cli(self) -> DockerCliMissing:
        return DockerCliMissing(
            f"{self.name}: the docker CLI is not installed on this machine",
            hint="install it (Debian/Ubuntu: `apt-get install docker.io`, or docker-ce-cli)",
        )

    def spawn(self, argv: list[str], *, piped: bool = False) -> subprocess.Popen[bytes]:
        """Start argv in the container with stdio passed through (a tty when ours is one),
        or through pipes (`piped`)."""
        tty = sys.stdin.isatty() and not piped
        full = self.wrap(argv, None, tty=tty)
        ahead = started.take_waiting(full) if piped and self.sessions is None else None
        try:
            return ahead or spawn_ignoring_signals(full, piped=piped)
        except FileNotFoundError:
            raise self.no_cli() from None

    def inspect_state(self) -> str | None:
        """The container's state as the engine says it ("running", "exited", …), None when
        the engine cannot be asked."""
        argv = [*self.docker_argv(), "inspect", "-f", "{{.State.Status}}", self.container]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    def stopped(self) -> bool:
        """Whether the engine says the container is not running now (after a command was
        cut short); False when it cannot be asked."""
        state = self.inspect_state()
        return state is not None and state != "running"

    def start_hint(self) -> str:
        return (
            f"start it: `{' '.join(self.docker_argv())} start {self.container}`, or "
            "`envlock apply` when the profile declares a [docker] table"
        )

    def raise_for_docker(self, result: Result, argv: list[str]) -> None:
        """The docker CLI's own failures become distinct errors; the command's pass on."""
        if result.stdout.strip() or result.exit_code not in DOCKER_OWN_EXITS:
            return
        text = result.error_text()
        failure = self.failure_of(text)
        if failure is not None:
            raise failure
        missing = MISSING_COMMAND.search(text)
        if missing and result.exit_code in (126, 127):
            name = missing.group("env") or argv[0]
            raise CommandMissing(
                f"{self.name}: command not found in the container: {name}",
                hint="install it in the container's image (python3 is needed for envlock's agent)",
            )

    def failure_of(self, text: str) -> TransportFailed | None:
        where = self.settings.host or "the default engine (DOCKER_HOST, or the current context)"
        if NO_PERMISSION.search(text):
            return EnginePermission(
                f"{self.name}: permission denied on the Docker engine's socket ({where})",
                hint="run envlock as root or as a member of the `docker` group, or set "
                "[target] host to an engine this user may use",
            )
        if NO_ENGINE.search(text):
            return EngineUnreachable(
                f"{self.name}: the Docker engine at {where} does not answer: "
                + text.splitlines()[-1],
                hint="is dockerd running there? check [target] host",
            )
        if NO_CONTAINER.search(text):
            return ContainerMissing(
                f"{self.name} does not exist",
                hint="check [target] container and host; for envlock to create it, declare "
                "it in a [docker] table",
            )
        if NOT_RUNNING.search(text):
            return ContainerNotRunning(f"{self.name} is not running", hint=self.start_hint())
        return None


# -- the target type ----------------------------------------------------------------------
def read_docker_settings(t: Table, local_path: LocalPath) -> DockerSettings:
    host = t.text("host", None)
    if host is not None:
        check_host(t, host)
    select = read_select(t)
    if select is not None:
        if t.has("container"):
            t.fail(
                "container",
                "a fleet profile (select) cannot name one container",
                hint="drop `container`: the fleet's containers are those select matches",
            )
        labels, name = select
        fleet = DockerFleet(labels, name, read_engines(t, host, check_host))
        return DockerSettings(container="", fleet=fleet)
    if t.has("hosts"):
        t.fail("hosts", "several engines are for a fleet profile (select)", hint="give one host")
    container = t.text("container", None)
    if container is None:
        t.missing("container", "or `select` for a fleet")
    if not NAME_RE.fullmatch(container):
        t.fail(
            "container",
            f"expected a container's name or id, found {shown(container)}",
            hint="letters, digits, '_', '.' and '-', starting with a letter or digit",
        )
    return DockerSettings(container=container, host=host)


def check_host(t: Table, host: str, key: str = "host") -> None:
    if not host.startswith(HOST_SCHEMES) or any(c.isspace() for c in host):
        t.fail(
            key,
            f"expected a DOCKER_HOST such as unix:///run/docker.sock or ssh://gpu-node, "
            f"found {shown(host)}",
            hint="unix:// (a local socket) or ssh:// (an engine on another host, through ssh)",
        )
    if host.startswith("ssh://") and host[len("ssh://") :].startswith("-"):
        t.fail(key, f"expected a host name after ssh://, found {shown(host)}")


def docker_members(settings: DockerSettings) -> list[Member]:
    """A fleet profile's containers, listed now on each of its engines."""
    assert settings.fleet is not None
    return list_members(settings.fleet)


def read_docker_table(t: Table, settings: DockerSettings) -> DockerSpec:
    """[docker]: the container envlock creates and keeps as declared (envlock/docker/)."""
    from envlock.docker.settings import read_docker_spec

    if settings.fleet is not None:
        t.fail(
            None,
            "a [docker] table declares one container; a fleet's are the containers its "
            "select matches, made by someone else",
            hint="drop [docker], or name one container in [target] container",
        )

    return read_docker_spec(t, settings.container)


def docker_provisioner(settings: DockerSettings, spec: DockerSpec) -> Provisioner:
    # The Docker SDK (docker, requests) loads only for profiles that declare a [docker].
    from envlock.docker.provision import DockerProvisioner

    return DockerProvisioner(settings.host, settings.where(), spec)


DOCKER_FLAGS = (
    InitFlag(
        "--container",
        "container",
        "the container's name.",
        placeholder="CONTAINER",
        example="trainer",
    ),
)


def docker_transport(settings: DockerSettings) -> Transport:
    if settings.fleet is not None:
        return FleetTransport()
    return DockerTransport(settings)


DOCKER = TargetType(
    name="docker",
    remote=True,
    read_settings=read_docker_settings,
    transport=docker_transport,
    starter=StarterRow(
        "# Where: a Docker container, reached with `docker exec` (the local docker CLI).",
        root="/opt/envlock",
        venv="/opt/venv",
        flags=DOCKER_FLAGS,
        required=("container",),
        notes=(
            "# The engine (default: the local one, as the docker CLI finds it), a DOCKER_HOST:",
            '# host = "ssh://gpu-node"',
            "# Keep the root on a volume or bind mount to survive a recreated container;",
            "# a [docker] table lets envlock create and recreate the container itself.",
        ),
    ),
    failures=DOCKER_FAILURES,
    read_container=read_docker_table,
    provisioner=docker_provisioner,
    container_table="docker",
    members=docker_members,
)
