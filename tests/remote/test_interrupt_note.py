"""Ctrl-C during a remote apply (issue #47): the note says what the target holds once its
agent stopped, asked over a new connection: the active generation, a half-built one or
none, or that the agent is still at work. An ssh target on the loopback sshd, whose root
is a directory here, so the test checks the note against the root itself."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tests.remote.fixtures import Node
from tests.remote.test_remote import cli, envlock_env, ssh_target, write_profile
from tests.support import ctrl_c_during_install
from tests.wheelhouse import build_wheel


def test_ctrl_c_during_a_remote_build_says_what_the_target_holds(
    tmp_path: Path, wheelhouse: Path, node_sshd: Node
) -> None:
    wheels = tmp_path / "wheels"
    shutil.copytree(wheelhouse, wheels)
    build_wheel(
        wheels, "bulkpkg", "1.0", files={f"bulkpkg/m{n}.py": "X = 1\n" for n in range(15000)}
    )
    root = tmp_path / "root"
    profile = write_profile(tmp_path / "p", wheels, ssh_target(root, tmp_path / "venv", node_sshd))
    assert cli("apply", "-y", profile).returncode == 0
    first = os.readlink(root / "current")
    profile.write_text(
        profile.read_text().replace('"tinydep==1.0"', '"tinydep==1.0", "bulkpkg==1.0"')
    )
    assert cli("lock", profile).returncode == 0

    # Ctrl-C as a terminal sends it: SIGINT to the whole process group (envlock and ssh).
    code, out, err = ctrl_c_during_install(profile, timeout=120, env=envlock_env())
    assert code == 130, out + err
    note = next(line for line in err.splitlines() if line.startswith("error: interrupted: "))
    assert "if one was left" not in note and "may still be finishing" not in note, note

    if "still at work under the root's lock" in note:  # the agent had not stopped in 5 s
        assert "a new `envlock apply` waits for it" in note
    else:
        left = [
            p.name
            for p in (root / "generations").iterdir()
            if not (p / ".envlock" / "generation.json").exists()
        ]
        now = os.readlink(root / "current")
        if now == first:
            assert note.startswith("error: interrupted: the active generation is untouched"), note
        else:
            assert f"switched to generation {Path(now).name} before it stopped" in note, note
        if left:
            assert f"the half-built {left[0]} is removed by the next `envlock apply`" in note
        else:
            assert note.endswith("no half-built generation was left"), note
    rerun = cli("apply", "-y", profile)
    assert rerun.returncode == 0, rerun.stderr
    assert cli("check", profile).returncode == 0
