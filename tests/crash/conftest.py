"""What the crash tests share: a LazyFS built once per session, and one mounted per test;
strace, for the tests that follow envlock's syscalls."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.lazyfs import LazyFS, lazyfs_binary


@pytest.fixture(scope="session")
def lazyfs_bin() -> Path:
    return lazyfs_binary()


@pytest.fixture(scope="session")
def strace() -> str:
    found = shutil.which("strace")
    if found is None:
        pytest.fail("strace is missing: `make system-deps` installs it")
    return found


# A test here takes well under a minute; past this bound it hangs, on LazyFS or on a
# process stuck on the mount, and fails instead of holding the suite.
TEST_BOUND_S = 300


@pytest.fixture
def lazy(tmp_path: Path, lazyfs_bin: Path) -> Iterator[LazyFS]:
    fs = LazyFS(lazyfs_bin, tmp_path / "lazyfs")
    with fs.watchdog(TEST_BOUND_S):
        fs.mount()
        try:
            yield fs
        finally:
            fs.close()
