"""Starting the command of `envlock run`: the contract with schedulers.

Locally the command replaces envlock (`exec`): it *is* the process, so SIGTERM from SLURM,
Kubernetes or `docker stop` reaches it directly and its exit status is the status.

On a remote target the command runs under a small launcher on the target, started over the
target's transport (ssh, or ssh + `pct exec`):
- its environment travels in a 0600 file that the launcher reads and deletes, never on a
  command line (`ps` on this machine, the node or the container shows only the file's name);
  it holds what envlock sets, the profile's [env] and the variables named with `--env` or
  `[run] pass-env` — nothing else of this machine's environment;
- the launcher records its process group, then execs the command; SIGINT, SIGTERM and SIGHUP
  sent to envlock are forwarded to that group (over a second, multiplexed connection; one
  that comes while the launcher still starts waits for the group it names), and envlock
  returns the command's own exit status once it ends.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from collections.abc import Mapping
from types import FrameType
from typing import Any

from envlock.agent.start import NOT_EXECUTABLE, NOT_FOUND, cannot_start  # a shell's 126 and 127
from envlock.base.pythons import own_python
from envlock.errors import EXIT_USAGE, OperationError
from envlock.reconcile.agentcode import program
from envlock.targets.base import Transport

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

# Runs on the target in an isolated interpreter (envlock/base/pythons.py: 3.8+, stdlib only, in
# `/`), the generation's own when it may be trusted: agent/programs/launcher.py, with the rules
# it shares with the agent's `run` (agent/start.py). argv: the env file, the pid file, then
# the command.
LAUNCHER = program(("start.py", "programs/launcher.py"), "launch(sys.argv[1:])")


def exec_local(argv: list[str], env: Mapping[str, str]) -> None:
    """Replace envlock with the command (never returns); a shell's 126/127 when it can't."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(argv[0], argv, dict(env))
    except FileNotFoundError:
        refuse_start(
            f"command not found: {argv[0]} (is it installed in the environment? "
            "`envlock run` puts the generation's bin first on PATH)",
            NOT_FOUND,
        )
    except PermissionError:
        hint = f" — try `python {argv[0]}`" if argv[0].endswith(".py") else ""
        refuse_start(f"not executable: {argv[0]}{hint}", NOT_EXECUTABLE)
    except OSError as exc:  # ENOEXEC (a script with no `#!`), ENOTDIR, ELOOP, E2BIG...
        refuse_start(cannot_start(argv[0], exc).removeprefix("envlock: "), NOT_EXECUTABLE)


def refuse_start(message: str, code: int) -> None:
    """A shell's 126/127: said on stderr, and under --json as envlock's error document."""
    from envlock import ui

    sys.stderr.write(f"envlock: {message}\n")
    if ui.JSON.asked:
        ui.emit_error(message, None, code)
    sys.exit(code)


def remote_spec(
    env: Mapping[str, str],
    generation_bin: str,
    unset: tuple[str, ...],
    declared_path: str | None = None,
) -> bytes:
    """The env file's content: what the command gets on top of the target's own base. PATH is
    composed there, since the target's own PATH is only known there."""
    return json.dumps(spec_of(env, generation_bin, unset, declared_path)).encode()


def spec_of(
    env: Mapping[str, str],
    generation_bin: str,
    unset: tuple[str, ...],
    declared_path: str | None = None,
) -> dict[str, Any]:
    """remote_spec's content as data (the agent's `run` gets it inside its request)."""
    variables = {k: v for k, v in env.items() if k != "PATH"}
    return {"set": variables, "unset": list(unset), "path": generation_bin, "tail": declared_path}


def run_remote(transport: Transport, root: str, argv: list[str], spec: bytes) -> int:
    """Run argv on the target under the launcher; returns its exit status."""
    return launched(transport, root, argv, spec, capture=False)[0]


def run_remote_captured(
    transport: Transport, root: str, argv: list[str], spec: bytes
) -> tuple[int, str, str]:
    """run_remote with the command's stdout and stderr read back (bisect measures them)."""
    return launched(transport, root, argv, spec, capture=True)


