"""A lock records only sources its target can reach (issue #25 item 7). For a remote target
and for `offline = true`, resolution reads the profile's find-links and indexes only: the
find-links this machine's pip (or uv) is configured with are not inputs, so no path that
only this machine has lands in the lock, and `lock` names each local path the target must
also have. Real uv; a real index on loopback (tests/index_server.py) where one is needed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envlock.base.tomlread import tomllib
from envlock.lock.read import read_lock
from tests.index_server import IndexServer
from tests.wheelhouse import build_wheel

TORCH = "torch-2.11.0+cpu-py3-none-any.whl"
FILELOCK = "filelock-3.20.0-py3-none-any.whl"
SSH = ['type = "ssh"', 'host = "gpu1.example"', 'root = "/srv/envlock"']
LOCAL = ['type = "local"', 'root = "root"', 'venv = "venv"']


@pytest.fixture
def machine(tmp_path: Path, wheelhouse: Path) -> Path:
    """This machine's find-links directory, as its pip configuration names one: the same
    torch and filelock files as the team's wheelhouse, and a package only it has."""
    links = tmp_path / "machine-wheels"
    links.mkdir()
    for name in (TORCH, FILELOCK):
        shutil.copyfile(wheelhouse / name, links / name)
    build_wheel(links, "onlyhere", "1.0", files={"onlyhere/__init__.py": "X = 1\n"})
    return links


@pytest.fixture
def team(tmp_path: Path, wheelhouse: Path) -> Path:
    """The profile's own wheelhouse, outside its directory (a shared mount the target has)."""
    links = tmp_path / "team-wheels"
    links.mkdir()
    for name in (TORCH, FILELOCK):
        shutil.copyfile(wheelhouse / name, links / name)
    return links


def write_profile(
    directory: Path,
    target: list[str],
    dependencies: list[str],
    packages: tuple[str, ...] = (),
    torch_index: str | None = None,
) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    profile = directory / "seed.toml"
    lines = [
        "[profile]",
        'name = "seed"',
        "[target]",
        *target,
        "[python]",
        'version = "3.11"',
        "[torch]",
        'version = "2.11.0"',
        'backend = "cpu"',
        *([f'index-url = "{torch_index}"'] if torch_index else []),
        "[dependencies]",
        f"packages = {json.dumps(list(packages))}",
        *dependencies,
    ]
    profile.write_text("\n".join(lines) + "\n")
    return profile


def offline(links: Path) -> list[str]:
    return [f"find-links = {json.dumps([str(links)])}", "offline = true"]


def bare() -> dict[str, str]:
    """The environment of a machine whose installers name no find-links."""
    return {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_FIND_LINKS": "", "UV_FIND_LINKS": ""}


def controller(how: str, links: Path, work: Path) -> dict[str, str]:
    """The environment of a machine whose installers are configured with `links`, one way."""
    env = bare()
    if how == "pip.conf":
        conf = work / "pip.conf"
        conf.write_text(f"[global]\nfind-links = {links}\n")
        env["PIP_CONFIG_FILE"] = str(conf)
    else:
        env[how] = str(links)
    return env


def cli(*args: object, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "envlock", *map(str, args)], capture_output=True, text=True, env=env
    )


def wheel_urls(profile: Path) -> dict[str, list[str]]:
    data = tomllib.loads((profile.parent / "pylock.seed.toml").read_text())
    return {
        p["name"]: [w.get("url") or w.get("path") for w in p["wheels"]] for p in data["packages"]
    }


