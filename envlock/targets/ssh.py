"""The ssh target: the OpenSSH client as a subprocess, multiplexed over one connection.

Using the real client keeps users' ~/.ssh/config, agents and jump hosts working. The remote
command is an argv joined with shlex.join exactly once, for the remote shell.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from envlock.base import started
from envlock.base.tomlread import Table, shown
from envlock.errors import OperationError
from envlock.targets.base import (
    ConnectionLost,
    InitFlag,
    LocalPath,
    Result,
    Sessions,
    StarterRow,
    TargetType,
    TransportFailed,
)
from envlock.targets.local import communicate, spawn_ignoring_signals

SSH_FAILED = 255
# How long an idle master connection stays up for the next envlock command.
CONTROL_PERSIST = "60"


def control_dir() -> Path:
    """A private directory for ControlMaster sockets (mode 0700, short path)."""
    import tempfile  # here: every profile loads this module, few open an ssh connection

    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    path = Path(base) / f"envlock-ssh-{os.getuid()}"
    path.mkdir(mode=0o700, exist_ok=True)
    if path.stat().st_uid != os.getuid() or path.stat().st_mode & 0o077:
        raise OperationError(f"{path} is not a private directory", hint="remove it and retry")
    return path


class SshTransport:
    """Runs argv on a host over ssh; also the first hop of the pct transport."""

    system_python = "python3"
    # None: ssh runs in envlock's own process group (it gets the terminal's Ctrl-C).
    sessions: Sessions | None = None

    def __init__(
        self,
        host: str,
        *,
        user: str | None = None,
        port: int | None = None,
        identity_file: str | None = None,
        options: tuple[str, ...] = (),
    ) -> None:
        self.host = host
        self.user = user
        self.port = port
        self.identity_file = identity_file
        self.options = options
        self.name = f"ssh {user + '@' if user else ''}{host}{':' + str(port) if port else ''}"

    def ssh_argv(self, *, tty: bool = False) -> list[str]:
        argv = [
            "ssh",
            "-o",
            "BatchMode=yes",
            "-o",
            "ControlMaster=auto",
            "-o",
            f"ControlPath={self.control_path()}",
            "-o",
            f"ControlPersist={CONTROL_PERSIST}",
        ]
        # With a terminal, ssh says "Shared connection to … closed." at its end (a message
        # of level INFO): the user's terminal shows only the command's bytes.
        argv += ["-t", "-o", "LogLevel=ERROR"] if tty else ["-T"]
        if self.port:
            argv += ["-p", str(self.port)]
        if self.identity_file:
            argv += ["-i", self.identity_file, "-o", "IdentitiesOnly=yes"]
        if self.user:
            argv += ["-l", self.user]
        for option in self.options:
            argv += ["-o", option]
        return [*argv, self.host, "--"]

    def control_path(self) -> str:
        """One master connection per distinct way of connecting: two profiles that reach the
        same host with other keys or known_hosts files never share a connection."""
        key = json.dumps([self.host, self.user, self.port, self.identity_file, self.options])
        return f"{control_dir()}/{hashlib.sha256(key.encode()).hexdigest()[:20]}"

    def control_argv(self, operation: str) -> list[str]:
        """`ssh -O operation`: a question or order to this connection's master, answered
        through its local socket (no session on the host)."""
        return [*self.ssh_argv()[:-1], "-O", operation, self.host]

    def master_running(self) -> bool:
        return (
            os.path.exists(self.control_path())
            and subprocess.run(self.control_argv("check"), capture_output=True).returncode == 0
        )

    def open_master(self) -> None:
        """A master connection up for the commands that follow to share: the one running
        already when its socket answers (~8 ms, a local question), else a new one (a `true`
        on the host: a session there, ~0.13 s even over a warm master)."""
        if not self.master_running():
            self.run(["true"])

    def use_sessions(self, sessions: Sessions) -> None:
        """Start every client of this transport in a session of its own (a fleet's)."""
        self.sessions = sessions

    def remote_command(self, argv: list[str], env: Mapping[str, str] | None) -> str:
        """The one string the remote shell parses: `env K=V … argv`, quoted once."""
        if env:
            argv = ["env", *(f"{k}={v}" for k, v in env.items()), *argv]
        return shlex.join(argv)

    def run(
        self,
        argv: list[str],
        *,
        stdin: bytes | IO[bytes] | None = None,
        env: Mapping[str, str] | None = None,
        on_stderr_line: Callable[[str], None] | None = None,
    ) -> Result:
        full = [*self.ssh_argv(), self.remote_command(argv, env)]
        # The same command with the same request, begun ahead (envlock/base/started.py).
        ahead = None
        if self.sessions is None and isinstance(stdin, bytes):
            ahead = started.take(full, stdin)
        if self.sessions is not None:
            with self.sessions.started(full) as proc:
                result = communicate(proc, argv, stdin, on_stderr_line)
        elif ahead is not None:
            result = communicate(ahead, argv, None, on_stderr_line)
        else:
            proc = subprocess.Popen(
                full, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
            result = communicate(proc, argv, stdin, on_stderr_line)
        if result.exit_code == SSH_FAILED:
            self.raise_for_connection(result)
        return result

    def command_line(self, argv: list[str]) -> list[str] | None:
        """The local command line `run(argv)` starts (None where it is not one: a fleet's
        sessions), for a process begun ahead (commands/ahead.py)."""
        return (
            None
            if self.sessions is not None
            else [*self.ssh_argv(), self.remote_command(argv, None)]
        )

    def spawn(self, argv: list[str], *, piped: bool = False) -> subprocess.Popen[bytes]:
        """Start argv on the host with stdio passed through (a remote tty when ours is one),
        or through pipes (`piped`)."""
        tty = sys.stdin.isatty() and not piped
        full = [*self.ssh_argv(tty=tty), self.remote_command(argv, None)]
        # A remote run's agent call, begun ahead and waiting for its request (commands/ahead.py).
        ahead = started.take_waiting(full) if piped and self.sessions is None else None
        return ahead or spawn_ignoring_signals(full, piped=piped)

    def raise_for_connection(self, result: Result) -> None:
        """ssh's own failures (exit 255) become clear errors; a command's 255 passes."""
        text = result.error_text()
        if re.search(LOST, text):
            last = text.strip().splitlines()[-1]
            raise ConnectionLost(
                f"{self.name}: the ssh connection was lost while the command ran: {last}",
                connection="the ssh connection",
                hint="check the network path to the host; the command may have started: "
                "`envlock check` says what the target holds now",
            )
        problem = connection_problem(text)
        if problem is not None:
            message, hint = problem
            raise SshFailed(f"{self.name}: {message}", hint=hint)


class SshFailed(TransportFailed):
    """ssh could not connect: its host key, the login, the address or the network."""


# OpenSSH's words for a connection that ends under a command (client, or its master).
LOST = (
    r"closed by remote host|client_loop: .*(Broken pipe|Connection reset)|"
    r"Connection reset by peer|Timeout, server .* not responding|read header failed"
)


PROBLEMS: list[tuple[str, str, str]] = [
    (
        r"REMOTE HOST IDENTIFICATION HAS CHANGED|Host key verification failed",
        "host key verification failed (the host's key is unknown or changed)",
        "check the key with the host's administrator, then update known_hosts "
        "(`ssh-keygen -R HOST`); envlock never disables host-key checking",
    ),
    (
        r"Permission denied",
        "authentication failed",
        "load a key into ssh-agent, or set [target] identity-file / user",
    ),
    (
        r"Connection refused",
        "connection refused",
        "is sshd running on that host and port? check [target] host and port",
    ),
    (
        r"Could not resolve hostname|Name or service not known",
        "unknown host name",
        "check [target] host (or your ~/.ssh/config alias)",
    ),
    (
        r"Connection timed out|No route to host|Network is unreachable",
        "host unreachable",
        "check the network path to the host",
    ),
]


def connection_problem(stderr: str) -> tuple[str, str] | None:
    for pattern, message, hint in PROBLEMS:
        if re.search(pattern, stderr):
            last = stderr.strip().splitlines()[-1] if stderr.strip() else ""
            return f"{message}: {last}", hint
    return None


def close_master(transport: SshTransport) -> None:
    """Ask the master connection to exit (benchmarks measure cold connections with it)."""
    subprocess.run(transport.control_argv("exit"), capture_output=True, check=False)


# -- the target type ----------------------------------------------------------------------
@dataclass(frozen=True)
class SshSettings:
    """How to reach a host over ssh ([target] host, user, port, identity-file, ssh-options,
    allow-insecure-ssh)."""

    host: str
    user: str | None = None
    port: int | None = None
    identity_file: str | None = None
    ssh_options: tuple[str, ...] = ()
    allow_insecure_ssh: bool = False

    def transport(self) -> SshTransport:
        return SshTransport(
            self.host,
            user=self.user,
            port=self.port,
            identity_file=self.identity_file,
            options=self.ssh_options,
        )


def read_ssh_settings(t: Table, local_path: LocalPath) -> SshSettings:
    host = t.text("host")
    if host.startswith("-") or not host.strip() or any(c.isspace() for c in host):
        t.fail(
            "host",
            f"expected a host name or ssh alias, found {shown(host)}",
            hint='no spaces, and no leading "-" (ssh would read it as an option)',
        )
    user = t.text("user", None)
    if user is not None and (not user or user.startswith("-") or any(c.isspace() for c in user)):
        t.fail(
            "user",
            f"expected a login name, found {shown(user)}",
            hint='no spaces, and no leading "-" (ssh would read it as an option)',
        )
    port = t.integer("port", None, minimum=1)
    if port is not None and port > 65535:
        t.fail("port", f"expected a TCP port (1-65535), found {port}")
    identity = t.text("identity-file", None)
    allow_insecure = t.boolean("allow-insecure-ssh", False)
    options = t.texts("ssh-options", [])
    for index, option in enumerate(options):
        check_ssh_option(t, f"ssh-options[{index}]", option, allow_insecure)
    return SshSettings(
        host=host,
        user=user,
        port=port,
        identity_file=local_path(identity) if identity else None,
        ssh_options=tuple(options),
        allow_insecure_ssh=allow_insecure,
    )


# Options that run a command on this machine (or load code into ssh) when a profile is used:
# a profile is shared data, and applying one must not execute what it says.
SSH_COMMAND_OPTIONS = {
    "proxycommand": "runs a local command to connect; for a jump host use ProxyJump=HOST",
    "localcommand": "runs a local command after connecting",
    "permitlocalcommand": "enables LocalCommand, which runs a local command",
    "knownhostscommand": "runs a local command to find host keys",
    "pkcs11provider": "loads a shared library into ssh",
    "securitykeyprovider": "loads a shared library into ssh",
}
# Values of these options that switch host-key checking off (ssh reads them case-blind).
SSH_INSECURE_VALUES = {
    "stricthostkeychecking": {"no", "off", "false"},
    "userknownhostsfile": {"/dev/null", "none"},
}


def check_ssh_option(t: Table, key: str, option: str, allow_insecure: bool) -> None:
    """A "Name=value" ssh option; those that run local commands or disable host-key
    checking are refused unless [target] allow-insecure-ssh = true."""
    match = re.fullmatch(r"([A-Za-z][A-Za-z0-9]*)=(.*)", option, flags=re.DOTALL)
    if match is None:
        t.fail(key, f'expected "Name=value", found {shown(option)}')
    problem = insecure_ssh_option(match.group(1).lower(), match.group(2))
    if problem is not None and not allow_insecure:
        t.fail(
            key,
            "expected an ssh option that keeps host-key checking on and runs no local "
            f"command, found {shown(option)}: it {problem}",
            hint="remove it, or set `allow-insecure-ssh = true` in [target] if this profile "
            "is meant to do that",
        )


def insecure_ssh_option(name: str, value: str) -> str | None:
    """Why an option (lowercase name) is unsafe in a profile, or None."""
    if name in SSH_COMMAND_OPTIONS:
        return SSH_COMMAND_OPTIONS[name]
    words = {word.strip("\"'").lower() for word in value.split()}
    if words & SSH_INSECURE_VALUES.get(name, set()):
        return "disables host-key checking"
    return None


# `envlock init`'s options for a target reached over ssh (proxmox-lxc's node too).
SSH_FLAGS = (
    InitFlag("--host", "host", "the host (or node) to ssh to.", placeholder="HOST", example="pve1"),
    InitFlag("--user", "user", "the login name."),
    InitFlag("--port", "port", "the ssh port.", integer=(1, 65535)),
    InitFlag(
        "--identity-file", "identity-file", "the ssh key to use.", metavar="KEY", over_ssh=True
    ),
    InitFlag(
        "--ssh-option",
        "ssh-options",
        "an ssh -o option, e.g. UserKnownHostsFile=FILE (repeatable).",
        metavar="OPTION",
        repeatable=True,
        over_ssh=True,
    ),
)
SSH_FAILURES: tuple[type[TransportFailed], ...] = (SshFailed, ConnectionLost)

SSH = TargetType(
    name="ssh",
    remote=True,
    read_settings=read_ssh_settings,
    transport=lambda settings: settings.transport(),
    starter=StarterRow(
        "# Where: a host reached over ssh (your ssh config and keys are used).",
        root="/opt/envlock",
        venv="/opt/venv",
        flags=SSH_FLAGS,
        required=("host",),
    ),
    over_ssh=True,
    failures=SSH_FAILURES,
)
