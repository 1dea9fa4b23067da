"""Calling the target-side agent over a transport: one command line, JSON in and out."""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import os
import threading
import zlib
from collections.abc import Callable
from typing import IO, Any

from envlock import agent as agent_package
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
# target's python3. The root arrives as "$1": data, never code. The root's interpreter runs
# only from a root that is this user's or root's and writable by no one else (`mine`, the
# agent's ownership rule in sh: `ls -ldn` owner and mode bits), judged after `cd -P` into it
# and run relative to it, so nobody can swap the checked directory for theirs through a
# parent in between (`-x` follows links: a dangling interpreter is not chosen). Otherwise the
# target's python3 runs (from /) and the probe reports who owns the root (`root-owner`).
CHOOSE_PYTHON = (
    'mine() { f=$1; set -- $(ls -ldn -- "$f" 2>/dev/null) ""; case $1 in '
    '?????w*|????????w*|"") return 1;; esac; [ "$3" = 0 ] || [ -O "$f" ]; }; '
    'p=./current/bin/python; fallback="$2"; '
    'cd -P -- "$1" 2>/dev/null && mine . && [ -x "$p" ] '
    '|| { cd / && p="$fallback"; }; shift 2; exec "$p" "$@"'
)


# What each agent command runs: the probe's modules (in import order: the core, with
# COMMANDS, first), plus the command's own. A probe skips apply's and cache's imports.
AGENT_BASE = ("core.py", "statindex.py", "files.py", "gpu.py", "probe.py")
AGENT_EXTRA = {"apply": ("apply.py",), "cache": ("cache.py",)}

# Unpacks and compiles the agent's modules into one namespace and runs it. The compiled code
# is kept per envlock build and interpreter (~/.cache/envlock on the target, written
# atomically; anything unreadable there is compiled afresh), so a probe does not compile
# 1,700 lines each time. The code is ours: it came in this command line, and the key is its
# hash. The directory is used only while it is this user's and no one else may write it
# (`mine`): a file planted there would run as this user. The cache file is written by the
# agent's own write_atomic (exclusive temp file, never through a link), once it is loaded.
BOOTSTRAP = """\
import binascii,marshal,os,sys,zlib
g={'__name__':'envlock_agent','__envlock_agent__':True}
k=%(key)r
d=os.path.join(os.environ.get('XDG_CACHE_HOME') or os.path.expanduser('~/.cache'),'envlock')
t=sys.implementation.cache_tag and os.path.isabs(d)
f=os.path.join(d,'agent-%%s-%%s'%%(k,sys.implementation.cache_tag))
def mine():
    s=os.lstat(d)
    return s.st_uid==os.getuid() and not s.st_mode&0o022 and os.path.isdir(d)
c=None
if t:
    try:
        if mine():
            with open(f,'rb') as h: c=marshal.loads(h.read())
    except Exception: c=None
w=t and not isinstance(c,list)
if not isinstance(c,list):
    s=%(packed)r
    c=[compile(zlib.decompress(binascii.a2b_base64(p)),'envlock-agent/'+n,'exec') for n,p in s]
for x in c: exec(x,g)
if w:
    try:
        os.makedirs(d,0o700,exist_ok=True)
        if mine(): g['write_atomic'](f,marshal.dumps(c),0o600)
    except Exception: pass
sys.exit(g['main']())
"""


def agent_modules(command: str) -> tuple[str, ...]:
    return AGENT_BASE + AGENT_EXTRA.get(command.split("-", 1)[0], ())


@functools.cache
def agent_bootstrap(command: str = "probe") -> str:
    """The one-line program that runs agent `command` (compressed: the command line stays
    small, and base64 needs no quoting care)."""
    packed = [
        (name, base64.b64encode(zlib.compress(agent_source(name), 9)).decode())
        for name in agent_modules(command)
    ]
    key = hashlib.sha256(repr(packed).encode()).hexdigest()[:20]
    return BOOTSTRAP % {"key": key, "packed": packed}


def agent_source(name: str) -> bytes:
    # Beside envlock/agent/__init__.py (importlib.resources would cost more than the read).
    with open(os.path.join(os.path.dirname(agent_package.__file__), name), "rb") as handle:
        return handle.read()


def agent_argv(transport: Transport, root: str, command: str, *, env_python: bool) -> list[str]:
    program = ["-c", agent_bootstrap(command), command]
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
    meanwhile: Callable[[], object] | None = None,
) -> dict[str, Any]:
    """Run one agent command; returns its JSON answer or raises OperationError.

    `meanwhile` runs here while the target works (the controller loading what renders the
    answer: on two cores the two overlap)."""

    def stderr_line(line: str) -> None:
        if on_progress is not None and line.startswith(PROGRESS_PREFIX):
            on_progress(line[len(PROGRESS_PREFIX) :])

    def run() -> Result:
        return transport.run(
            agent_argv(transport, root, command, env_python=env_python),
            stdin=json.dumps(request).encode(),
            on_stderr_line=stderr_line,
        )

    result = run() if meanwhile is None else run_while(run, meanwhile)
    return parse_answer(transport, command, result)


def run_while(work: Callable[[], Result], meanwhile: Callable[[], object]) -> Result:
    """`work()` in a thread (it waits on a process, the GIL released) while `meanwhile()`
    runs here; the work's exception, if any, is raised here."""
    outcome: list[Result | BaseException] = []

    def target() -> None:
        try:
            outcome.append(work())
        except BaseException as exc:  # handed to the caller's thread
            outcome.append(exc)

    thread = threading.Thread(target=target, name="envlock-agent", daemon=True)
    thread.start()
    meanwhile()
    thread.join()
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    return outcome[0]


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
