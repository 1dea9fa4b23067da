"""What the crash tests share: a LazyFS built once per session, and one mounted per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.lazyfs import LazyFS, lazyfs_binary


@pytest.fixture(scope="session")
def lazyfs_bin() -> Path:
    return lazyfs_binary()


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
