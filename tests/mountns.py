"""A mount namespace of the test's own, for the tests that stage races (issue #42).

Those tests plant links and swap files while envlock writes; when the code under test
regresses, a write meant for a planted name can follow the link, and as root that once
replaced the host's /dev/null (a temp file beside it, renamed over it). Inside
`private_mounts`, the test's thread (and every process it starts) sees a private copy of
the mount table with a fresh tmpfs on /dev: the devices a process needs made there (null,
zero, urandom, random, full, tty, the /proc/self/fd links), the host's /dev/pts and
/dev/shm moved in. Whatever a regressed rename does to /dev/null then happens on that
tmpfs. On leaving, the thread returns to the namespace it came from; the one it leaves
dies with its last process.

Where the kernel refuses (no CAP_SYS_ADMIN, a container without unshare), the test runs in
the host's namespace as before, and the suite's guard (tests/conftest.py's
machine_left_as_found) still checks the devices after the module.
"""

from __future__ import annotations

import ctypes
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

CLONE_NEWNS = 0x00020000
MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = 0x1000, 0x2000, 0x4000, 0x40000
NODES = {"null": (1, 3), "zero": (1, 5), "full": (1, 7), "random": (1, 8), "urandom": (1, 9)}
NODES["tty"] = (5, 0)
LINKS = {"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1"}
LINKS |= {"stderr": "/proc/self/fd/2", "ptmx": "pts/ptmx"}
KEPT = ("pts", "shm")  # the host's, moved into the new /dev

_libc = ctypes.CDLL(None, use_errno=True)


def _call(name: str, *args: object) -> None:
    if getattr(_libc, name)(*args) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{name}: {os.strerror(errno)}")


def _mount(source: str, target: str, flags: int, fstype: str | None = None) -> None:
    kind = fstype.encode() if fstype else None
    _call("mount", source.encode(), target.encode(), kind, ctypes.c_ulong(flags), None)


def current() -> int:
    """This thread's mount namespace (its inode)."""
    return os.stat("/proc/thread-self/ns/mnt").st_ino


def own_dev(place: Path) -> None:
    """A tmpfs on /dev with the devices and links a process needs, the host's pts and shm
    (bind-mounted under `place` first, then moved in)."""
    place.mkdir(parents=True, exist_ok=True)
    kept = [name for name in KEPT if os.path.isdir(f"/dev/{name}")]
    for name in kept:
        (place / name).mkdir()
        _mount(f"/dev/{name}", str(place / name), MS_BIND | MS_REC)
    _mount("tmpfs", "/dev", 0, "tmpfs")
    os.chmod("/dev", 0o755)
    for name, (major, minor) in NODES.items():
        os.mknod(f"/dev/{name}", stat.S_IFCHR | 0o666, os.makedev(major, minor))
        os.chmod(f"/dev/{name}", 0o666)
    for name, target in LINKS.items():
        os.symlink(target, f"/dev/{name}")
    for name in kept:
        os.mkdir(f"/dev/{name}")
        _mount(str(place / name), f"/dev/{name}", MS_MOVE)


@contextmanager
def private_mounts(place: Path) -> Iterator[bool]:
    """The block in a private mount namespace with a /dev of its own; yields whether the
    kernel allowed it."""
    home = os.open("/proc/thread-self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    cwd = os.getcwd()
    try:
        _call("unshare", CLONE_NEWNS)
    except OSError:
        os.close(home)
        yield False
        return
    try:
        _mount("none", "/", MS_REC | MS_PRIVATE)
        own_dev(place)
        yield True
    finally:
        _call("setns", home, CLONE_NEWNS)
        os.close(home)
        os.chdir(cwd)
