"""The target-side agent: stdlib only, shipped to the target in one command line.

It runs with the environment's own interpreter (probe) or the target's python3 (apply),
always isolated (`-I -S`, in `/`: envlock/base/pythons.py), so nothing of the environment it
inspects (a `.pth`, sitecustomize) nor of the caller runs inside it; it reads a JSON request
on stdin and prints JSON on stdout, so gathering state costs one round trip over any
transport. It never imports torch: versions come from dist-info metadata and
`torch/version.py` is read as text.

The agent is several modules (this core, files, probe, apply, cache) that
reconcile/agentcall.py ships together and runs in one namespace; in the repository
they import each other instead. Each command registers itself in COMMANDS.

The rules both sides need are written here once: the atomic write, the gate for bytes from
elsewhere, the ownership rule (agent/cuda.py holds the CUDA families). The controller imports
them (envlock/base/atomic.py, untrusted.py, ownership.py) and only gives AgentError envlock's
error classes; the start-up set loads this file beside it.

Compatible with Python 3.8+ (the target's interpreter is not ours to choose).
"""

import base64
import contextlib
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
    with open_untrusted(path) as handle:  # a FIFO or a device in a venv: refused, not hung
        while True:
            block = handle.read(bufsize)
            if not block:
                break
            digest.update(block)
    return digest.hexdigest()


def record_hash(path):
    """sha256 in RECORD's urlsafe-base64 form."""
    digest = hashlib.sha256()
    with open_untrusted(path) as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()


# -- writing files: by descriptor, never through a link ------------------------------------
# The one write_atomic of envlock: the controller's envlock/base/atomic.py gives it envlock's
# errors, the start-up set (envlock_megacache, the in-process `envlock.snapshot()`) loads this
# file beside it. The temp file is created exclusively beside its destination, never through
# a link (O_EXCL|O_NOFOLLOW), its mode set on the open descriptor, and only the rename uses a
# name: a user who may write the directory (a shared checkpoint folder) can swap names around
# us but cannot make us write through, or change the mode of, anything we did not create.
TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def write_atomic(path, data, mode=0o644):
    """Replace `path` with `data`: a temp file created exclusively beside it, its mode set
    on the descriptor, fsync, rename, fsync of the directory. A destination that is not a
    regular file (a link, a FIFO, a device) is refused. `data` is bytes, or a function that
    writes a stream to the open file (an archive member, the stat index)."""
    path = os.fspath(path)
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    refuse_non_regular(path)
    remove_stale_temps(path)
    tmp = write_temp(path, data, mode)
    try:
        # Again, just before the rename: the directory may be shared, the checks are cheap.
        refuse_non_regular(path)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(directory)


# A temp file this old was left by a writer a crash or a kill -9 stopped (a live one is
# seconds old): the next writer of the same file removes it.
STALE_TEMP_S = 3600


def remove_stale_temps(path):
    """The temp files of `path` (`.NAME.<12 hex>.tmp`) written over an hour ago."""
    name = os.path.basename(path)
    mine = re.compile(re.escape(f".{name}.") + r"[0-9a-f]{12}\.tmp")
    cutoff = time.time() - STALE_TEMP_S
    with contextlib.suppress(OSError):
        for entry in os.scandir(os.path.dirname(path) or "."):
            if not mine.fullmatch(entry.name):
                continue
            with contextlib.suppress(OSError):
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISREG(st.st_mode) and st.st_mtime < cutoff:
                    os.unlink(entry.path)


