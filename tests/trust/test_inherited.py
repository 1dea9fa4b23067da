"""What envlock inherits is input, and untrusted (envlock/base/inherited.py): root run with
another user's HOME (`sudo -E`, a sudoers `env_keep`) must not read that user's uv
configuration, run their "managed" Pythons, nor create or read anything in their home.

Runs as root (as the suite does); the second user is created once (`useradd -m`).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from pathlib import Path

import pytest

from envlock.profile.read import load_profile
from tests.conftest import run_envlock
from tests.projects import write_seed_project

USER = "envlock-t39h"


@pytest.fixture(scope="module")
def other() -> pwd.struct_passwd:
    """A second local user, their home emptied of what an earlier run left."""
    try:
        found = pwd.getpwnam(USER)
    except KeyError:
        proc = subprocess.run(["useradd", "-m", USER], capture_output=True, text=True)
        assert proc.returncode in (0, 9), f"useradd -m {USER}: {proc.stderr}"  # 9: exists
        found = pwd.getpwnam(USER)
    for name in (".cache", ".config", ".local", "uvc", "canary"):
        path = Path(found.pw_dir) / name
        shutil.rmtree(path, ignore_errors=True)
        path.unlink(missing_ok=True)
    return found


def plant(other: pwd.struct_passwd, rel: str, text: str, mode: int = 0o644) -> Path:
    """A file of the other user's, in their home (with the directories above it)."""
    home = Path(other.pw_dir)
    path = home / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    for part in [path, *path.parents]:
        if part == home:
            break
        os.chown(part, other.pw_uid, other.pw_gid)
    return path


def roots_in(home: Path) -> list[str]:
    """What root made in `home` (a directory root created there is one the user can swap)."""
    return sorted(
        str(Path(top) / name)
        for top, dirs, files in os.walk(home)
        for name in dirs + files
        if os.lstat(Path(top) / name).st_uid == 0
    )


def test_a_foreign_home_gives_uv_no_config_no_python_and_root_nothing_there(
    tmp_path: Path, wheelhouse: Path, other: pwd.struct_passwd
) -> None:
    home = Path(other.pw_dir)
    canary = home / "canary"
    plant(other, ".config/uv/uv.toml", f'cache-dir = "{home}/uvc"\nlink-mode = "symlink"\n')
    # A "managed" CPython uv would run while it looks for interpreters.
    fake = f"#!/bin/sh\necho ran >> {canary}\nexit 1\n"
    for rel in ("bin/python3.11", "bin/python3", "bin/python"):
        plant(other, f".local/share/uv/python/cpython-3.11.99-linux-x86_64-gnu/{rel}", fake, 0o755)
    profile = write_seed_project(tmp_path / "proj", wheelhouse)
    env = {**os.environ, "HOME": str(home), "XDG_CACHE_HOME": f"{home}/.cache"}
    env.pop("UV_CACHE_DIR")  # so the configured cache-dir would be used
    for command in (("lock",), ("apply", "-y"), ("check",)):
        done = run_envlock(*command, profile, env=env)
        assert done.returncode == 0, (command, done.stdout, done.stderr)
    gen = Path(load_profile(profile).target.root) / "current"
    site = next(gen.resolve().glob("lib/python3.*/site-packages"))
    links = [str(p) for p in site.rglob("*") if p.is_symlink()]
    assert links == []  # uv read no uv.toml of theirs (link-mode = "symlink")
    assert not canary.exists()  # nothing of theirs ran
    assert not (home / "uvc").exists()
    assert roots_in(home) == []  # root made nothing in their home: no cache to swap


def test_inherited_directories_pass_only_when_they_are_ours(
    tmp_path: Path, other: pwd.struct_passwd
) -> None:
    from envlock.base.inherited import own_environment, uv_environment

    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    inherited = {
        "HOME": other.pw_dir,
        "XDG_CACHE_HOME": f"{other.pw_dir}/.cache",
        "XDG_CONFIG_HOME": str(mine),
        "XDG_DATA_HOME": str(open_dir),
        "UV_CACHE_DIR": str(mine / "uv"),
        "UV_PYTHON_INSTALL_DIR": f"{other.pw_dir}/py",
        "UV_INDEX_URL": "https://example.invalid/simple",
        "UV_INDEX_CORP_PASSWORD": "pw",
        "UV_PYTHON": "/home/x/python",
        "UV_CONFIG_FILE": "/home/x/uv.toml",
        "PIP_CONFIG_FILE": "/home/x/pip.conf",
        "VIRTUAL_ENV": "/home/x/venv",
        "TERM": "xterm",
    }
    env = own_environment(inherited)
    assert env["HOME"] == pwd.getpwuid(os.getuid()).pw_dir
    for dropped in ("XDG_CACHE_HOME", "XDG_DATA_HOME", "UV_PYTHON_INSTALL_DIR"):
        assert dropped not in env  # theirs, or writable by others
    for dropped in ("UV_PYTHON", "UV_CONFIG_FILE", "PIP_CONFIG_FILE"):
        assert dropped not in env  # not on the allow-list
    assert env["XDG_CONFIG_HOME"] == str(mine) and env["UV_CACHE_DIR"] == str(mine / "uv")
    assert env["UV_INDEX_URL"] and env["UV_INDEX_CORP_PASSWORD"] == "pw"
    assert env["TERM"] == "xterm"
    uv = uv_environment(inherited)
    assert uv["UV_NO_CONFIG"] == "1" and "VIRTUAL_ENV" not in uv
    # Our own HOME passes as it is.
    assert own_environment({"HOME": str(mine)})["HOME"] == str(mine)


