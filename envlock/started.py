"""Work begun ahead of the code that asks for it (issue "Speed").

A local `check` or `run` knows its probe's command line and request once the profile and
lock are read; the CLI then still loads click and the command's modules. Started at that
moment (commands/ahead.py), the probe runs on the second core meanwhile, and the local
transport adopts the process when the same command line with the same request is run
(targets/local.py): exactly what it would have started, begun a few dozen milliseconds
sooner. Anything not asked for is left to end on its own: its request is already written
and its stdin closed. The Context read for it is kept too, so that it is read once.
"""

from __future__ import annotations

import subprocess
from typing import Any

# (argv, the request on stdin) -> the process started with them, not yet adopted.
_PROCESSES: dict[tuple[tuple[str, ...], bytes], subprocess.Popen[bytes]] = {}
# (what, key) -> a value read ahead (the Context of a profile path).
_KEPT: dict[tuple[str, Any], Any] = {}


def start(argv: list[str], stdin: bytes) -> subprocess.Popen[bytes]:
    """Start `argv` now with `stdin` written and closed; adopted later by `take`."""
    pipe = subprocess.PIPE
    proc = subprocess.Popen(argv, stdin=pipe, stdout=pipe, stderr=pipe)
    assert proc.stdin is not None
    try:
        proc.stdin.write(stdin)  # a request: far below a pipe's buffer, so this never waits
        proc.stdin.close()
    except BrokenPipeError:
        pass  # it ended already; its answer (or failure) is read as any other
    _PROCESSES[(tuple(argv), stdin)] = proc
    return proc


def take(argv: list[str], stdin: bytes) -> subprocess.Popen[bytes] | None:
    """The process started ahead with exactly this argv and stdin (once), else None."""
    return _PROCESSES.pop((tuple(argv), stdin), None)


def keep(what: str, key: Any, value: Any) -> None:
    _KEPT[(what, key)] = value


def kept(what: str, key: Any) -> Any:
    """A value read ahead under `key` (once), else None."""
    return _KEPT.pop((what, key), None)