def write_new(path, data, mode=0o644):
    """Like write_atomic, but never replaces a file: FileExistsError when `path` exists.
    The link that publishes the file is the check, so nothing can appear in between."""
    path = os.fspath(path)
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    tmp = write_temp(path, data, mode)
    try:
        os.link(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    fsync_dir(directory)


def write_temp(path, data, mode):
    """A temp file beside `path` holding `data` on disk, still the one written (its name)."""
    fd, tmp = create_temp(path, mode)
    try:
        with os.fdopen(fd, "wb") as handle:
            if callable(data):
                data(handle)
            else:
                handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
            ours = os.fstat(handle.fileno())
        refuse_replaced(tmp, ours)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return tmp


def create_temp(path, mode):
    """A new file beside `path` (a random name: one planted in advance is skipped)."""
    for _ in range(100):
        tmp = "{}/.{}.{}.tmp".format(
            os.path.dirname(path) or ".", os.path.basename(path), os.urandom(6).hex()
        )
        try:
            fd = os.open(tmp, TEMP_FLAGS, 0o600)
        except FileExistsError:  # a name someone planted (or chance): take another
            continue
        try:
            os.fchmod(fd, mode)
        except BaseException:
            os.close(fd)
            os.unlink(tmp)
            raise
        return fd, tmp
    raise FileExistsError(f"{path}: no free temp name beside it")


def refuse_replaced(tmp, ours):
    """The temp file is still the one we wrote (a user who may write the directory can
    rename their link over it: renaming that into place would publish their link)."""
    try:
        st = os.lstat(tmp)
    except FileNotFoundError:
        st = None
    if st is None or (st.st_ino, st.st_dev) != (ours.st_ino, ours.st_dev):
        raise AgentError(
            "replaced",
            f"{tmp} was replaced while envlock wrote it: someone else may write "
            f"{os.path.dirname(tmp)}; write where only you can",
        )


def refuse_non_regular(path):
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode):
        raise AgentError(
            "not-regular",
            f"{path} exists and is not a regular file ({kind_of(st.st_mode)}): envlock "
            "replaces only regular files; remove it or write elsewhere",
        )


# What a path that is not a regular file is, in the words of a refusal.
FILE_KINDS = {
    stat.S_IFLNK: "a symlink",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a directory",
}


def kind_of(mode):
    return FILE_KINDS.get(stat.S_IFMT(mode), "not a regular file")


# Caches named by hashes (the compiled agents here, the controller's usercache.py) keep what
# no one asks for again: their entries written longer ago than this go when a new one is.
STALE_DAYS = 30
# A compiled agent's name in the target's cache (agent/programs/bootstrap.py).
COMPILED = re.compile(r"agent-[0-9a-f]{20}-[A-Za-z0-9_.-]+")


def remove_stale(dir_fd, wanted, keep=None):
    """Remove the regular files of the directory `dir_fd` (a descriptor: the cache walked to
    by programs/bootstrap.py's private_dir) whose name `wanted` accepts, other than `keep`,
    written more than STALE_DAYS ago (one still in use is made again once)."""
    cutoff = time.time() - STALE_DAYS * 86400
    for entry in os.scandir(dir_fd):
        if entry.name == keep or not wanted(entry.name):
            continue
        with contextlib.suppress(OSError):
            old = entry.stat(follow_symlinks=False).st_mtime < cutoff
            if old and entry.is_file(follow_symlinks=False):
                os.unlink(entry.name, dir_fd=dir_fd)


def prune_compiled(dir_fd, kept):
    """Called by the bootstrap when it wrote `kept` (a new envlock or interpreter): the
    compiled agents an older one left go (their keys are hashes: never read again)."""
    remove_stale(dir_fd, COMPILED.fullmatch, keep=kept)


def write_at(dir_fd, name, data, mode=0o600):
    """write_atomic inside the directory a descriptor opened (a private cache, walked to by
    descriptor: no name above it is looked up again): an exclusive temp file, never through
    a link, its mode set on the descriptor, fsync, rename, fsync of the directory."""
    for _ in range(100):
        tmp = f".{name}.{os.urandom(6).hex()}.tmp"
        try:
            fd = os.open(tmp, TEMP_FLAGS, 0o600, dir_fd=dir_fd)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(f"{name}: no free temp name beside it")
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), mode)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    with contextlib.suppress(OSError):
        os.fsync(dir_fd)