@pytest.mark.parametrize("how", ["PIP_FIND_LINKS", "pip.conf", "UV_FIND_LINKS"])
@pytest.mark.parametrize("target", ["ssh", "local"])
def test_an_offline_or_remote_lock_names_only_the_profiles_wheelhouse(
    tmp_path: Path, machine: Path, team: Path, how: str, target: str
) -> None:
    """The issue's case: the same torch file in this machine's find-links and in the
    profile's wheelhouse. uv on the target takes a wheel's first URL: it must be one the
    target has."""
    profile = write_profile(tmp_path / "repo", SSH if target == "ssh" else LOCAL, offline(team))
    env = controller(how, machine, tmp_path)
    locked = cli("lock", "--json", profile, env=env)
    assert locked.returncode == 0, locked.stderr
    text = (profile.parent / "pylock.seed.toml").read_text()
    assert str(machine) not in text
    wheels = wheel_urls(profile)
    assert wheels["torch"] == [f"file://{team / TORCH}"]
    assert wheels["filelock"] == [f"file://{team / FILELOCK}"]
    # Each local path a remote target must also have is named, for people and for scripts
    # (a local target is this machine: it has them).
    remote = target == "ssh"
    assert json.loads(locked.stdout)["target_paths"] == ([str(team)] if remote else [])
    said = cli("lock", profile, env=env)
    assert (f"the target must also have: {team}" in said.stderr) is remote
    assert cli("lock", "--check", profile, env=env).returncode == 0


def test_a_package_only_this_machine_has_is_not_found_for_a_remote_target(
    tmp_path: Path, machine: Path, team: Path
) -> None:
    """Online, with an index: what only this machine's find-links hold is not resolved for
    an ssh target (its lock would name a path the target lacks), and the error says why."""
    server = IndexServer(tmp_path / "served").start()
    try:
        index = server.add("pypi", [team / FILELOCK, team / TORCH])
        deps = [f'index-url = "{index}"']
        remote = write_profile(tmp_path / "remote", SSH, deps, ("onlyhere",), index)
        env = controller("PIP_FIND_LINKS", machine, tmp_path)
        refused = cli("lock", remote, env=env)
        assert refused.returncode == 3, refused.stderr
        assert not (remote.parent / "pylock.seed.toml").exists()
        assert "onlyhere" in refused.stderr
        assert "find-links this machine's pip or uv is configured with" in refused.stderr
        # The same profile for this machine still finds it there (the target is here).
        local = write_profile(tmp_path / "local", LOCAL, deps, ("onlyhere",), index)
        here = cli("lock", "--json", local, env=env)
        assert here.returncode == 0, here.stderr
        assert read_lock(local.parent / "pylock.seed.toml").machine_paths() == [
            str(machine / "onlyhere-1.0-py3-none-any.whl")
        ]
        assert json.loads(here.stdout)["target_paths"] == []  # the target is this machine
    finally:
        server.stop()


def test_a_wheelhouse_beside_the_profile_is_named_where_the_target_reads_it(
    tmp_path: Path, team: Path
) -> None:
    """Wheels beside the profile are recorded relative to the lock (the lock travels), but a
    remote target installs them from the absolute path: that directory is named too."""
    repo = tmp_path / "repo"
    shutil.copytree(team, repo / "wheels")
    profile = write_profile(repo, SSH, offline(repo / "wheels"))
    locked = cli("lock", "--json", profile, env=bare())
    assert locked.returncode == 0, locked.stderr
    assert wheel_urls(profile)["torch"] == [f"wheels/{TORCH}"]
    assert json.loads(locked.stdout)["target_paths"] == [str((repo / "wheels").resolve())]


def test_uv_s_own_configuration_adds_no_source_to_a_lock(
    tmp_path: Path, machine: Path, team: Path
) -> None:
    """uv's own configuration (a uv.toml naming find-links, here through UV_CONFIG_FILE) is
    what envlock inherits, not what the profile declares: uv is told to ignore it
    (UV_NO_CONFIG; UV_CONFIG_FILE is not passed on), so the wheel only it names is never
    found, and no lock is written."""
    profile = write_profile(tmp_path / "repo", SSH, offline(team), ("onlyhere",))
    config = tmp_path / "uv.toml"
    config.write_text(f"[pip]\nfind-links = [{json.dumps(str(machine))}]\n")
    env = {**bare(), "UV_CONFIG_FILE": str(config)}
    refused = cli("lock", profile, env=env)
    assert refused.returncode == 3, refused.stderr
    assert "onlyhere was not found in the provided package locations" in refused.stderr
    assert str(machine / "onlyhere-1.0-py3-none-any.whl") not in refused.stderr
    assert not (profile.parent / "pylock.seed.toml").exists()
