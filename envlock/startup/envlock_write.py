"""Atomic file writes for the start-up modules (envlock_megacache, the in-process
`envlock.snapshot()`), which run in the user's Python under `envlock run` and cannot import
envlock.

Stdlib only, Python 3.8+. A copy of envlock/base/atomic.py's write_atomic: keep them in step
(tests/trust/test_writes.py runs both, and the agent's, on the same cases). The temp file is
created exclusively beside its destination, never through a link, its mode set on the
descriptor; a destination that is not a regular file is never replaced. Where the directory
is shared (a checkpoint folder), nobody can make this write through, or chmod, their file.
"""

import contextlib
import os
import stat

TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class NotRegularFile(OSError):
    """The destination exists and is not a regular file: it is not ours to replace."""


def write_atomic(path, data, mode=0o644):
    """Replace `path` with `data` so readers see the old or the new file, never a part."""
    path = os.fspath(path)
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    refuse_non_regular(path)
    fd, tmp = create_temp(path, mode)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
            ours = os.fstat(handle.fileno())
        refuse_non_regular(path)
        refuse_replaced(tmp, ours)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(directory)


def create_temp(path, mode):
    """A new file beside `path` (a random name: one planted in advance is skipped)."""
    for _ in range(100):
        tmp = "{}/.{}.{}.tmp".format(
            os.path.dirname(path) or ".", os.path.basename(path), os.urandom(6).hex()
        )
        try:
            fd = os.open(tmp, TEMP_FLAGS, 0o600)
        except FileExistsError:
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
        raise NotRegularFile(
            f"{tmp} was replaced while envlock wrote it: someone else may write "
            f"{os.path.dirname(tmp)}; write where only you can"
        )


def refuse_non_regular(path):
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode):
        raise NotRegularFile(
            f"{path} exists and is not a regular file: envlock replaces only regular files; "
            "remove it or write elsewhere"
        )


def fsync_dir(directory):
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