def fsync_dir(directory):
    """Make a rename durable (a power cut must not bring the old name back)."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on a directory; the rename stands
    finally:
        os.close(fd)


# -- whose paths these are ----------------------------------------------------------------
# The ownership rule (envlock/base/ownership.py says it for the controller, which imports it):
# what root's processes write and load must be root's, for the root, the compile-cache dir and
# the controller's own caches. The caches apply it on descriptors, walking from `/`
# (programs/bootstrap.py's `private_dir`, `owned_dir`): a name checked can be swapped.
MAX_LINKS = 40  # as the kernel's own limit on symlinks in one lookup


def untrusted(path, uid=None):
    """Why `path` is not this user's to trust, or None. It and each existing parent must be
    owned by this user or root and not writable by group or others; a parent may be a
    sticky directory such as /tmp (others cannot move what is ours there), the path itself
    may not, nor be a symlink. A symlink among the parents is followed when this user or root
    owns it. A part that does not exist yet is created later inside a trusted parent."""
    uid = os.getuid() if uid is None else uid
    parts = [p for p in os.path.abspath(path).split("/") if p]
    current = "/"
    reason = judge_path(current, os.lstat(current), uid, last=not parts)
    hops = 0
    while parts and reason is None:
        name = parts.pop(0)
        if name == ".":
            continue
        if name == "..":
            current = os.path.dirname(current)
            continue
        here = os.path.join(current, name)
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            return None
        except OSError as exc:
            return f"{here} cannot be checked ({exc.strerror})"
        if stat.S_ISLNK(st.st_mode):
            hops += 1
            if not parts:
                return f"{here} is a symlink: name the directory itself"
            if st.st_uid not in (uid, 0):
                return f"{here} is a symlink owned by {owner_name(st.st_uid)}"
            if hops > MAX_LINKS:
                return f"{here}: too many levels of symlinks"
            target = os.readlink(here)
            current = "/" if target.startswith("/") else current
            parts = [p for p in target.split("/") if p] + parts
            continue
        reason = judge_path(here, st, uid, last=not parts)
        current = here
    return reason


def judge_path(path, st, uid, last):
    if st.st_uid not in (uid, 0):
        mine = "root" if uid == 0 else f"{owner_name(uid)} or root"
        return f"{path} is owned by {owner_name(st.st_uid)}, not by {mine}"
    sticky_dir = stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX
    if st.st_mode & 0o022 and (last or not sticky_dir):
        return f"{path} is writable by others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def owner_name(uid):
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"


# -- what envlock inherits: input, and untrusted --------------------------------------------
# `sudo -E`, a sudoers `env_keep` of HOME or an XDG variable passed through hand root another
# user's directories: uv would read that user's uv.toml (a `link-mode = "symlink"` into their
# cache), run their "managed" Pythons, and the caches would live in a tree they can swap. So
# every process envlock starts for its own work (agent, probe, uv, launcher) gets the
# environment `own_environment` decides: HOME and each directory variable below are kept only
# while they pass the ownership rule (`untrusted`), HOME otherwise the running user's from the
# password database and the others dropped (their tools then use HOME's); `UV_*`/`PIP_*`
# pass only from the allow-list (the README's Security page lists it). The user's own command
# under `envlock run` keeps the environment it was given.
OWN_DIRS = (
    "XDG_CACHE_HOME",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_STATE_HOME",
    "XDG_RUNTIME_DIR",
    "UV_CACHE_DIR",
    "UV_PYTHON_INSTALL_DIR",
)
PASSED_UV_PIP = frozenset(
    (
        "UV_CACHE_DIR",
        "UV_PYTHON_INSTALL_DIR",
        "UV_CONCURRENT_DOWNLOADS",
        "UV_CONCURRENT_BUILDS",
        "UV_CONCURRENT_INSTALLS",
        "UV_HTTP_TIMEOUT",
        "UV_HTTP_RETRIES",
        "UV_NATIVE_TLS",
        "UV_OFFLINE",
        "UV_NO_PROGRESS",
        "UV_FIND_LINKS",
        "UV_INDEX",
        "UV_INDEX_URL",
        "UV_DEFAULT_INDEX",
        "UV_EXTRA_INDEX_URL",
        "UV_NO_INDEX",
        "PIP_FIND_LINKS",
        "PIP_INDEX_URL",
        "PIP_EXTRA_INDEX_URL",
    )
)
# An index's credentials (UV_INDEX_<NAME>_USERNAME / _PASSWORD) pass too.
PASSED_UV_CREDENTIALS = re.compile(r"UV_INDEX_[A-Z0-9_]+_(USERNAME|PASSWORD)")


def passed_on(name):
    """Whether an inherited variable reaches the processes envlock starts for its own work."""
    if not name.startswith(("UV_", "PIP_")):
        return True
    return name in PASSED_UV_PIP or bool(PASSED_UV_CREDENTIALS.fullmatch(name))


def own_dir(value):
    """Whether an inherited directory variable names a directory this user may trust."""
    return bool(value) and os.path.isabs(value) and untrusted(value) is None


def password_home():
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_dir or "/"
    except (ImportError, KeyError):
        return "/"


def own_environment(environ=None):
    """The environment of a process envlock starts for its own work (see above)."""
    environ = os.environ if environ is None else environ
    env = {name: value for name, value in environ.items() if passed_on(name)}
    if not own_dir(env.get("HOME")):
        env["HOME"] = password_home()
    for name in OWN_DIRS:
        if name in env and not own_dir(env[name]):
            del env[name]
    return env


def uv_environment(environ=None):
    """`own_environment` for uv: no configuration file is read (a `uv.toml` in any parent of
    the working directory, /tmp's included, or the user's), no virtualenv is inherited."""
    env = own_environment(environ)
    env["UV_NO_CONFIG"] = "1"
    env.pop("VIRTUAL_ENV", None)
    return env


# -- the interpreter a new generation is built on -------------------------------------------
# uv, left to find "Python 3.11" itself, runs every candidate it meets to ask its version:
# each `python3.11`, `python3` and `python` on PATH (a PATH entry of another user's, put
# there by `sudo -E` or a profile.d line, included) and each "managed" CPython in its
# install directory. So envlock chooses: the first `pythonX.Y` on PATH whose real file and
# every parent are this user's or root's and writable by no one else (`untrusted`), given to
# uv by its real path with `--python-preference only-system --no-python-downloads`; uv then
# runs nothing else. Only a profile's `[python] download = true` lets uv fetch (and find)
# a managed CPython, in the install directory `own_environment` decided.


def owned_python(version, search_path):
    """(the real path of the interpreter a generation of Python `version` is built on, or
    None; the candidates passed over, each with why)."""
    want = ".".join(version.split(".")[:2])
    passed = []  # type: list
    for entry in search_path.split(os.pathsep):
        if not entry or not os.path.isabs(entry):
            continue  # "" and relative entries name the working directory: never ours
        real = os.path.realpath(os.path.join(entry, "python" + want))
        if not os.path.isfile(real) or not os.access(real, os.X_OK):
            continue
        why = untrusted(real)
        if why is None:
            return real, passed  # a patch version asked is checked on the venv uv makes
        passed.append(f"{real}: {why}")
    return None, passed


def trust_facts(root, cache_dir):
    """For the probe: why the root or the compile-cache dir is not ours (None: it is)."""
    return {"root": untrusted(root), "cache_dir": untrusted(cache_dir) if cache_dir else None}


def refuse_untrusted(path, what):
    reason = untrusted(path)
    if reason is not None:
        raise AgentError(
            "untrusted",
            f"refusing {what} {path}: {reason}. What is in it is not yours to run or write "
            "through: move it aside (do not run what it holds) or choose a directory you own",
        )


def symlink_atomic(link, target):
    # A symlink made under a random name cannot be pre-planted; os.replace moves the name.
    for _ in range(100):
        tmp = f"{link}.{os.urandom(6).hex()}.tmp"
        try:
            os.symlink(target, tmp)
        except FileExistsError:
            continue
        os.replace(tmp, link)
        fsync_dir(os.path.dirname(link) or ".")  # the switch itself, durable
        return
    raise FileExistsError(f"{link}: no free temp name beside it")


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
def make_durable(tree):
    """Every file and directory under `tree` on disk. One syncfs() of its file system where
    the kernel can; on FUSE, where syncfs() never reaches the store below, or where the C
    library has no syncfs, an fsync of each file and directory. syncfs() also waits for
    other writers' pending data, yet measured against syncing only the tree's own files it
    wins idle and under another process's 2 GB write alike (bench/bench_durability.py:
    per-file syncs pay a device flush or a wait each, 15k-23k times)."""
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


def file_stats(tree):
    """The lstat of each file under `tree`, as du would walk it (one gone meanwhile, or that
    cannot be read, is skipped)."""
    for dirpath, _, names in os.walk(tree):
        for name in names:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            yield st


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
        # own: the kernel's
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


# The most a JSON file read by read_json may hold (a torch venv's manifest is a few MiB).
MAX_READ_JSON = 64 << 20


def read_json(path, default=None, within=None):
    """The JSON at `path`, through the gate (a FIFO, a device, a giant or, with `within`, a
    link out of that directory is `default`, as a missing or damaged file is)."""
    try:
        with open_untrusted(path, MAX_READ_JSON, within) as handle:
            return json.load(handle)
    except (OSError, ValueError, UnsafeFile):
        return default


# The gate for bytes from elsewhere (a METADATA file a polluting install wrote, a snapshot, a
# checkpoint member): such files are opened only by this function, here and in the controller
# (envlock/base/untrusted.py gives it envlock's limits and errors).
def open_untrusted(path, limit=None, within=None):
    """`path` open for reading (binary) once its descriptor shows a regular file of at most
    `limit` bytes, inside `within` when given; UnsafeFile (exit 3) otherwise.

    Judged by name first (opening some devices acts: a watchdog starts counting down), then
    on the descriptor, which is what counts: the name may be swapped in between. OSError
    (missing, unreadable) is the caller's."""
    not_regular(path, os.stat(path).st_mode)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        not_regular(path, info.st_mode)
        if within is not None:
            refuse_outside(fd, path, within)
        if limit is not None and info.st_size > limit:
            raise UnsafeFile(
                "size",
                info.st_size,
                f"refusing: {path}: a file of {info.st_size} bytes exceeds {limit} bytes",
            )
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def refuse_outside(fd, path, within):
    """UnsafeFile unless what descriptor `fd` opened lies inside `within` (a link out)."""
    # Linux names what the descriptor opened in /proc; elsewhere the name, resolved.
    proc = f"/proc/self/fd/{fd}"
    opened = os.path.realpath(proc if os.path.isdir("/proc/self/fd") else path)
    top = os.path.realpath(within)
    if opened != top and not opened.startswith(top.rstrip(os.sep) + os.sep):
        raise UnsafeFile(
            "outside", opened, f"refusing: {path} is a link out of {within} (to {opened})"
        )


