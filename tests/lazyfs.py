"""LazyFS for the suite: power cuts, simulated (tests/vendor/lazyfs/, MIT).

LazyFS is a FUSE file system over a directory that keeps written data in its own cache
until it is fsynced; `cut()` drops everything not fsynced (names, renames and links stay,
as ext4 leaves them after a power cut), and remounts over the same directory: what a
rebooted machine finds. Built once per machine into the test cache directory.

Every wait here is bounded (`Bounds`): a LazyFS that never mounts, never answers a fault
command, never unmounts or never exits is killed, its mount lazily detached, and the test
fails saying which wait ran out, instead of hanging the suite (one run once hung ten minutes
inside LazyFS). `watchdog()` bounds a whole test the same way, for the waits that happen
outside this helper: a process reading the mount while LazyFS is stuck waits in the kernel
until the FUSE daemon dies."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import pytest

HERE = Path(__file__).resolve().parent
BUILD_SH = HERE / "vendor" / "lazyfs" / "build.sh"
CACHE = Path(
    os.environ.get("ENVLOCK_TEST_CACHE")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "envlock-tests"
)

CONFIG = """\
[faults]
fifo_path="{fifo}"
fifo_path_completed="{done}"
[cache]
apply_eviction=false
[cache.simple]
custom_size="256mb"
blocks_per_page=1
[filesystem]
log_all_operations=false
logfile=""
"""


@dataclass(frozen=True)
class Bounds:
    """Seconds each wait may take. A 256 MB cache mounts in about 2 s and a cut takes well
    under 1 s here: the defaults are generous for a loaded machine, yet finite."""

    mount: float = 60
    command: float = 60
    exit: float = 20


def lazyfs_binary() -> Path:
    """Build LazyFS (offline, from the vendored tarball) once; the path of its binary."""
    if not Path("/dev/fuse").exists():
        pytest.fail("LazyFS needs /dev/fuse (a FUSE-capable kernel, as root)")
    dest = CACHE / "lazyfs-a47a5ba-item-locks"  # a new name when the patch set changes
    built = subprocess.run(["bash", BUILD_SH, dest], capture_output=True, text=True, timeout=900)
    if built.returncode != 0:
        pytest.fail(f"building LazyFS failed:\n{built.stdout}\n{built.stderr}")
    return Path(built.stdout.strip().splitlines()[-1])


class LazyFS:
    """One mount of LazyFS at `mnt` over `under`, with its fault FIFOs in `work`."""

    def __init__(self, binary: Path, work: Path, bounds: Bounds = Bounds()) -> None:
        self.binary = binary
        self.bounds = bounds
        self.under = work / "under"
        self.mnt = work / "mnt"
        self.fifo = work / "faults.fifo"
        self.done = work / "done.fifo"
        self.config = work / "lazy.toml"
        # A file, not a pipe: a pipe nobody drains blocks a chatty LazyFS, and reading one
        # whose writer is alive blocks us.
        self.log = work / "lazyfs.log"
        for directory in (self.under, self.mnt):
            directory.mkdir(parents=True, exist_ok=True)
        for fifo in (self.fifo, self.done):
            if not fifo.exists():
                os.mkfifo(fifo)
        self.config.write_text(CONFIG.format(fifo=self.fifo, done=self.done))
        self.proc: subprocess.Popen[bytes] | None = None
        # LazyFS opens the completion FIFO for writing when it starts (blocking until a
        # reader comes) and writes to it after each cut: keep one reader open throughout.
        self.done_fd: int | None = None

    def mount(self) -> None:
        if self.done_fd is None:
            self.done_fd = os.open(self.done, os.O_RDONLY | os.O_NONBLOCK)
        # Relative: LazyFS takes a config path holding "-o" (as in pytest-of-root) for an option.
        argv = [str(self.binary), str(self.mnt), "--config-path", self.config.name]
        argv += ["-o", "allow_other", "-o", "modules=subdir", "-o", f"subdir={self.under}", "-f"]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                argv,
                cwd=self.config.parent,
                stdout=subprocess.DEVNULL,
                stderr=log,
                start_new_session=True,
            )
        proc = self.proc
        self._wait(lambda: self.mounted() or proc.poll() is not None, self.bounds.mount, "mount")
        if not self.mounted():
            self.abandon()
            self._fail(f"LazyFS ended (status {proc.returncode}) before mounting at {self.mnt}")

    def mounted(self) -> bool:
        with open("/proc/mounts") as mounts:
            return any(
                line.split()[1] == str(self.mnt) and "lazyfs" in line.split()[2] for line in mounts
            )

    def command(self, text: str, *, wait_for: str | None = None) -> None:
        """Send a fault command; with `wait_for`, block until LazyFS says it finished."""
        data = (text + "\n").encode()
        # Non-blocking: opening a FIFO for writing blocks until a reader comes, and a
        # LazyFS that died or never started its fault thread would never come.
        opened: list[int] = []
        self._wait(lambda: self._open_writer(opened), self.bounds.command, f"{text!r} (open)")
        fd = opened[0]
        try:
            self._wait(lambda: self._write(fd, data), self.bounds.command, f"{text!r} (write)")
        finally:
            os.close(fd)
        if wait_for is None or self.done_fd is None:
            return
        heard = bytearray()
        self._wait(lambda: self._heard(heard, wait_for), self.bounds.command, repr(wait_for))

    def _open_writer(self, opened: list[int]) -> bool:
        try:
            opened.append(os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # no reader yet
                return False
            raise
        return True

    @staticmethod
    def _write(fd: int, data: bytes) -> bool:
        with contextlib.suppress(BlockingIOError):
            return os.write(fd, data) == len(data)  # a line this short goes in whole
        return False

    def _heard(self, heard: bytearray, wait_for: str) -> bool:
        assert self.done_fd is not None
        with contextlib.suppress(BlockingIOError):
            heard += os.read(self.done_fd, 4096)
        return wait_for.encode() in heard

    def cut(self) -> None:
        """The power cut: unsynced data is lost, then the machine comes back (remount)."""
        self.command("lazyfs::clear-cache", wait_for="finished::clear-cache")
        self.unmount()
        self.mount()

    def close(self) -> None:
        try:
            self.unmount()
        finally:
            if self.done_fd is not None:
                os.close(self.done_fd)
                self.done_fd = None

    def unmount(self) -> None:
        if self.proc is None:
            return
        try:
            subprocess.run(
                ["fusermount3", "-u", str(self.mnt)],
                capture_output=True,
                timeout=self.bounds.exit,
            )
        except subprocess.TimeoutExpired:
            self.abandon()
            self._fail(f"fusermount3 -u {self.mnt} did not return")
        self._wait_exit()
        self.proc = None

    def crashed(self) -> bool:
        """Whether LazyFS itself ended (its crash faults kill it at the chosen operation)."""
        return self.proc is not None and self.proc.poll() is not None

    def faulted(self) -> str | None:
        """Why LazyFS died of a fault of its own (a signal other than the SIGKILL its crash
        faults send), or None: an envlock command that then fails with ENOTCONN is not at fault.
        """
        status = self.proc.poll() if self.proc is not None else None
        if status is None or status >= 0 or status == -signal.SIGKILL:
            return None
        return f"LazyFS itself died of {signal.Signals(-status).name} (a LazyFS bug; see dmesg)"

    def restart_after_crash(self) -> None:
        assert self.proc is not None
        self._wait_exit()
        self._detach()
        self.proc = None
        self.mount()

    def _wait_exit(self) -> None:
        """LazyFS ends (unmounted, or after its crash fault); past the bound it is killed:
        what the test wanted, a LazyFS gone, holds all the same."""
        assert self.proc is not None
        try:
            self.proc.wait(timeout=self.bounds.exit)
        except subprocess.TimeoutExpired:
            self.abandon()

    def abandon(self) -> None:
        """Kill LazyFS (its whole session) and detach its mount: a FUSE daemon that dies
        fails every request still waiting on it, which frees whoever was stuck there."""
        proc = self.proc
        if proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=self.bounds.exit)
        self._detach()
        if proc is not None and proc.poll() is None:
            self._fail(f"LazyFS (pid {proc.pid}) survived SIGKILL for {self.bounds.exit} s")

    def _detach(self) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            subprocess.run(
                ["fusermount3", "-uz", str(self.mnt)],
                capture_output=True,
                timeout=self.bounds.exit,
            )

    def _wait(self, ready: Callable[[], bool], seconds: float, what: str) -> None:
        """Poll `ready()` until it is true; past `seconds`, kill LazyFS and fail."""
        deadline = time.monotonic() + seconds
        while not ready():
            if time.monotonic() > deadline:
                self.abandon()
                self._fail(f"LazyFS did not finish {what} within {seconds:g} s")
            time.sleep(0.02)

    def _fail(self, message: str) -> None:
        tail = self.log.read_bytes()[-2000:].decode(errors="replace") if self.log.exists() else ""
        pytest.fail(f"{message}; killed it. Its log: {tail or '(empty)'}", pytrace=False)

    @contextlib.contextmanager
    def watchdog(self, seconds: float) -> Iterator[None]:
        """Bound everything inside (a test's body) to `seconds`: past it, LazyFS is killed
        (freeing any process stuck on the mount) and the main thread fails with a message."""
        message = f"the test ran over its {seconds:g} s bound; LazyFS was killed and unmounted"
        fired = threading.Event()

        def expire() -> None:
            fired.set()
            with contextlib.suppress(BaseException):
                self.abandon()
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGALRM)

        def on_alarm(signum: int, frame: FrameType | None) -> None:
            if fired.is_set():
                pytest.fail(message, pytrace=False)

        previous = signal.signal(signal.SIGALRM, on_alarm)
        timer = threading.Timer(seconds, expire)
        timer.daemon = True
        timer.start()
        try:
            yield
        except BaseException as exc:
            # An error that the kill caused (a read of the mount failing) is the time-out.
            if fired.is_set() and not isinstance(exc, pytest.fail.Exception):
                pytest.fail(f"{message} ({exc!r})", pytrace=False)
            raise
        finally:
            timer.cancel()
            timer.join()  # the alarm, if sent, is handled here, while on_alarm is in place
            signal.signal(signal.SIGALRM, previous)
