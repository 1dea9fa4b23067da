"""LazyFS for the suite: power cuts, simulated (tests/vendor/lazyfs/, MIT).

LazyFS is a FUSE file system over a directory that keeps written data in its own cache
until it is fsynced; `cut()` drops everything not fsynced (names, renames and links stay,
as ext4 leaves them after a power cut), and remounts over the same directory: what a
rebooted machine finds. Built once per machine into the test cache directory."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

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


def lazyfs_binary() -> Path:
    """Build LazyFS (offline, from the vendored tarball) once; the path of its binary."""
    if not Path("/dev/fuse").exists():
        pytest.fail("LazyFS needs /dev/fuse (a FUSE-capable kernel, as root)")
    dest = CACHE / "lazyfs-a47a5ba"
    built = subprocess.run(["bash", BUILD_SH, dest], capture_output=True, text=True)
    if built.returncode != 0:
        pytest.fail(f"building LazyFS failed:\n{built.stdout}\n{built.stderr}")
    return Path(built.stdout.strip().splitlines()[-1])


class LazyFS:
    """One mount of LazyFS at `mnt` over `under`, with its fault FIFOs in `work`."""

    def __init__(self, binary: Path, work: Path) -> None:
        self.binary = binary
        self.under = work / "under"
        self.mnt = work / "mnt"
        self.fifo = work / "faults.fifo"
        self.done = work / "done.fifo"
        self.config = work / "lazy.toml"
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
        self.proc = subprocess.Popen(
            argv,
            cwd=self.config.parent,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while not self.mounted():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                self.proc.kill()
                pytest.fail(f"LazyFS did not mount at {self.mnt}: {err[-2000:]}")
            time.sleep(0.05)

    def mounted(self) -> bool:
        with open("/proc/mounts") as mounts:
            return any(
                line.split()[1] == str(self.mnt) and "lazyfs" in line.split()[2] for line in mounts
            )

    def command(self, text: str, *, wait_for: str | None = None) -> None:
        """Send a fault command; with `wait_for`, block until LazyFS says it finished."""
        with open(self.fifo, "w") as fifo:
            fifo.write(text + "\n")
        if wait_for is None or self.done_fd is None:
            return
        heard = b""
        deadline = time.monotonic() + 60
        while wait_for.encode() not in heard and time.monotonic() < deadline:
            with contextlib.suppress(BlockingIOError):
                heard += os.read(self.done_fd, 4096)
            time.sleep(0.02)
        assert wait_for.encode() in heard, f"LazyFS never said {wait_for!r} ({heard!r})"

    def cut(self) -> None:
        """The power cut: unsynced data is lost, then the machine comes back (remount)."""
        self.command("lazyfs::clear-cache", wait_for="finished::clear-cache")
        self.unmount()
        self.mount()

    def close(self) -> None:
        self.unmount()
        if self.done_fd is not None:
            os.close(self.done_fd)
            self.done_fd = None

    def unmount(self) -> None:
        if self.proc is None:
            return
        subprocess.run(["fusermount3", "-u", str(self.mnt)], capture_output=True)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            subprocess.run(["fusermount3", "-uz", str(self.mnt)], capture_output=True)
        self.proc = None

    def crashed(self) -> bool:
        """Whether LazyFS itself ended (its crash faults kill it at the chosen operation)."""
        return self.proc is not None and self.proc.poll() is not None

    def restart_after_crash(self) -> None:
        assert self.proc is not None
        self.proc.wait()
        subprocess.run(["fusermount3", "-uz", str(self.mnt)], capture_output=True)
        self.proc = None
        self.mount()
