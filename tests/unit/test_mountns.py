"""The race tests' private mount namespace (tests/mountns.py): the test and what it starts
see a /dev of their own, a regressed writer's rename over /dev/null lands there, and the
thread comes back to the host's namespace after, its /dev/null untouched."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

from tests import mountns


def test_a_rename_over_dev_null_in_a_race_test_never_reaches_the_host(tmp_path: Path) -> None:
    host = mountns.current()
    host_null = os.stat("/dev/null")
    with mountns.private_mounts(tmp_path / "staging") as private:
        assert private, "the kernel refused a mount namespace (the suite runs as root)"
        assert mountns.current() != host
        seen = subprocess.run(  # what the test starts is inside too, and can use /dev/null
            ["sh", "-c", "readlink /proc/self/ns/mnt; echo hidden >/dev/null"],
            capture_output=True,
            text=True,
            check=True,
        )
        assert seen.stdout == f"mnt:[{mountns.current()}]\n"
        assert os.stat("/dev/null").st_ino != host_null.st_ino
        # What a regressed atomic write does when a planted link names /dev/null.
        (tmp_path / "link").symlink_to("/dev/null")
        temp = Path("/dev/.null.regressed.tmp")
        temp.write_text("a regressed writer's bytes")
        os.rename(temp, os.path.realpath(tmp_path / "link"))
        assert stat.S_ISREG(os.lstat("/dev/null").st_mode)
    assert mountns.current() == host
    after = os.lstat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and after.st_ino == host_null.st_ino
    assert not os.path.lexists("/dev/.null.regressed.tmp")
