"""The pct target: commands reach an LXC container through ssh to its Proxmox node.

Composition, as in pyinfra's docker-over-ssh connector: the pct transport holds an ssh
transport and wraps each argv in `pct exec VMID --keep-env 0 -- env -i … argv`. The node's
shell parses the one string ssh sends (quoted once, by the ssh hop); pct and lxc-attach pass
the argv on as a list. The node's environment never leaks in: envlock sets what it needs.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Mapping
from typing import IO

from envlock.errors import OperationError
from envlock.targets.base import Result
from envlock.targets.ssh import SshTransport

CONTAINER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
BASE_ENV = {"PATH": CONTAINER_PATH, "HOME": "/root", "LANG": "C.UTF-8", "USER": "root"}


class ContainerNotRunning(OperationError):
    pass


class ContainerMissing(OperationError):
    pass


class CommandMissing(OperationError):
    pass


class PctTransport:
    system_python = "python3"

    def __init__(self, node: SshTransport, vmid: int) -> None:
        self.node = node
        self.vmid = vmid
        self.name = f"container {vmid} on {node.host}"

    def wrap(self, argv: list[str], env: Mapping[str, str] | None) -> list[str]:
        variables = {**BASE_ENV, **(env or {})}
        return [
            "pct",
            "exec",
            str(self.vmid),
            "--keep-env",
            "0",
            "--",
            "env",
            "-i",
            *(f"{k}={v}" for k, v in variables.items()),
            *argv,
        ]

    def run(
        self,
        argv: list[str],
        *,
        stdin: bytes | IO[bytes] | None = None,
        env: Mapping[str, str] | None = None,
        on_stderr_line: Callable[[str], None] | None = None,
    ) -> Result:
        result = self.node.run(self.wrap(argv, env), stdin=stdin, on_stderr_line=on_stderr_line)
        if not result.ok:
            self.raise_for_pct(result, argv)
        return Result(tuple(argv), result.exit_code, result.stdout, result.stderr)

    def spawn(self, argv: list[str]) -> subprocess.Popen[bytes]:
        return self.node.spawn(self.wrap(argv, None))

    def raise_for_pct(self, result: Result, argv: list[str]) -> None:
        """pct's own failures become distinct errors; the command's failures pass through."""
        text = result.error_text()
        if re.search(r"container '?\d+'? not running", text):
            raise ContainerNotRunning(
                f"{self.name} is not running",
                hint=f"`envlock apply` starts it through the API, or run `pct start {self.vmid}`",
            )
        if re.search(r"Configuration file .* does not exist|no such container", text, re.I):
            raise ContainerMissing(
                f"{self.name} does not exist",
                hint="check [target] vmid and node; `envlock apply` creates it from [container]",
            )
        if result.exit_code == 127 and re.search(r"No such file or directory|not found", text):
            raise CommandMissing(
                f"{self.name}: command not found in the container: {argv[0]}",
                hint="install it in the container (python3 is needed for envlock's agent)",
            )
        if re.search(r"^pct: command not found|pct: not found", text, re.M):
            raise OperationError(f"{self.node.name} has no `pct`: is it a Proxmox node?")
