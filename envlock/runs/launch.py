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

from envlock.base.pythons import own_python
from envlock.errors import EXIT_USAGE, OperationError
from envlock.targets.base import Transport

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# Exit statuses a shell uses: the command is not executable / was not found.
NOT_EXECUTABLE, NOT_FOUND = 126, 127

# Runs on the target in an isolated interpreter (envlock/base/pythons.py: 3.8+, stdlib only, in
# `/`), the generation's own when it may be trusted. argv: the env file, the pid file, then
# the command. The env file is JSON: {"set": {...}, "unset": [...], "path": "<gen>/bin",
# "tail": [env] PATH or null}. PATH is the generation's bin, then [env] PATH if the profile
# sets one, else the target's own PATH (environment.command_path). The command itself
# starts as ssh and pct exec would start it: in the login's home, with the environment
# given (its interpreter's site, .pth files and PYTHONPATH all apply).
LAUNCHER = r"""
import fcntl, json, os, stat, sys, time
env_file, pid_file, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
# It runs as root and renames over pid_file: only ever <run dir>/<token>.pid beside its
# <token>.env, so arguments out of place can never name another file (such as /bin/sh).
if not (os.path.isabs(env_file) and env_file.endswith(".env")
        and pid_file == env_file[:-4] + ".pid"):
    sys.stderr.write("envlock: the launcher takes <run dir>/<token>.env and .pid, then argv\n")
    sys.exit(126)
with open(env_file) as handle:
    spec = json.load(handle)
os.unlink(env_file)
env = dict(os.environ)
for name in spec["unset"]:
    env.pop(name, None)
env.update(spec["set"])
tail = spec.get("tail")
if tail is None:
    tail = os.environ.get("PATH", os.defpath)
env["PATH"] = spec["path"] + (os.pathsep + tail if tail else "")
target = str(os.getpid())
if not sys.stdin.isatty():
    try:
        os.setpgid(0, 0)
        target = "-" + target
    except OSError:
        pass
def sweep(run_dir):
    # A .pid nobody holds locked: its command is gone, and with it the lock (a container
    # stopped under the run, so nothing removed the file). A live one's command holds it.
    # A .env an hour old: its launcher never started (envlock was stopped between writing
    # it and starting the launcher, which deletes it at once); it holds a run's variables.
    swept = unstarted = 0
    for name in os.listdir(run_dir):
        if name.endswith(".env"):
            path = os.path.join(run_dir, name)
            try:
                st = os.lstat(path)
                if st.st_mtime < time.time() - 3600 and stat.S_ISREG(st.st_mode):
                    os.unlink(path)
                    unstarted += 1
            except OSError:
                pass
            continue
        if not name.endswith(".pid"):
            continue
        try:
            fd = os.open(os.path.join(run_dir, name), os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.unlink(os.path.join(run_dir, name))
            swept += 1
        except OSError:
            pass
        finally:
            os.close(fd)
    if swept:
        sys.stderr.write(
            "envlock: removed %d stale .pid file(s) in %s, left by a run whose container "
            "stopped under it\n" % (swept, run_dir)
        )
    if unstarted:
        sys.stderr.write(
            "envlock: removed %d environment file(s) in %s, left by a run stopped before "
            "its command started\n" % (unstarted, run_dir)
        )


sweep(os.path.dirname(pid_file))
# Written under another name, locked, then renamed: a .pid is always locked while its
# command lives (the descriptor goes with it through exec), so a sweep never takes a live one.
fd = os.open(pid_file + ".new", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
os.write(fd, target.encode())
os.rename(pid_file + ".new", pid_file)
os.set_inheritable(fd, True)
try:
    os.chdir(os.environ.get("HOME") or "/")
except OSError:
    pass
try:
    os.execvpe(argv[0], argv, env)
except FileNotFoundError:
    sys.stderr.write("envlock: command not found: %s\n" % argv[0])
    sys.exit(127)
except PermissionError:
    sys.stderr.write(
        "envlock: not executable: %s (try `python %s`)\n" % (argv[0], argv[0])
    )
    sys.exit(126)
"""


def exec_local(argv: list[str], env: Mapping[str, str]) -> None:
    """Replace envlock with the command (never returns); a shell's 126/127 when it can't."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(argv[0], argv, dict(env))
    except FileNotFoundError:
        sys.stderr.write(
            f"envlock: command not found: {argv[0]} (is it installed in the environment? "
            "`envlock run` puts the generation's bin first on PATH)\n"
        )
        sys.exit(NOT_FOUND)
    except PermissionError:
        hint = f" — try `python {argv[0]}`" if argv[0].endswith(".py") else ""
        sys.stderr.write(f"envlock: not executable: {argv[0]}{hint}\n")
        sys.exit(NOT_EXECUTABLE)


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
    try:
        transport.run(["rm", "-f", env_file, pid_file])
    except OperationError:
        ended(transport, KILLED)  # stopped just after the command ended
        raise
    return code, out.decode(errors="replace"), err.decode(errors="replace")


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
