"""The pct target: commands reach an LXC container through ssh to its Proxmox node.

Composition, as in pyinfra's docker-over-ssh connector: the pct transport holds an ssh
transport and wraps each argv in `pct exec VMID --keep-env 0 -- env -i … argv`. The node's
shell parses the one string ssh sends (quoted once, by the ssh hop); pct and lxc-attach pass
the argv on as a list. The node's environment never leaks in: envlock sets what it needs.

`--keep-env` exists from pve-container 5.0.9 (Proxmox VE 8.2); an older node refuses it
("Unknown option: keep-env"), is asked again without it, and the `env -i` wrapper alone
clears what pct would pass on.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Mapping
from typing import IO

from envlock.errors import OperationError
from envlock.targets.base import NotRunning, Result, Sessions, StopsUnder, TransportFailed
from envlock.targets.ssh import SshTransport

CONTAINER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
BASE_ENV = {"PATH": CONTAINER_PATH, "HOME": "/root", "LANG": "C.UTF-8", "USER": "root"}

# The node's shell could not find pct (bash, dash, zsh wordings).
NO_PCT = re.compile(r"(^|\s)pct: (command )?not found|command not found: pct", re.M)
# pct exec on a stopped container: "container '201' not running!" (PVE 6-9); older tools
# and the API say "CT 201 not running" or "VM 201 not running".
NOT_RUNNING = re.compile(r"(container|CT|VM) '?\d+'? (is )?not running")
NO_CONFIG = re.compile(r"Configuration file .* does not exist|no such container", re.I)
KEEP_ENV_REFUSED = re.compile(r"Unknown option: keep-env")
# pct's own refusals and lxc-attach's own failures, before the command ever ran.
PCT_OWN = re.compile(
    r"^(400 |Unknown option: |ERROR: unknown command|USAGE: pct|lxc-attach: |can't lock file)"
    r"|Parameter verification failed",
    re.M,
)
PERL_DIE = 255  # pct dies with Perl's status; envlock's agent never exits 255
# The name a shell or env could not find: `env: 'x': No such file…`, `exec: x: not found`.
MISSING_NAME = re.compile(
    r"env: [‘'](?P<env>[^’']+)[’']: No such file|exec: (?P<exec>[^:\s]+): not found"
)


class ContainerNotRunning(NotRunning):
    pass


class ContainerMissing(TransportFailed):
    pass


class CommandMissing(TransportFailed):
    pass


class NodeHasNoPct(TransportFailed):
    pass


class PctFailed(TransportFailed):
    """pct itself (or the lxc-attach it runs) failed before the command started."""

    hint_says_not_started = True


PCT_FAILURES: tuple[type[TransportFailed], ...] = (
    ContainerNotRunning,
    ContainerMissing,
    CommandMissing,
    NodeHasNoPct,
    PctFailed,
)


class PctTransport(StopsUnder):
    system_python = "python3"

    def __init__(self, node: SshTransport, vmid: int, node_name: str | None = None) -> None:
        self.node = node
        self.vmid = vmid
        self.node_name = node_name or node.host
        self.name = f"container {vmid} on {node.host}"
        # None until the node answers: does its pct know `--keep-env` (PVE >= 8.2)?
        self.keep_env: bool | None = None

    def wrap(self, argv: list[str], env: Mapping[str, str] | None) -> list[str]:
        variables = {**BASE_ENV, **(env or {})}
        keep_env = ["--keep-env", "0"] if self.keep_env is not False else []
        return [
            "pct",
            "exec",
            str(self.vmid),
            *keep_env,
            "--",
            "env",
            "-i",
            *(f"{k}={v}" for k, v in variables.items()),
            *argv,
        ]

    def command_line(self, argv: list[str]) -> list[str] | None:
        """The local command line `run(argv)` starts first (commands/ahead.py)."""
        return self.node.command_line(self.wrap(argv, None))

    def run(
        self,
        argv: list[str],
        *,
        stdin: bytes | IO[bytes] | None = None,
        env: Mapping[str, str] | None = None,
        on_stderr_line: Callable[[str], None] | None = None,
    ) -> Result:
        if self.keep_env is None and stdin is not None and not isinstance(stdin, bytes):
            self.detect_keep_env()  # a stream cannot be sent twice
        result = self.node.run(self.wrap(argv, env), stdin=stdin, on_stderr_line=on_stderr_line)
        if self.keep_env is None and refuses_keep_env(result):
            self.keep_env = False  # pct refused before it ran anything: ask again
            say_older_pve(self.node_name)
            result = self.node.run(self.wrap(argv, env), stdin=stdin, on_stderr_line=on_stderr_line)
        if not result.ok:
            self.raise_for_pct(result, argv)
        self.keep_env = self.keep_env is not False
        return Result(tuple(argv), result.exit_code, result.stdout, result.stderr)

    def stopped(self) -> bool:
        """Whether the node says the container is stopped now (after a command was cut
        short: did it stop under the command?); False when the node cannot be asked."""
        try:
            result = self.node.run(["pct", "status", str(self.vmid)])
        except OperationError:
            return False
        return result.ok and result.text().strip() == "status: stopped"

    def start_hint(self) -> str:
        return (
            f"start it: `pct start {self.vmid}` on the node {self.node_name}, or `envlock "
            "apply` when the profile declares a [container]"
        )

    def open_master(self) -> None:
        """The node's ssh master connection, up (shared by the node's containers)."""
        self.node.open_master()

    def use_sessions(self, sessions: Sessions) -> None:
        """The node hop's ssh clients start in the fleet's sessions."""
        self.node.sessions = sessions

    def detect_keep_env(self) -> None:
        """Learn once per connection whether the node's pct knows `--keep-env`."""
        self.run(["true"])

    def spawn(self, argv: list[str], *, piped: bool = False) -> subprocess.Popen[bytes]:
        if self.keep_env is None and not piped:
            self.detect_keep_env()
        # Piped, the caller reads pct's refusal of --keep-env (refuses_keep_env) and asks
        # again without it: one call on a current node, none spent on asking.
        return self.node.spawn(self.wrap(argv, None), piped=piped)

    def raise_for_pct(self, result: Result, argv: list[str]) -> None:
        """pct's own failures become distinct errors; the command's failures pass through.

        A node without pct comes first: its shell's "not found" would otherwise read as a
        command missing in the container."""
        if result.stdout.strip():
            return  # the command ran and answered: pct fails before any output
        text = result.error_text()
        node = f"the node {self.node_name}"
        if result.exit_code == 127 and NO_PCT.search(text):
            raise NodeHasNoPct(
                f"{node} has no `pct`: is it a Proxmox VE node?",
                hint="[target] host must reach the Proxmox VE node that runs the container, "
                "as a user whose PATH has pct (root)",
            )
        if NOT_RUNNING.search(text):
            raise ContainerNotRunning(
                f"{self.name} is not running",
                hint=self.start_hint(),
            )
        if NO_CONFIG.search(text):
            raise ContainerMissing(
                f"{self.name} does not exist: {node} has no container {self.vmid}",
                hint="check [target] vmid and host; for envlock to create the container, "
                "declare it in a [container] table",
            )
        if result.exit_code == 127 and re.search(r"No such file or directory|not found", text):
            missing = MISSING_NAME.search(text)
            name = next(g for g in missing.groups() if g) if missing else argv[0]
            raise CommandMissing(
                f"{self.name}: command not found in the container: {name}",
                hint="install it in the container (python3 is needed for envlock's agent)",
            )
        if PCT_OWN.search(text) or result.exit_code == PERL_DIE:
            words = "\n  ".join(text.splitlines()[-8:]) or "(no message)"
            raise PctFailed(
                f"`pct exec {self.vmid}` on {node} failed (exit {result.exit_code}):\n  {words}",
                hint="these are pct's own words: the command did not start in the container",
            )


# The nodes already named as older than 8.2 in this process (a fleet: once per node).
OLDER_PVE_SAID: set[str] = set()


def say_older_pve(node: str) -> None:
    """Once per node: its pct predates `--keep-env`, so envlock works through `env -i`."""
    if node in OLDER_PVE_SAID:
        return
    OLDER_PVE_SAID.add(node)
    from envlock import ui  # here: only an older node's first command pays for it

    ui.warn(
        f"the node {node} runs Proxmox VE older than 8.2 (its pct has no --keep-env), the "
        "oldest envlock supports: commands reach the container through `env -i` instead, "
        "at one more round trip per envlock command; upgrade the node"
    )


def refuses_keep_env(result: Result) -> bool:
    """A pct older than pve-container 5.0.9 (Proxmox VE 8.2) does not know `--keep-env`."""
    return not result.ok and KEEP_ENV_REFUSED.search(result.error_text()) is not None
