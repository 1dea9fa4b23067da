"""The LazyFS harness itself: a LazyFS that never mounts or stops answering fails its test
within a bound instead of hanging the suite, and LazyFS survives uv's many parallel writers
(the patched build in tests/vendor/lazyfs). The power cuts themselves: test_power_cut.py."""

from __future__ import annotations

import concurrent.futures
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.lazyfs import Bounds, LazyFS

# The helper's own bounds: a LazyFS that never mounts, or stops answering, fails the test
# within its bound instead of hanging it.
QUICK = Bounds(mount=1, command=1, exit=5)


def test_a_lazyfs_that_never_mounts_fails_within_the_bound(tmp_path: Path) -> None:
    never = tmp_path / "never-mounts"
    never.write_text("#!/bin/sh\nexec sleep 600\n")
    never.chmod(0o755)
    fs = LazyFS(never, tmp_path / "lazyfs", QUICK)
    started = time.monotonic()
    with pytest.raises(pytest.fail.Exception, match="did not finish mount within 1 s"):
        fs.mount()
    assert time.monotonic() - started < 15
    assert fs.proc is not None and fs.proc.poll() is not None  # killed, not left behind
    fs.close()


@pytest.fixture
def stopped(tmp_path: Path, lazyfs_bin: Path) -> Iterator[LazyFS]:
    """A real LazyFS, mounted, then stopped (SIGSTOP): it never answers again."""
    fs = LazyFS(lazyfs_bin, tmp_path / "lazyfs", QUICK)
    fs.bounds = Bounds(mount=60, command=1, exit=5)
    fs.mount()
    fs.bounds = QUICK
    (fs.mnt / "file").write_text("data")
    assert fs.proc is not None
    os.kill(fs.proc.pid, signal.SIGSTOP)
    while not all_stopped(fs.proc.pid):  # a stop reaches each thread in its own time
        time.sleep(0.01)
    try:
        yield fs
    finally:
        fs.close()
        assert not fs.mounted()


def all_stopped(pid: int) -> bool:
    tasks = Path(f"/proc/{pid}/task").iterdir()
    return all((task / "stat").read_text().rsplit(")", 1)[1].split()[0] == "T" for task in tasks)


def test_a_cut_on_a_stopped_lazyfs_fails_within_the_bound(stopped: LazyFS) -> None:
    started = time.monotonic()
    with pytest.raises(pytest.fail.Exception, match="within 1 s; killed it"):
        stopped.cut()
    assert time.monotonic() - started < 15
    assert stopped.crashed()


def test_the_watchdog_frees_a_test_stuck_on_the_mount(stopped: LazyFS) -> None:
    """A process reading the mount of a stuck LazyFS waits in the kernel; the watchdog kills
    LazyFS, which frees it, and fails the test saying so."""
    started = time.monotonic()
    with pytest.raises(pytest.fail.Exception, match="over its 2 s bound"), stopped.watchdog(2):
        subprocess.run(["cat", str(stopped.mnt / "file")], capture_output=True)
    assert time.monotonic() - started < 15
    assert stopped.crashed()


def test_lazyfs_survives_parallel_writers_of_new_files(lazy: LazyFS) -> None:
    """uv writes its cache with many threads at once. Upstream LazyFS segfaulted under that
    (a race on its map of per-file locks as the map grows, tests/vendor/lazyfs/item-locks.patch):
    every process on the mount then saw ENOTCONN, and an apply failed for LazyFS's fault, not
    envlock's. Each round grows the map afresh on a new mount; upstream died in about two
    rounds in three here (it keeps ~250 KB a file, so a round stays at 8,000 files)."""
    threads, per_thread = 16, 500

    def write_new_files(directory: Path) -> int:
        directory.mkdir()
        for i in range(per_thread):
            try:
                (directory / f"file{i}").write_bytes(b"x" * 4096)
            except OSError:  # ENOTCONN once LazyFS died: asserted below
                return i
        return per_thread

    for round_ in range(3):
        with concurrent.futures.ThreadPoolExecutor(threads) as pool:
            dirs = [lazy.mnt / f"round{round_}-writer{n}" for n in range(threads)]
            written = sum(pool.map(write_new_files, dirs))
        assert lazy.faulted() is None and not lazy.crashed(), f"round {round_}"
        assert written == threads * per_thread
        lazy.unmount()  # a new LazyFS, its maps empty again
        lazy.mount()
