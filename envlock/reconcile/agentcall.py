"""Calling the target-side agent over a transport: one command line, JSON in and out."""

from __future__ import annotations

import base64
import functools
import json
import zlib
from collections.abc import Callable
from importlib import resources
from typing import IO, Any

from envlock.errors import OperationError
from envlock.targets.base import Result, Transport

PROGRESS_PREFIX = "envlock-progress: "
OS_HINTS = {
    "ENOSPC": "the target's disk is full: free space (e.g. `envlock gc`) and apply again",
    "EROFS": "the root is on a read-only filesystem: set [target] root to a writable path",
    "EACCES": "permission denied: run as a user who may write the root, or change the root",
    "EPERM": "operation not permitted: run as a user who may write the root",
}

# Picks the environment's own interpreter when the root has a current generation, else the
# target's python3. The root arrives as "$1": data, never code.
CHOOSE_PYTHON = (
    'p="$1/current/bin/python"; fallback="$2"; shift 2; '
    '[ -x "$p" ] && [ -e "$(readlink -f "$p")" ] || p="$fallback"; exec "$p" "$@"'
)


# Order matters only for what runs at import: the core (COMMANDS) first.
AGENT_MODULES = ("core.py", "files.py", "gpu.py", "probe.py", "apply.py", "cache.py")


@functools.lru_cache(maxsize=1)
def agent_bootstrap() -> str:
    """A one-line program that unpacks the agent's modules into one namespace and runs it
    (compressed: the command line stays small, and base64 needs no quoting care)."""
    packed = [
        base64.b64encode(
            zlib.compress(resources.files("envlock.agent").joinpath(name).read_bytes(), 9)
        ).decode()
        for name in AGENT_MODULES
    ]
    return (
        "import base64,sys,zlib\n"
        "g={'__name__':'envlock_agent','__envlock_agent__':True}\n"
        f"for p in {packed!r}: exec(zlib.decompress(base64.b64decode(p)),g)\n"
        "sys.exit(g['main']())"
    )


def agent_argv(transport: Transport, root: str, command: str, *, env_python: bool) -> list[str]:
    program = ["-c", agent_bootstrap(), command]
    if env_python:
        return ["sh", "-c", CHOOSE_PYTHON, "sh", root, transport.system_python, *program]
    return [transport.system_python, *program]


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
) -> dict[str, Any]:
    """Run one agent command; returns its JSON answer or raises OperationError."""

    def stderr_line(line: str) -> None:
        if on_progress is not None and line.startswith(PROGRESS_PREFIX):
            on_progress(line[len(PROGRESS_PREFIX) :])

    result = transport.run(
        agent_argv(transport, root, command, env_python=env_python),
        stdin=json.dumps(request).encode(),
        on_stderr_line=stderr_line,
    )
    return parse_answer(transport, command, result)


def parse_answer(transport: Transport, command: str, result: Result) -> dict[str, Any]:
    lines = result.text().strip().splitlines()
    try:
        answer = json.loads(lines[-1]) if lines else None
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        stderr = "\n  ".join(
            line
            for line in result.error_text().splitlines()
            if not line.startswith(PROGRESS_PREFIX)
        )
        raise OperationError(
            f"{transport.name}: the envlock agent ({command}) failed with exit "
            f"{result.exit_code}" + (f":\n  {stderr}" if stderr else "")
        )
    if "error" in answer:
        error = answer["error"]
        raise OperationError(
            f"{transport.name}: {error['message']}", hint=OS_HINTS.get(error.get("errno", ""))
        )
    return answer
