"""Atomic file writes, by descriptor: the one way the controller writes a file.

The temp file is created exclusively beside its destination, never through a link
(O_EXCL|O_NOFOLLOW), its mode is set on the open descriptor, and only the rename uses a name:
a user who may write the directory (a shared checkpoint folder) can swap names around us but
cannot make us write through, or change the mode of, anything we did not create. A
destination that is not a regular file (a link, a FIFO, a device node) is never replaced.

The agent (envlock/agent/core.py) and the start-up modules (envlock/startup/envlock_write.py)
keep copies of this function, stdlib-only and Python 3.8: keep the three in step
(tests/trust/test_writes.py runs them on the same cases).
"""

from __future__ import annotations

import contextlib
import os
import stat

from envlock.errors import OperationError, UsageError

TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class NotRegularFile(UsageError):
    """The destination exists and is not a regular file: it is not ours to replace (exit 2)."""


def write_atomic(path: str | os.PathLike[str], data: bytes, mode: int = 0o644) -> None:
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
        # Again, just before the rename: the directory may be shared, the checks are cheap.
        refuse_non_regular(path)
        refuse_replaced(tmp, ours)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(directory)


def create_temp(path: str, mode: int) -> tuple[int, str]:
    """A new file beside `path`, ours alone, with `mode` set on its descriptor."""
    for _ in range(100):
        tmp = f"{os.path.dirname(path) or '.'}/.{os.path.basename(path)}.{os.urandom(6).hex()}.tmp"
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


def refuse_replaced(tmp: str, ours: os.stat_result) -> None:
    """The temp file is still the one we wrote (a user who may write the directory can
    rename their link over it: renaming that into place would publish their link)."""
    try:
        st = os.lstat(tmp)
    except FileNotFoundError:
        st = None
    if st is None or (st.st_ino, st.st_dev) != (ours.st_ino, ours.st_dev):
        raise OperationError(
            f"{tmp} was replaced while envlock wrote it: someone else may write "
            f"{os.path.dirname(tmp)}; write where only you can"
        )


def refuse_non_regular(path: str) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode):
        raise NotRegularFile(
            f"{path} exists and is not a regular file ({kind_of(st.st_mode)}): envlock replaces "
            "only regular files; remove it or write elsewhere"
        )


def kind_of(mode: int) -> str:
    for test, name in (
        (stat.S_ISLNK, "a symlink"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def fsync_dir(directory: str) -> None:
    """Make the rename durable (a power cut must not bring the old name back)."""
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


def write_new(path: str | os.PathLike[str], data: bytes, mode: int = 0o644) -> None:
    """Like write_atomic, but never replaces a file: FileExistsError when `path` exists.
    The link that publishes the file is the check, so nothing can appear in between."""
    path = os.fspath(path)
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = create_temp(path, mode)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
            ours = os.fstat(handle.fileno())
        refuse_replaced(tmp, ours)
        os.link(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    fsync_dir(directory)
