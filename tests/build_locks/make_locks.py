"""Writes the locks tests/unit/test_build.py builds from, so that its build tests run
`uv pip sync` only and never uv's resolver (mutation testing maps every function a test
calls to it: the resolver's would otherwise get every slow build test).

Regenerate, from the repository root, after a change to the lock's format or to the wheels
`build_wheels` makes (test_the_checked_in_locks_are_what_resolution_writes says when):

    .venv/bin/python -m tests.build_locks.make_locks

Each lock names its wheels relative to itself (`wheels/…`), as `envlock lock` writes them:
no machine's path. The inputs' hashes are those of the directory it was made in; nothing
that builds from these locks reads them.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from envlock.lock.resolve import write_lock
from tests.unit.test_build import LOCKS, PROFILES, build_wheels, write_profile


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        base = Path(scratch)
        build_wheels(base / "wheels")
        for name, packages in PROFILES.items():
            profile = write_profile(base, base / "wheels", packages)
            lock, _ = write_lock(profile)
            (LOCKS / f"pylock.{name}.toml").write_text(lock.text)


if __name__ == "__main__":
    main()