def launched(
    transport: Transport, root: str, argv: list[str], spec: bytes, *, capture: bool
) -> tuple[int, str, str]:
    import secrets  # here: a local run never needs it (it loads random, hmac, bisect)

    token = secrets.token_hex(8)
    run_dir = f"{root}/run"
    env_file, pid_file = f"{run_dir}/{token}.env", f"{run_dir}/{token}.pid"
    refused = f"{run_dir}/{token}.refused"  # the launcher's, when the command cannot start
    write_private(transport, run_dir, env_file, spec)
    launcher = own_python(transport, LAUNCHER, env_file, pid_file, *argv, root=root)
    proc = transport.spawn(launcher, piped=capture)
    forward = Forwarder(transport, pid_file)
    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED}
    out = err = b""
    try:
        if capture:
            out, err = proc.communicate(b"")
        code = proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    # A stopped container keeps the .pid (nothing there can be removed): the next run's
    # launcher sweeps it, saying so.
    code = ended(transport, code)
    if code in (NOT_EXECUTABLE, NOT_FOUND):
        said_refusal(transport, refused, code)
    try:
        transport.run(["rm", "-f", env_file, pid_file])
    except OperationError:
        ended(transport, KILLED)  # stopped just after the command ended
        raise
    return code, out.decode(errors="replace"), err.decode(errors="replace")


def refusal_file(root: str) -> str:
    """Where the agent's `run` says a command it could not start (a new name each run)."""
    import secrets

    return f"{root}/run/{secrets.token_hex(8)}.refused"


# $1 the .refused file: printed, then removed.
READ_AND_REMOVE = 'cat -- "$1" 2>/dev/null; rm -f -- "$1"'


def said_refusal(transport: Transport, path: str, code: int) -> None:
    """After a remote 126/127: whether the launcher or the agent said it could not start
    the command (its .refused file; a 127 of the command's own leaves none). Under --json
    that is envlock's error document, as for a local run; the file is removed either way."""
    from envlock import ui

    try:
        said = transport.run(["sh", "-c", READ_AND_REMOVE, "sh", path]).text()
    except OperationError:
        return
    try:
        refusal = json.loads(said)
        message = str(refusal["message"])
    except (ValueError, KeyError, TypeError):
        return  # none: the command itself ended with 126 or 127
    if ui.JSON.asked:
        ui.emit_error(message, None, code)


# A status of 128 + a signal: the command was killed (a stop kills what a container runs),
# or 255, ssh's own. Only then is the node asked whether the container stopped.
KILLED = 128


def ended(transport: Transport, code: int) -> int:
    """The remote command's status, unless its container stopped under it: then that is
    the error (exit 3), never "not running" as if the command had not started."""
    if code < KILLED:
        return code
    stopped_while = getattr(transport, "stopped_while", None)  # a container's transport
    status = f" (its status: {code})" if code != KILLED else ""
    error = stopped_while(f"the command ran{status}") if callable(stopped_while) else None
    if error is not None:
        raise error
    return code


def write_private(transport: Transport, run_dir: str, path: str, data: bytes) -> None:
    """Write `data` to a 0600 file on the target; the bytes travel on stdin."""
    # A new file, never through a link (noclobber: `>` creates it exclusively).
    script = 'umask 077 && mkdir -p "$1" && set -C && cat > "$2"'
    result = transport.run(["sh", "-c", script, "sh", run_dir, path], stdin=data)
    if not result.ok:
        raise OperationError(
            f"{transport.name}: could not write the command's environment to {path}: "
            + (result.error_text() or f"exit {result.exit_code}")
        )


# $1 the signal, $2 the pid file: up to 5 s for the launcher to write it, then the group.
FORWARD_BY_PID_FILE = (
    'i=0; while [ ! -s "$2" ] && [ "$i" -lt 100 ]; do sleep 0.05; i=$((i + 1)); done; '
    'target=$(cat "$2" 2>/dev/null) && kill -s "$1" -- "$target"'
)


class Forwarder:
    """A signal handler that sends the signal on to the remote command's process group: the
    one the launcher wrote to `pid_file`, or the `target` the agent's `run` named."""

    def __init__(self, transport: Transport, pid_file: str = "", *, target: str = "") -> None:
        self.transport = transport
        self.pid_file = pid_file
        self.target = target

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name.removeprefix("SIG")
        if self.target:
            argv = ["sh", "-c", 'kill -s "$1" -- "$2"', "sh", name, self.target]
        else:
            # A signal may come before the launcher has written the file (it is still
            # starting): wait for it a moment rather than lose the signal.
            argv = ["sh", "-c", FORWARD_BY_PID_FILE, "sh", name, self.pid_file]
        # The command may have ended meanwhile; its status comes back all the same.
        with contextlib.suppress(OperationError):
            self.transport.run(argv)


def refused_exit() -> int:
    """The status of a run envlock refused (`ENVLOCK_RUN_REFUSED_EXIT`, default 1), so a
    scheduler can tell it from the command's own 1."""
    value = os.environ.get("ENVLOCK_RUN_REFUSED_EXIT", "1")
    try:
        code = int(value)
    except ValueError:
        return EXIT_USAGE
    return code if 0 < code < 256 else EXIT_USAGE
