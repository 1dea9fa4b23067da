"""The transport interface every target shares: run an argv, get a Result."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

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
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
        on_stderr_line: Callable[[str], None] | None = None,
    ) -> Result: ...

    def exec(self, argv: list[str], env: Mapping[str, str]) -> int:
        """Run interactively with stdio passed through; returns the exit code."""
        ...