# -- sparse files: holes are not read ------------------------------------------------------
# A sparse file claims bytes it never wrote: `truncate -s 1T` makes a terabyte of holes in no
# time and no space, and hashing it reads a terabyte of zeros. A file over SPARSE_FROM with
# less than half of its size on disk (st_blocks) whose holes (SEEK_HOLE/SEEK_DATA: a
# compressing file system also keeps less on disk, without holes) are over half of it is
# named and not read whole: skipped by the dataset fingerprint, refused by adopt and by
# `diff --weights`. No wheel, dataset writer or checkpoint writer makes one.
SPARSE_FROM = 64 << 20
MAX_EXTENTS = 100000  # holes counted in one file before it is called sparse on what it has


def may_be_sparse(st):
    """Over SPARSE_FROM with less than half of it on disk: worth asking where its holes are."""
    return st.st_size > SPARSE_FROM and st.st_blocks * 512 < st.st_size // 2


def sparse(fd, st):
    """Why the regular file open on `fd` (its fstat `st`) is not to be read whole — "a
    sparse file (N bytes, M on disk)" — or None."""
    if not may_be_sparse(st):
        return None
    found = hole_bytes(fd, st.st_size)
    if found is not None and found < st.st_size // 2:
        return None  # compressed, not holes: it is read
    return f"a sparse file ({st.st_size:,} bytes, {st.st_blocks * 512:,} on disk)"


