"""The launcher of interactive remote runs (envlock/runs/launch.py starts it over the
target's transport): the command gets its environment from a 0600 file that is read and
deleted, never from a command line; the launcher records its process group in a .pid file,
then execs the command (agent/start.py), so envlock forwards signals to that group.

argv: the env file, the pid file, then the command. A command that cannot start is said in
<token>.refused beside them too (agent/start.py). The env file is JSON: {"set": {...},
"unset": [...], "path": "<gen>/bin", "tail": [env] PATH or null}. It runs as root and renames
over the pid file: only ever <run dir>/<token>.pid beside its <token>.env, so arguments out
of place can never name another file (such as /bin/sh).

Shipped as agent/start.py, then this module, then `launch(sys.argv[1:])`.
"""

import fcntl
import json
import os
import stat
import sys
import time

if "__envlock_agent__" not in globals():  # in the repository; shipped, one program
    from envlock.agent.start import NOT_EXECUTABLE, become, command_env, own_group

# A .env this old was never read: its launcher never started (envlock was stopped between
# writing it and starting the launcher, which deletes it at once); it holds a run's variables.
UNSTARTED_SECONDS = 3600


def launch(args):
    """Start the command of `args` (env file, pid file, argv); never returns."""
    env_file, pid_file, argv = args[0], args[1], args[2:]
    if not (
        os.path.isabs(env_file) and env_file.endswith(".env") and pid_file == env_file[:-4] + ".pid"
    ):
        sys.stderr.write("envlock: the launcher takes <run dir>/<token>.env and .pid, then argv\n")
        sys.exit(NOT_EXECUTABLE)
    # own: the 0600 file envlock wrote for this launch
    with open(env_file) as handle:
        spec = json.load(handle)
    os.unlink(env_file)
    env = command_env(spec)
    target = own_group()
    sweep(os.path.dirname(pid_file))
    fd = write_pid(pid_file, target)
    os.set_inheritable(fd, True)
    become(argv, env, pid_file[:-4] + ".refused")


def write_pid(pid_file, target):
    """Written under another name, locked, then renamed: a .pid is always locked while its
    command lives (the descriptor goes with it through exec), so a sweep never takes a live
    one. Returns the locked descriptor."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    fd = os.open(pid_file + ".new", flags, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.write(fd, target.encode())
    os.rename(pid_file + ".new", pid_file)
    return fd


def sweep(run_dir):
    """Remove what runs left in `run_dir`: a .pid nobody holds locked (its command is gone,
    and with it the lock: a container stopped under the run, so nothing removed the file; a
    live one's command holds it), and a .env never read (UNSTARTED_SECONDS)."""
    swept = unstarted = 0
    for name in os.listdir(run_dir):
        path = os.path.join(run_dir, name)
        if name.endswith(".env"):
            unstarted += remove_unstarted(path)
        elif name.endswith(".pid"):
            swept += remove_unlocked(path)
        elif name.endswith(".refused"):  # a refusal no controller read back (it was stopped)
            remove_unstarted(path)
    if swept:
        sys.stderr.write(
            f"envlock: removed {swept} stale .pid file(s) in {run_dir}, left by a run whose "
            "container stopped under it\n"
        )
    if unstarted:
        sys.stderr.write(
            f"envlock: removed {unstarted} environment file(s) in {run_dir}, left by a run "
            "stopped before its command started\n"
        )


def remove_unstarted(path):
    """1 when `path`, a regular .env file older than UNSTARTED_SECONDS, was removed."""
    try:
        st = os.lstat(path)
        if st.st_mtime < time.time() - UNSTARTED_SECONDS and stat.S_ISREG(st.st_mode):
            os.unlink(path)
            return 1
    except OSError:
        pass
    return 0


def remove_unlocked(path):
    """1 when `path`, a .pid file no live command holds locked, was removed."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return 0
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.unlink(path)
        return 1
    except OSError:
        return 0
    finally:
        os.close(fd)