def test_the_security_page_lists_every_variable_that_passes() -> None:
    from envlock.agent.core import OWN_DIRS, PASSED_UV_PIP

    repo = Path(__file__).resolve().parents[2]
    for page in (repo / "docs" / "security.md", repo / "README.md"):
        text = page.read_text()
        for name in sorted(PASSED_UV_PIP | {"UV_CACHE_DIR", "UV_PYTHON_INSTALL_DIR"}):
            assert f"`{name}`" in text, (page.name, name)
    security = (repo / "docs" / "security.md").read_text()
    assert all(f"`{name}`" in security for name in OWN_DIRS)


def test_uv_runs_no_interpreter_from_a_path_entry_of_another_user(
    tmp_path: Path, wheelhouse: Path, other: pwd.struct_passwd
) -> None:
    """`sudo -E` or a profile.d line puts another user's `~/bin` first on root's PATH: uv,
    asked for "3.11", ran each `python3.11`/`python3`/`python` it met there to learn its
    version. envlock gives uv the interpreter it chose (owned, by its real path) and nothing
    else, for the resolution and for the new generation."""
    home = Path(other.pw_dir)
    canary = home / "canary"
    fake = f'#!/bin/sh\necho ran "$@" >> {canary}\nexit 1\n'
    for name in ("python3.11", "python3", "python"):
        plant(other, f"bin/{name}", fake, 0o755)
    profile = write_seed_project(tmp_path / "proj", wheelhouse)
    env = {**os.environ, "PATH": f"{home}/bin:{os.environ['PATH']}"}
    for command in (("lock",), ("apply", "-y"), ("check",)):
        done = run_envlock(*command, profile, env=env)
        assert done.returncode == 0, (command, done.stdout, done.stderr)
        assert not canary.exists(), (command, canary.read_text())  # nothing of theirs ran
    python = (Path(load_profile(profile).target.root) / "current" / "bin" / "python").resolve()
    assert not python.is_relative_to(home)
    assert python.stat().st_uid == 0


def test_the_interpreter_chosen_is_owned_or_there_is_none(
    tmp_path: Path, other: pwd.struct_passwd
) -> None:
    from envlock.agent.core import owned_python

    real = Path(os.path.realpath(shutil.which("python3.11") or "/usr/bin/python3.11"))
    theirs = Path(other.pw_dir) / "py" / "bin"
    plant(other, "py/bin/python3.11", "#!/bin/sh\nexit 1\n", 0o755)
    ours = tmp_path / "ours"
    ours.mkdir()
    (ours / "python3.11").symlink_to(real)  # a link of ours to an owned interpreter
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "python3.11").symlink_to(theirs / "python3.11")  # ours, to theirs
    found, passed = owned_python("3.11", f"relative:{theirs}:{linked}:{ours}")
    assert found == str(real)
    assert [p.split(": ")[0] for p in passed] == [str(theirs / "python3.11")] * 2
    assert all("is owned by envlock-t39h" in p for p in passed)
    assert owned_python("3.11", f"{theirs}:{linked}") == (None, passed)


def test_pip_configuration_is_read_only_when_ours_and_through_the_gate(
    tmp_path: Path, other: pwd.struct_passwd, monkeypatch: pytest.MonkeyPatch
) -> None:
    """envlock reads pip's configuration for its find-links (uv does not): another user's
    `XDG_CONFIG_DIRS` entry would choose the wheels root installs, and a FIFO as one of the
    files blocked every resolution."""
    from envlock.lock.links import environment_find_links
    from tests.trust.test_readers import within_seconds

    plant(other, "xdg/pip/pip.conf", f"[global]\nfind-links = {other.pw_dir}/wheels\n")
    mine = tmp_path / "config"
    (mine / "pip").mkdir(parents=True)
    os.mkfifo(mine / "pip" / "pip.conf")
    ours = tmp_path / "etc-xdg"
    (ours / "pip").mkdir(parents=True)
    (ours / "pip" / "pip.conf").write_text("[global]\nfind-links = /srv/ours\n")
    for name in ("UV_FIND_LINKS", "PIP_FIND_LINKS", "PIP_CONFIG_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_DIRS", f"{other.pw_dir}/xdg:{ours}")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(mine))
    found = within_seconds(environment_find_links)
    assert isinstance(found, list)
    assert f"{other.pw_dir}/wheels" not in found  # theirs: not read
    assert "/srv/ours" in found  # ours: read, the FIFO beside it skipped at once
