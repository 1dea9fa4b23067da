"""The target-side agent: stdlib only, shipped to the target in one command line.

It runs with the environment's own interpreter (probe) or the target's python3 (apply),
reads a JSON request on stdin and prints JSON on stdout, so gathering state costs one round
trip over any transport. It never imports torch: versions come from dist-info metadata and
`torch/version.py` is read as text.

The agent is several modules (this core, files, probe, apply, cache) that
reconcile/agentcall.py ships together and runs in one namespace; in the repository
they import each other instead. Each command registers itself in COMMANDS.

Compatible with Python 3.8+ (the target's interpreter is not ours to choose).
"""

import base64
import errno
import hashlib
import json
import os
import re
import stat
import sys
import time

META_DIR = ".envlock"
MANIFEST = META_DIR + "/manifest.json"
GENERATION = META_DIR + "/generation.json"
LOCK_COPY = META_DIR + "/pylock.toml"
# A rollback holds the root on the generation it chose until the next apply.
HOLD = "hold.json"
GEN_RE = re.compile(r"^(\d+)-([0-9a-f]{12})$")


# -- small helpers ------------------------------------------------------------------------
def sha256_file(path, bufsize=1 << 20):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while True:
            block = handle.read(bufsize)
            if not block:
                break
            digest.update(block)
    return digest.hexdigest()


def record_hash(path):
    """sha256 in RECORD's urlsafe-base64 form."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()


def write_atomic(path, data):
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def symlink_atomic(link, target):
    tmp = f"{link}.{os.getpid()}.tmp"
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, link)


def read_json(path, default=None):
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return default


# Bytes from elsewhere (a METADATA file a polluting install wrote) are opened only by this
# function: the rule of envlock/untrusted.py's `open_untrusted`, for the agent, which cannot
# import envlock. Keep the two in step; tests/test_trust_gate.py checks that they agree.
UNTRUSTED_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a directory",
}


def open_untrusted(path, limit=None, within=None):
    """`path` open for reading (binary) once its descriptor shows a regular file of at most
    `limit` bytes, inside `within` when given; AgentError("refused", ...) otherwise.

    Judged by name first (opening some devices acts), then on the descriptor, which is what
    counts: the name may be swapped in between. OSError (missing, unreadable) is the caller's."""
    not_regular(path, os.stat(path).st_mode)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        not_regular(path, info.st_mode)
        if within is not None:
            # Linux names what the descriptor opened in /proc; elsewhere the name, resolved.
            proc = f"/proc/self/fd/{fd}"
            opened = os.path.realpath(proc if os.path.isdir("/proc/self/fd") else path)
            top = os.path.realpath(within)
            if opened != top and not opened.startswith(top.rstrip(os.sep) + os.sep):
                raise AgentError(
                    "refused", f"refusing: {path} is a link out of {within} (to {opened})"
                )
        if limit is not None and info.st_size > limit:
            raise AgentError(
                "refused",
                f"refusing: {path}: a file of {info.st_size} bytes exceeds {limit} bytes",
            )
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def not_regular(path, mode):
    if not stat.S_ISREG(mode):
        what = UNTRUSTED_KINDS.get(stat.S_IFMT(mode), "not a regular file")
        raise AgentError("refused", f"refusing: {path} is {what}, not a regular file")


def progress(message):
    sys.stderr.write(f"envlock-progress: {message}\n")
    sys.stderr.flush()


# -- generations --------------------------------------------------------------------------
def list_generations(root):
    gens = []  # type: list
    base = os.path.join(root, "generations")
    try:
        names = os.listdir(base)
    except OSError:
        return gens
    for name in names:
        match = GEN_RE.match(name)
        if not match:
            continue
        path = os.path.join(base, name)
        meta = read_json(os.path.join(path, GENERATION))
        gens.append(
            {
                "number": int(match.group(1)),
                "name": name,
                "lock_hash": match.group(2),
                "complete": meta is not None,
                "meta": meta or {},
            }
        )
    gens.sort(key=lambda g: g["number"])
    return gens


def current_generation(root):
    try:
        target = os.readlink(os.path.join(root, "current"))
    except OSError:
        return None
    return os.path.basename(target.rstrip("/"))


def read_history(root, limit=200):
    try:
        with open(os.path.join(root, "history.jsonl")) as handle:
            lines = handle.readlines()[-limit:]
    except OSError:
        return []
    entries = []
    for line in lines:
        try:
            entries.append(json.loads(line))
        except ValueError:
            continue
    return entries


def append_history(root, entry):
    entry = dict(entry, time=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    fd = os.open(os.path.join(root, "history.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(entry, sort_keys=True) + "\n").encode())
    finally:
        os.close(fd)


class AgentError(Exception):
    def __init__(self, kind, message):
        Exception.__init__(self, message)
        self.kind = kind


COMMANDS = {}  # type: dict  # name -> function(request); filled in by the other modules
STREAMING = []  # type: list  # non-empty once a command started writing binary output


def main(argv=None):
    """`agent COMMAND [REQUEST-JSON]`: the request comes as an argument when stdin carries
    data (an archive to restore), else on stdin. JSON answer (or error) on stdout."""
    argv = sys.argv[1:] if argv is None else argv
    command = argv[0] if argv else "probe"
    try:
        req = json.loads(argv[1] if len(argv) > 1 else sys.stdin.read() or "{}")
        result = COMMANDS[command](req)
    except AgentError as exc:
        return fail({"kind": exc.kind, "message": str(exc)})
    except OSError as exc:
        return fail(
            {
                "kind": "os",
                "errno": errno.errorcode.get(exc.errno or 0, ""),
                "message": "{}: {}".format(exc.filename or "", exc.strerror or exc),
            }
        )
    if result is not None:  # streaming commands wrote their output themselves
        sys.stdout.write(json.dumps(result) + "\n")
    return 0


def fail(error):
    # Errors go to stdout as JSON, except after a stream began: then stderr.
    stream = sys.stderr if STREAMING else sys.stdout
    stream.write(json.dumps({"error": error}) + "\n")
    return 4
