"""The agent's bootstrap: unpacks and compiles the agent's modules into one namespace and
runs the command (envlock/reconcile/agentcode.py builds the call with the modules, packed).

The compiled code is kept per envlock build and interpreter (~/.cache/envlock on the target;
anything unreadable there is compiled afresh), so a probe does not compile 1,700 lines each
time. The code is ours: it came in this command line, and the key is its hash. A file
planted there would run as this user, and a directory checked by name can be swapped before
it is opened (`renameat2` RENAME_EXCHANGE, by whoever may write a parent): so the cache is
walked from `/` by descriptor (`private_dir`: each directory opened relative to the one
before, never through a link, each this user's or root's and writable by no one else), the
compiled agent is read from the descriptor it was judged on (`read_private`), and written
and pruned relative to the directory's descriptor (the agent's write_at, prune_compiled in
agent/core.py). The controller's own caches (envlock/base/usercache.py) use the same two
functions: they are here because this module runs before any of the agent's is loaded.

Shipped as this module, then `bootstrap(KEY, PACKED)`.
"""

import binascii
import contextlib
import marshal
import os
import stat
import sys
import zlib

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
KEPT_MAX = 64 << 20  # a compiled agent is ~1 MiB


def bootstrap(key, packed):
    """Run the agent of `packed` ([(name, base64 of zlib)]), compiled once per `key`."""
    space = {"__name__": "envlock_agent", "__envlock_agent__": True}  # type: dict
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    tag = sys.implementation.cache_tag
    cache = private_dir(os.path.join(base, "envlock"), made=2) if tag else None
    kept = f"agent-{key}-{tag}"
    code = compiled_from(cache, kept) if cache is not None else None
    fresh = not isinstance(code, list)
    if not isinstance(code, list):
        code = [
            compile(zlib.decompress(binascii.a2b_base64(text)), "envlock-agent/" + name, "exec")
            for name, text in packed
        ]
    for module in code:
        exec(module, space)
    if cache is not None and fresh:
        keep_compiled(space, cache, kept, code)
    sys.exit(space["main"]())


def private_dir(path, made=0):
    """A descriptor of the directory `path`, walked from `/` one name at a time (each opened
    relative to the one before, never through a link), each directory this user's or root's
    and writable by no one else (one above the last may be sticky, like /tmp); the last
    `made` names are created 0700 when missing. None when the walk cannot be made so."""
    names = [name for name in path.split("/") if name not in ("", ".")]
    if not path.startswith("/") or ".." in names:
        return None
    fd = None
    try:
        fd = os.open("/", DIR_FLAGS)
        for index, name in enumerate(names):
            if not owned_dir(os.fstat(fd), last=False):
                raise OSError("not ours")
            step = open_step(fd, name, create=index >= len(names) - made)
            os.close(fd)
            fd = step
        if owned_dir(os.fstat(fd), last=True):
            return fd
    except OSError:
        pass
    if fd is not None:
        os.close(fd)
    return None


def open_step(fd, name, create):
    """`name` in the directory `fd`, opened as a directory (made 0700 first with `create`)."""
    try:
        return os.open(name, DIR_FLAGS, dir_fd=fd)
    except FileNotFoundError:
        if not create:
            raise
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o700, dir_fd=fd)
    return os.open(name, DIR_FLAGS, dir_fd=fd)


def owned_dir(st, last):
    """The ownership rule (agent/core.py's `untrusted`), on what a descriptor opened."""
    if st.st_uid not in (os.getuid(), 0) or not stat.S_ISDIR(st.st_mode):
        return False
    sticky = st.st_mode & stat.S_ISVTX
    return not (st.st_mode & 0o022 and (last or not sticky))


def read_private(dir_fd, name, limit):
    """All of the regular file `name` in the directory `dir_fd`, judged on its descriptor:
    not a link, this user's, writable by no one else, at most `limit` bytes; else None."""
    try:
        fd = os.open(name, FILE_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    st = os.fstat(fd)  # judged before fdopen, which raises for a directory
    mine = stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022
    if not mine or st.st_size > limit:
        os.close(fd)
        return None
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(limit + 1)
    return data if len(data) <= limit else None


def compiled_from(cache, kept):
    """The code kept as `kept` in the cache directory `cache` (a descriptor); None (compile
    afresh) when it is not there or not sound."""
    try:
        data = read_private(cache, kept, KEPT_MAX)
        return marshal.loads(data) if data is not None else None
    except Exception:
        return None


def keep_compiled(space, cache, kept, code):
    """Keep `code` for the next call, written by the agent's own write_at in the directory
    the descriptor `cache` opened (any failure is only a cache missed)."""
    try:
        space["write_at"](cache, kept, marshal.dumps(code), 0o600)
        space["prune_compiled"](cache, kept)
    except Exception:
        pass