def hole_bytes(fd, size):
    """Bytes of `fd` in holes, by SEEK_HOLE/SEEK_DATA (at least that many past MAX_EXTENTS
    holes); None where the system cannot say. The offset is left at 0."""
    if not hasattr(os, "SEEK_HOLE"):
        return None
    total, at = 0, 0
    try:
        for _ in range(MAX_EXTENTS):
            if at >= size:
                break
            hole = os.lseek(fd, at, os.SEEK_HOLE)
            if hole >= size:
                break
            try:
                at = os.lseek(fd, hole, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno != errno.ENXIO:
                    raise
                at = size  # holes to the end
            total += at - hole
        else:
            total = max(total, size - at)  # too many holes to count: the rest is theirs
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError:
        return None
    return total


def sparse_at(path, st):
    """`sparse` for a path `lstat` showed to be a regular file (opened without blocking)."""
    if not may_be_sparse(st):
        return None
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        return sparse(fd, info) if stat.S_ISREG(info.st_mode) else kind_of(info.st_mode)
    finally:
        os.close(fd)


def not_regular(path, mode):
    if not stat.S_ISREG(mode):
        what = kind_of(mode)
        raise UnsafeFile("kind", what, f"refusing: {path} is {what}, not a regular file")


# What one probe reads of an environment's METADATA files (a polluting install writes them,
# and `check` shows what they say); envlock/base/limits.py lists them with envlock's others.
MAX_ENV_TEXT = 4096  # characters of one Name/Version/Requires-Dist value
MAX_ENV_HEADER = 16 << 20  # bytes of one METADATA file's header part
MAX_ENV_HEADERS = 256 << 20  # bytes of all of them one probe reads (its budget)


def progress(message):
    sys.stderr.write(f"envlock-progress: {message}\n")
    sys.stderr.flush()


LIVE = "live: "  # a progress line a terminal shows in place (reconcile/agentcall.py), never a log's


def pacer(every=0.5):
    """A live progress line at once, then at most one every `every` seconds: `say(make)`
    calls `make()` for the line only when one is due (or `now_anyway`: a new step's first),
    so a loop over 100,000 files pays a clock read a file. Threads may share it."""
    import threading

    due = [0.0]
    lock = threading.Lock()

    def say(make, now_anyway=False):
        now = time.monotonic()
        if now < due[0] and not now_anyway:
            return
        with lock:
            if now < due[0] and not now_anyway:
                return
            due[0] = now + every
            progress(LIVE + make())

    return say


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


# A generation being removed is first renamed to this prefix (agent/apply.py): never listed.
TRASH = ".trash-"


def list_removals(root):
    """The generations a removal renamed away and has not finished deleting (a crash)."""
    try:
        return sorted(
            n for n in os.listdir(os.path.join(root, "generations")) if n.startswith(TRASH)
        )
    except OSError:
        return []


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


def state_digest(state):
    """The hash both sides of `envlock run`'s one call compute of a state (the agent's `run`
    and the controller, envlock/runs/one_call.py): of its JSON as it travels (keys sorted)."""
    travelled = json.loads(json.dumps(state))
    return hashlib.sha256(json.dumps(travelled, sort_keys=True).encode()).hexdigest()


def read_history(root, limit=200):
    try:
        # own: the root's history, envlock's, appended under its lock
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
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(os.path.join(root, "history.jsonl"), flags, 0o644)
    try:
        os.write(fd, (json.dumps(entry, sort_keys=True) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


class AgentError(Exception):
    def __init__(self, kind, message):
        Exception.__init__(self, message)
        self.kind = kind


class UnsafeFile(AgentError):
    """A file open_untrusted refused, and why: "kind" (`detail`: what the file is, "a FIFO"),
    "outside" (`detail`: the path its descriptor opened) or "size" (`detail`: its bytes)."""

    def __init__(self, why, detail, message):
        AgentError.__init__(self, "unsafe", message)
        self.why, self.detail = why, detail


COMMANDS = {}  # type: dict  # name -> function(request); filled in by the other modules
STREAMING = []  # type: list  # non-empty once a command started writing binary output
# Commands that read their own request from stdin, exactly (`run`: the rest is the command's).
OWN_STDIN = set()  # type: set


def main(argv=None):
    """`agent COMMAND [REQUEST-JSON]`: the request comes as an argument when stdin carries
    data (an archive to restore), else on stdin. JSON answer (or error) on stdout."""
    argv = sys.argv[1:] if argv is None else argv
    command = argv[0] if argv else "probe"
    try:
        # One line: apply may read an answer from stdin after it (agent/apply.py handshake).
        if command in OWN_STDIN:
            req = None
        else:
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
