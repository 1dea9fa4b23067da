"""Work begun ahead of the code that asks for it (issue "Speed").

A local `check`, `run` or `rollback` knows its probe's command line and request once the
profile and lock are read; the CLI then still loads click and the command's modules. Started
at that moment (commands/ahead.py), the probe runs on the second core meanwhile, and the
local transport adopts the process when the same command line with the same request is run
(targets/local.py): exactly what it would have started, begun a few dozen milliseconds
sooner. A rollback's switch (the agent's apply) starts too, waiting for the plan on its
stdin: the transport writes the request it is given, as to any process it starts. A probe
not asked for is left to end on its own (its request written, its stdin closed); a process
still waiting at exit is stopped before it reads anything. The Context read for them is kept
too, so that it is read once.
"""

from __future__ import annotations

import atexit
import contextlib
import subprocess
from collections.abc import Callable
from typing import Any

from envlock.base.inherited import own_environment

# (argv, the request on stdin, or None: to be written when asked) -> the process started
# with them, not yet adopted.
_PROCESSES: dict[tuple[tuple[str, ...], bytes | None], subprocess.Popen[bytes]] = {}
# (what, key) -> a value read ahead (the Context of a profile path).
_KEPT: dict[tuple[str, Any], Any] = {}


def start(
    argv: list[str], stdin: bytes | None, preexec_fn: Callable[[], None] | None = None
) -> subprocess.Popen[bytes]:
    """Start `argv` now, with `stdin` written and closed (into the one started waiting with
    this argv, if any); or, with None, waiting for the request (its interpreter and code
    load meanwhile). Adopted later by `take` (or `take_waiting`). `preexec_fn`: the child's
    set-up, as the transport that adopts it would have done it (its ignored signals)."""
    waiting = _PROCESSES.pop((tuple(argv), None), None) if stdin is not None else None
    pipe = subprocess.PIPE
    proc = waiting or subprocess.Popen(
        argv, stdin=pipe, stdout=pipe, stderr=pipe, preexec_fn=preexec_fn, env=own_environment()
    )
    assert proc.stdin is not None
    if stdin is not None:
        try:
            proc.stdin.write(stdin)  # a request: far below a pipe's buffer, never waits
            proc.stdin.close()
        except BrokenPipeError:
            pass  # it ended already; its answer (or failure) is read as any other
    if not _PROCESSES:
        atexit.register(stop_waiting)
    _PROCESSES[(tuple(argv), stdin)] = proc
    return proc


def take(argv: list[str], stdin: bytes) -> subprocess.Popen[bytes] | None:
    """The process started ahead with exactly this argv and stdin, or with this argv and
    still waiting for its stdin (the caller writes it), once; else None."""
    key = tuple(argv)
    return _PROCESSES.pop((key, stdin), None) or _PROCESSES.pop((key, None), None)


def take_waiting(argv: list[str]) -> subprocess.Popen[bytes] | None:
    """The process started ahead with exactly this argv and still waiting for its stdin (the
    caller writes it, and then whatever follows), once; else None."""
    return _PROCESSES.pop((tuple(argv), None), None)


def stop_waiting() -> None:
    """At exit: a process still waiting for a request nobody made is stopped before it
    reads one (an end of stdin must not become an empty request)."""
    for (_argv, stdin), proc in list(_PROCESSES.items()):
        if stdin is None:
            with contextlib.suppress(OSError):
                proc.kill()
                proc.wait()


def keep(what: str, key: Any, value: Any) -> None:
    _KEPT[(what, key)] = value


def kept(what: str, key: Any) -> Any:
    """A value read ahead under `key` (once), else None."""
    return _KEPT.pop((what, key), None)
