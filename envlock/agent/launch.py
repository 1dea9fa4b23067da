"""The agent's `run`: check the target and start the command in one call, in one process.

The controller sends, on stdin, a request framed by its length (so that nothing after it is
read: the rest of stdin is the command's): the probe's request, the sha256 of the state it
judged (`expect`: a state it has seen and found the command may run in), the command's
environment (what envlock sets, the profile's [env], the variables named with `--env` or
`[run] pass-env`: never on a command line), the argv, and the startup set when the target
lacks it. The agent probes; when the state's hash is the one expected, the controller's
judgment holds for exactly this state: the agent installs the startup set if sent, says
`{"run": {"target": …}}` on stdout (the process group signals go to), and execs the
command in this very process. Otherwise it answers the state, starts nothing, and the
controller judges and explains it as after any probe. With `await` (a profile with a
[container], whose API the controller asks meanwhile), it says `{"ready": true}` first and
starts only on the controller's `go`.

The command starts as ssh and `pct exec` would start it: in the login's home, with the
environment given; PATH is the generation's bin, then [env] PATH if the profile sets one,
else the target's own PATH (environment.command_path). Like the launcher in
envlock/runs/launch.py (kept for interactive runs), of which this is the one-call form.
"""

import base64
import contextlib
import hashlib
import json
import os
import shutil
import sys

if "__envlock_agent__" not in globals():  # in the repository; shipped, one namespace
    from envlock.agent.core import COMMANDS, OWN_STDIN, AgentError
    from envlock.agent.probe import probe

# The request's frame: its length in ASCII digits and a newline, then that many bytes.
MAX_REQUEST = 64 << 20
NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW  # never through a link
# Exit statuses a shell uses: the command is not executable / was not found.
NOT_EXECUTABLE, NOT_FOUND = 126, 127


def state_digest(state):
    """The hash both sides compute of a state: of its JSON as it travels (keys sorted)."""
    travelled = json.loads(json.dumps(state))
    return hashlib.sha256(json.dumps(travelled, sort_keys=True).encode()).hexdigest()


def read_request(fd=0):
    """The framed request, read to its last byte and not one byte further."""
    header = b""
    while not header.endswith(b"\n"):
        byte = os.read(fd, 1)
        if not byte or len(header) > 20:
            raise AgentError("run", "the request's frame is broken")
        header += byte
    size = int(header)
    if not 0 < size <= MAX_REQUEST:
        raise AgentError("run", f"a request of {size} bytes")
    chunks, left = [], size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise AgentError("run", "the request ended early")
        chunks.append(chunk)
        left -= len(chunk)
    return json.loads(b"".join(chunks).decode())


def run_command(_unused):
    req = read_request()
    state = probe(req["probe"])
    if state_digest(state) != req["expect"]:
        return state  # not the state judged: the controller judges this one
    if req.get("await") and not word_to_go():
        return {"stopped": True}  # the controller's last word (the container API's) was no
    if req.get("startup"):
        install_startup(req["startup"])
    start(req["spec"], req["argv"])


def word_to_go():
    """Say the state is as judged and wait for the controller's word (`go`), read byte by
    byte: what follows on stdin is the command's."""
    os.write(1, b'{"ready": true}\n')
    word = b""
    while not word.endswith(b"\n") and len(word) < 8:
        byte = os.read(0, 1)
        if not byte:
            break
        word += byte
    return word == b"go\n"


def command_env(spec):
    env = dict(os.environ)
    for name in spec["unset"]:
        env.pop(name, None)
    env.update(spec["set"])
    tail = spec.get("tail")
    if tail is None:
        tail = os.environ.get("PATH", os.defpath)
    env["PATH"] = spec["path"] + (os.pathsep + tail if tail else "")
    return env


def start(spec, argv):
    """Become the command (never returns): its own process group when stdin is no terminal
    (signals the controller forwards reach all of it), said on stdout first."""
    env = command_env(spec)
    target = str(os.getpid())
    if not os.isatty(0):
        try:
            os.setpgid(0, 0)
            target = "-" + target
        except OSError:
            pass
    sys.stdout.flush()
    os.write(1, (json.dumps({"run": {"target": target}}) + "\n").encode())
    with contextlib.suppress(OSError):
        os.chdir(os.environ.get("HOME") or "/")
    try:
        os.execvpe(argv[0], argv, env)
    except FileNotFoundError:
        sys.stderr.write(f"envlock: command not found: {argv[0]}\n")
        sys.stderr.flush()
        os._exit(NOT_FOUND)
    except PermissionError:
        sys.stderr.write("envlock: not executable: {0} (try `python {0}`)\n".format(argv[0]))
        sys.stderr.flush()
        os._exit(NOT_EXECUTABLE)


def install_startup(startup):
    """The startup set into `final`, verified against its version (the hash of its files)
    before it is renamed into place; as envlock/runs/startup_set.py's INSTALLER does."""
    final, version, files = startup["dir"], startup["version"], startup["files"]
    if os.path.exists(os.path.join(final, ".complete")):
        return
    os.makedirs(os.path.dirname(final), exist_ok=True)
    tmp = f"{final}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    manifest = ""
    for rel in sorted(files):
        path = os.path.join(tmp, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with os.fdopen(os.open(path, NEW_FILE, 0o644), "wb") as handle:
            handle.write(base64.b64decode(files[rel]))
        with open(path, "rb") as handle:  # hashed back from the disk
            manifest += f"{rel} {hashlib.sha256(handle.read()).hexdigest()}\n"
    if hashlib.sha256(manifest.encode()).hexdigest()[:16] != version:
        shutil.rmtree(tmp, ignore_errors=True)
        raise AgentError("run", "the startup files arrived corrupted")
    os.close(os.open(os.path.join(tmp, ".complete"), NEW_FILE, 0o644))
    try:
        os.rename(tmp, final)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)  # another run installed the same version
        if not os.path.exists(os.path.join(final, ".complete")):
            raise


COMMANDS["run"] = run_command
OWN_STDIN.add("run")
