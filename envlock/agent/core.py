"""The target-side agent: stdlib only, shipped to the target in one command line.

It runs with the environment's own interpreter (probe) or the target's python3 (apply),
always isolated (`-I -S`, in `/`: envlock/pythons.py), so nothing of the environment it
inspects (a `.pth`, sitecustomize) nor of the caller runs inside it; it reads a JSON request
on stdin and prints JSON on stdout, so gathering state costs one round trip over any
transport. It never imports torch: versions come from dist-info metadata and
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
    fsync_dir(os.path.dirname(path))  # the rename itself, durable


def symlink_atomic(link, target):
    tmp = f"{link}.{os.getpid()}.tmp"
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, link)
    fsync_dir(os.path.dirname(link))


# -- uv's cache after a crash --------------------------------------------------------------
# uv writes its cache without fsync: after a power cut its entries can be short or empty,
# and uv then fails on them instead of fetching again. These are its words for that.
UV_CACHE_DAMAGE = (
    "failed to deserialize cache entry",
    "failed to fill whole buffer",
    "unexpected end of file",
    "invalid zip",
    "could not find eocd",
    "hash mismatch",
)
UV_NAMED = re.compile(r"`([A-Za-z0-9][A-Za-z0-9._-]*)(?:==|@|`)")


def uv_cache_damage(stderr):
    """The package names uv's error blames when its failure is a damaged cache entry, else
    None (a real failure: nothing to clean)."""
    lowered = stderr.lower()
    if not any(sign in lowered for sign in UV_CACHE_DAMAGE):
        return None
    return sorted(set(UV_NAMED.findall(stderr)))


# -- durability ---------------------------------------------------------------------------
# A power cut keeps names and renames but may drop any data not yet on disk: whatever a
# rename makes count (generation.json, `current`) must follow the data it points at.
def fsync_dir(path):
    fd = os.open(path or ".", os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_durable(tree):
    """Every file and directory under `tree` on disk. One syncfs() of its file system where
    the kernel can (ext4, xfs, btrfs: ~30 ms, where an fsync per file of a 16k-file venv
    costs seconds); on FUSE, where syncfs() never reaches the store below, an fsync of
    each file and directory, as the kernel would not do it for us."""
    if not on_fuse(tree) and syncfs(tree):
        return "syncfs"
    from concurrent.futures import ThreadPoolExecutor  # fsyncs overlap on the device

    paths = []
    for dirpath, _, names in os.walk(tree):
        paths.append(dirpath)
        paths += [os.path.join(dirpath, name) for name in names]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(fsync_path, paths, chunksize=64))
    return "fsync"


def fsync_path(path):
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:  # a symlink (its target is a file of its own) or gone
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def syncfs(path):
    """syncfs(2) of the file system holding `path`; False where it cannot be called."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open(path, os.O_RDONLY)
    except (OSError, AttributeError, ImportError):
        return False
    try:
        return getattr(libc, "syncfs", None) is not None and libc.syncfs(fd) == 0
    finally:
        os.close(fd)


def on_fuse(path):
    """Whether `path` lies on a FUSE mount (the longest mount point above it, by
    /proc/self/mountinfo)."""
    real = os.path.realpath(path)
    best, fstype = "", ""
    try:
        with open("/proc/self/mountinfo") as handle:
            for line in handle:
                left, _, right = line.partition(" - ")
                fields = left.split()
                if len(fields) < 5 or not right:
                    continue
                point = fields[4].replace("\\040", " ")
                inside = real == point or real.startswith(point.rstrip("/") + "/")
                if inside and len(point) >= len(best):
                    best, fstype = point, right.split()[0]
    except OSError:
        return False
    return fstype.startswith("fuse")


def read_json(path, default=None):
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return default


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


def root_fingerprint(root):
    """What a plan assumes about a root: its generations (their generation.json included,
    which a repair rewrites), `current`, the hold and the switch history's length. The
    probe returns it and apply compares it under the root's lock: one function for both."""
    try:
        history = os.stat(os.path.join(root, "history.jsonl")).st_size
    except OSError:
        history = None
    facts = {
        "generations": list_generations(root),
        "current": current_generation(root),
        "hold": read_json(os.path.join(root, HOLD)),
        "history": history,
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:20]


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
        os.fsync(fd)
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
        # One line: apply may read an answer from stdin after it (agent/apply.py handshake).
        req = json.loads(argv[1] if len(argv) > 1 else sys.stdin.readline() or "{}")
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
