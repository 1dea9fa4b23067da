"""Every refusal of `apply --adopt`, by name (the agent's refuse_unadoptable, checked under
the root's lock before anything is written): a venv another user owns, one others may
write, one whose interpreter is another user's, one holding a FIFO, a device or a sparse
giant. Each case is one change to a venv that is otherwise adopted, so each refusal is seen
to be its own check's.

Runs as root (as the suite does); the second user is created once (`useradd -m`).
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from envlock.agent.adopt import refuse_unadoptable
from envlock.agent.core import AgentError

USER = "envlock-t39a"
BASE = os.path.realpath(sys.executable)


@pytest.fixture(scope="module")
def other() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(USER)
    except KeyError:
        proc = subprocess.run(["useradd", "-m", USER], capture_output=True, text=True)
        assert proc.returncode in (0, 9), f"useradd -m {USER}: {proc.stderr}"  # 9: exists
        return pwd.getpwnam(USER)


def make_venv(place: Path, python: str = BASE) -> Path:
    """A venv as `python -m venv` lays it out (its python a link to the base interpreter)."""
    venv = place / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text(
        f"home = {os.path.dirname(python)}\ninclude-system-site-packages = false\n"
        "version = 3.11.9\n"
    )
    for name in ("python", "python3", "python3.11"):
        (venv / "bin" / name).symlink_to(python)
    (venv / "lib" / "python3.11" / "site-packages" / "mod.py").write_text("X = 1\n")
    return venv


def refused(venv: Path) -> str:
    """refuse_unadoptable's message for `venv` ("" when it would be adopted)."""
    root = venv.parent / "root"
    (root / "generations").mkdir(parents=True, exist_ok=True)
    try:
        refuse_unadoptable(str(venv), str(root), str(root / "generations"), 0)
    except AgentError as exc:
        return str(exc)
    return ""


def foreign_python(other: pwd.struct_passwd, tmp: Path) -> str:
    """An interpreter another user owns (their copy of a Python, in their home)."""
    place = Path(other.pw_dir) / "py" / "bin"
    place.mkdir(parents=True, exist_ok=True)
    python = place / "python3.11"
    shutil.copyfile(BASE, python)
    python.chmod(0o755)
    for path in (python, place, place.parent):
        os.chown(path, other.pw_uid, other.pw_gid)
    return str(python)


def test_a_plain_venv_of_ours_is_adopted(tmp_path: Path) -> None:
    assert refused(make_venv(tmp_path)) == ""


def test_a_venv_another_user_owns_is_refused(tmp_path: Path, other: pwd.struct_passwd) -> None:
    venv = make_venv(tmp_path)
    os.chown(venv, other.pw_uid, other.pw_gid)
    message = refused(venv)
    assert f"refusing to adopt {venv}" in message and USER in message


def test_a_venv_others_may_write_is_refused(tmp_path: Path) -> None:
    venv = make_venv(tmp_path)
    venv.chmod(0o777)
    message = refused(venv)
    assert f"refusing to adopt {venv}" in message and "writable by others" in message


def test_a_venv_whose_interpreter_is_another_users_is_refused(
    tmp_path: Path, other: pwd.struct_passwd
) -> None:
    python = foreign_python(other, tmp_path)
    venv = make_venv(tmp_path, python)
    message = refused(venv)
    assert f"its interpreter {python} is not yours" in message and USER in message


def test_a_venv_whose_interpreter_others_may_write_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared" / "bin"
    shared.mkdir(parents=True)
    shared.chmod(0o777)
    python = shared / "python3.11"
    shutil.copyfile(BASE, python)
    python.chmod(0o755)
    venv = make_venv(tmp_path, str(python))
    assert f"its interpreter {python} is not yours" in refused(venv)


def fifo(path: Path) -> None:
    os.mkfifo(path)


def device(path: Path) -> None:
    os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 5))  # /dev/zero's numbers, here


def sparse_giant(path: Path) -> None:
    with open(path, "wb") as handle:
        handle.truncate(16 << 30)


@pytest.mark.parametrize(
    ("make", "what"),
    [(fifo, "a FIFO"), (device, "a character device"), (sparse_giant, "a sparse file")],
)
def test_a_venv_holding_a_special_file_is_refused_at_once(
    tmp_path: Path, make: Callable[[Path], None], what: str
) -> None:
    venv = make_venv(tmp_path)
    odd = venv / "lib" / "python3.11" / "site-packages" / "data.bin"
    make(odd)
    started = time.monotonic()
    message = refused(venv)
    assert f"{odd} is {what}" in message
    assert time.monotonic() - started < 5
