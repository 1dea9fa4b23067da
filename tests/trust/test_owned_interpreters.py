"""Interpreters envlock runs are owned: the environment's python is started for envlock's
own work (agent, probe, launcher: base/pythons.py's START) only when its real file and every
parent are this user's or root's and writable by no one else. A generation whose python
links to another user's interpreter (an adopted venv, `rollback --to 0`) runs the target's
system python instead; their code never runs as root.

Runs as root (as the suite does); the second user is created once (`useradd -m`).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envlock.base.pythons import own_python
from envlock.targets.local import LocalTransport

USER = "envlock-t39p"
SYSTEM_PYTHON = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin") or sys.executable


@pytest.fixture(scope="module")
def other() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(USER)
    except KeyError:
        proc = subprocess.run(["useradd", "-m", USER], capture_output=True, text=True)
        assert proc.returncode in (0, 9), f"useradd -m {USER}: {proc.stderr}"  # 9: exists
        return pwd.getpwnam(USER)


def interpreter(place: Path, canary: Path) -> Path:
    """A "python" that leaves a canary, then runs the real one."""
    place.mkdir(parents=True, exist_ok=True)
    python = place / "python3"
    python.write_text(f'#!/bin/sh\necho ran > {canary}\nexec {SYSTEM_PYTHON} "$@"\n')
    python.chmod(0o755)
    return python


def root_using(tmp_path: Path, python: Path) -> Path:
    """A root whose current generation's python links to `python`."""
    root = tmp_path / "root"
    (root / "generations" / "1-abc" / "bin").mkdir(parents=True)
    (root / "generations" / "1-abc" / "bin" / "python").symlink_to(python)
    (root / "current").symlink_to("generations/1-abc")
    return root


def started(root: Path) -> str:
    argv = own_python(LocalTransport(), "print('agent ran')", root=str(root))
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_an_interpreter_of_ours_is_the_environments(tmp_path: Path) -> None:
    canary = tmp_path / "ran"
    root = root_using(tmp_path, interpreter(tmp_path / "ours" / "bin", canary))
    assert started(root) == "agent ran" and canary.exists()  # the test sees it run


def test_another_users_interpreter_never_runs(tmp_path: Path, other: pwd.struct_passwd) -> None:
    canary = tmp_path / "ran"
    place = Path(other.pw_dir) / "py39p" / "bin"
    shutil.rmtree(place.parent, ignore_errors=True)
    python = interpreter(place, canary)
    for path in (python, place, place.parent):
        os.chown(path, other.pw_uid, other.pw_gid)
    assert started(root_using(tmp_path, python)) == "agent ran"
    assert not canary.exists()


def test_an_interpreter_in_a_directory_others_may_write_never_runs(tmp_path: Path) -> None:
    canary = tmp_path / "ran"
    shared = tmp_path / "shared"
    python = interpreter(shared / "bin", canary)
    shared.chmod(0o777)  # a parent others may write: they can swap bin/
    assert started(root_using(tmp_path, python)) == "agent ran"
    assert not canary.exists()
