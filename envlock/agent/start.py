"""Starting `envlock run`'s command on a target, and the startup set it may import: the rules
the agent's `run` (agent/launch.py) and the programs of interactive runs
(agent/programs/launcher.py, agent/programs/installer.py) share.

The command starts as ssh and `pct exec` would start it: in the login's home, with the
environment given; PATH is the generation's bin, then [env] PATH if the profile sets one,
else the target's own PATH (environment.command_path). A command that cannot start ends as a
shell's would (127 not found, 126 not executable).

Stdlib only, Python 3.8+, and nothing of the agent's core: the launcher and the installer
ship this module alone.
"""

import base64
import contextlib
import errno
import hashlib
import json
import os
import shutil
import sys

NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW  # never through a link
# Exit statuses a shell uses: the command is not executable / was not found.
NOT_EXECUTABLE, NOT_FOUND = 126, 127


def command_env(spec):
    """The command's environment: this process's, less `unset`, plus `set`, PATH composed
    (the env file's or the request's spec: {"set", "unset", "path", "tail"})."""
    env = dict(os.environ)
    for name in spec["unset"]:
        env.pop(name, None)
    env.update(spec["set"])
    tail = spec.get("tail")
    if tail is None:
        tail = os.environ.get("PATH", os.defpath)
    env["PATH"] = spec["path"] + (os.pathsep + tail if tail else "")
    return env


def own_group():
    """This process leads a process group of its own when stdin is no terminal (signals the
    controller forwards then reach all of the command); the target to signal: `-pgid` or pid."""
    target = str(os.getpid())
    if not os.isatty(0):
        try:
            os.setpgid(0, 0)
            target = "-" + target
        except OSError:
            pass
    return target


def become(argv, env, refused=None):
    """Exec the command in the login's home (never returns); a shell's 127 or 126 when it
    cannot start, said on stderr and, when `refused` names a file (<run dir>/<token>.refused),
    there too as JSON ({"message", "exit"}): the controller tells envlock's refusal from the
    command's own 127 by it, and says it as `run --json`'s error document."""
    with contextlib.suppress(OSError):
        os.chdir(os.environ.get("HOME") or "/")
    try:
        os.execvpe(argv[0], argv, env)
    except FileNotFoundError:
        said, code = f"envlock: command not found: {argv[0]}", NOT_FOUND
    except PermissionError:
        said, code = (
            "envlock: not executable: {0} (try `python {0}`)".format(argv[0]),
            NOT_EXECUTABLE,
        )
    except OSError as exc:
        said, code = cannot_start(argv[0], exc), NOT_EXECUTABLE
    sys.stderr.write(said + "\n")
    sys.stderr.flush()
    if refused is not None:
        say_refused(refused, said[len("envlock: ") :], code)
    os._exit(code)


def say_refused(path, message, code):
    """The refusal as JSON in `path`: a new 0600 file, never through a link (best effort:
    the exit status says enough without it)."""
    if not (os.path.isabs(path) and path.endswith(".refused")):
        return
    with contextlib.suppress(OSError):
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        fd = os.open(path, NEW_FILE, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump({"message": message, "exit": code}, handle)


def cannot_start(name, exc):
    """envlock's words for a command the kernel refused to start for another reason than a
    missing file or a permission (its exit status is a shell's 126, as for those)."""
    if exc.errno == errno.ENOEXEC:
        return (
            f"envlock: cannot execute: {name} is not a program the kernel can run (a script "
            f"needs a `#!` line first; or run it with its interpreter: `sh {name}`, "
            f"`python {name}`)"
        )
    return f"envlock: cannot execute: {name} ({exc.strerror or exc})"


def install_startup_set(final, version, files):
    """The startup set ({path: base64}) into `final`, verified against its version (the hash
    of its files, read back from disk) before it is renamed into place; False when the files
    arrived corrupted (nothing is left). A set already there is kept."""
    if os.path.exists(os.path.join(final, ".complete")):
        return True
    os.makedirs(os.path.dirname(final), exist_ok=True)
    tmp = f"{final}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    manifest = ""
    for rel in sorted(files):
        path = os.path.join(tmp, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with os.fdopen(os.open(path, NEW_FILE, 0o644), "wb") as handle:
            handle.write(base64.b64decode(files[rel]))
        # own: the file just created exclusively
        with open(path, "rb") as handle:  # hashed back from the disk
            manifest += f"{rel} {hashlib.sha256(handle.read()).hexdigest()}\n"
    if hashlib.sha256(manifest.encode()).hexdigest()[:16] != version:
        shutil.rmtree(tmp, ignore_errors=True)
        return False
    os.close(os.open(os.path.join(tmp, ".complete"), NEW_FILE, 0o644))
    try:
        os.rename(tmp, final)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)  # another run installed the same version
        if not os.path.exists(os.path.join(final, ".complete")):
            raise
    return True
