"""A lock travels: a wheel this machine's find-links held is recorded by the index URL that
serves the very same file, and the local file is only a cache at install (issue #10 item 8).

Real uv against a real index: PEP 503 pages over HTTP on loopback (tests/index_server.py)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from envlock.base.tomlread import tomllib
from envlock.lock.read import read_lock
from envlock.lock.sources import record_index_sources, with_local_copies
from tests.index_server import IndexServer
from tests.wheelhouse import build_wheel

TORCH = "torch-2.11.0+cpu-py3-none-any.whl"
FILELOCK = "filelock-3.20.0-py3-none-any.whl"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[IndexServer]:
    index = IndexServer(tmp_path / "served").start()
    yield index
    index.stop()


@pytest.fixture
def machine(tmp_path: Path, wheelhouse: Path) -> Path:
    """This machine's find-links directory (as pip's configuration names one), outside any
    profile's directory: CPU torch, its filelock, and sharedpkg."""
    links = tmp_path / "machine-wheels"
    links.mkdir()
    for name in (TORCH, FILELOCK):
        shutil.copyfile(wheelhouse / name, links / name)
    build_wheel(links, "sharedpkg", "1.0", files={"sharedpkg/__init__.py": "WHERE = 'same'\n"})
    return links


def write_profile(directory: Path, *, torch_index: str, index: str, packages: list[str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    profile = directory / "seed.toml"
    profile.write_text(
        "\n".join(
            [
                "[profile]",
                'name = "seed"',
                "[target]",
                'type = "local"',
                'root = "root"',
                'venv = "venv"',
                "[python]",
                'version = "3.11"',
                "[torch]",
                'version = "2.11.0"',
                'backend = "cpu"',
                f'index-url = "{torch_index}"',
                "[dependencies]",
                f"packages = {packages!r}".replace("'", '"'),
                f'index-url = "{index}"',
                "",
            ]
        )
    )
    return profile


def cli(
    *args: object, links: Path | None, cache: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """envlock as a user runs it on a machine whose pip configuration names `links` only."""
    env = {
        **os.environ,
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_FIND_LINKS": str(links or ""),
        "UV_FIND_LINKS": "",
    }
    if cache is not None:
        env["UV_CACHE_DIR"] = str(cache)  # a fresh uv cache: nothing downloaded before
    return subprocess.run(
        [sys.executable, "-m", "envlock", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
    )


def generation_lock(project: Path) -> str:
    (copy,) = (project / "root" / "generations").glob("*/.envlock/pylock.toml")
    return copy.read_text()


def test_a_wheel_the_index_also_serves_is_locked_by_its_index_url(
    tmp_path: Path, machine: Path, server: IndexServer
) -> None:
    torch_index = server.add("torch", [machine / TORCH])
    index = server.add("pypi", [machine / FILELOCK, machine / "sharedpkg-1.0-py3-none-any.whl"])
    project = tmp_path / "repo"
    profile = write_profile(project, torch_index=torch_index, index=index, packages=["sharedpkg"])

    locked = cli("lock", "--portable", "--json", profile, links=machine)
    assert locked.returncode == 0, locked.stderr
    assert '"machine_paths": []' in locked.stdout
    text = (project / "pylock.seed.toml").read_text()
    assert "file://" not in text and str(machine) not in text
    # One wheel each: the index's, with the local file's sha256.
    wheels = {p["name"]: p["wheels"] for p in tomllib.loads(text)["packages"]}
    assert wheels["torch"] == [
        {"url": f"{server.url}/torch/files/{TORCH}", "hashes": {"sha256": sha256(machine / TORCH)}}
    ]
    assert [w["url"] for w in wheels["filelock"]] == [f"{server.url}/pypi/files/{FILELOCK}"]
    assert [w["hashes"]["sha256"] for w in wheels["sharedpkg"]] == [
        sha256(machine / "sharedpkg-1.0-py3-none-any.whl")
    ]
    assert "/torch/simple/torch/" in server.requests  # asked, though find-links held torch

    # Another machine: the find-links directory is not there; the index serves every wheel.
    elsewhere = tmp_path / "elsewhere" / "repo"
    shutil.copytree(project, elsewhere)
    away = machine.rename(tmp_path / "gone")
    server.requests.clear()
    applied = cli("apply", "-y", elsewhere / "seed.toml", links=None, cache=tmp_path / "c1")
    assert applied.returncode == 0, applied.stderr
    assert f"/torch/files/{TORCH}" in server.requests
    assert "/pypi/files/sharedpkg-1.0-py3-none-any.whl" in server.requests
    assert "file://" not in generation_lock(elsewhere)

    # This machine, the index down: the local files are the cache the install uses.
    away.rename(machine)
    server.stop()
    applied = cli("apply", "-y", profile, links=machine, cache=tmp_path / "c2")
    assert applied.returncode == 0, applied.stderr
    installed = generation_lock(project)
    assert f'path = "{machine / TORCH}"' in installed
    assert f'path = "{machine / "sharedpkg-1.0-py3-none-any.whl"}"' in installed
    assert (project / "pylock.seed.toml").read_text() == text  # the lock itself names the index
    code = "import sharedpkg; print(sharedpkg.WHERE)"
    ran = cli("run", profile, "--", "python", "-c", code, links=machine)
    assert ran.stdout.strip() == "same", ran.stderr


def test_a_wheel_the_index_serves_with_other_bytes_stays_tied_to_this_machine(
    tmp_path: Path, machine: Path, server: IndexServer
) -> None:
    build_wheel(machine, "localonly", "1.0", files={"localonly/__init__.py": "X = 'here'\n"})
    other = build_wheel(tmp_path, "localonly", "1.0", files={"localonly/__init__.py": "X = 2\n"})
    torch_index = server.add("torch", [machine / TORCH])
    index = server.add("pypi", [machine / FILELOCK, other])
    project = tmp_path / "repo"
    profile = write_profile(project, torch_index=torch_index, index=index, packages=["localonly"])

    locked = cli("lock", profile, links=machine)
    assert locked.returncode == 0, locked.stderr
    assert "tied to this machine" in locked.stderr
    local = machine / "localonly-1.0-py3-none-any.whl"
    assert str(local) in locked.stderr
    lock = read_lock(project / "pylock.seed.toml")
    # Only the bytes used here: the index's other file of that name is not in the lock.
    assert [w["url"] for w in lock.packages["localonly"].wheels] == [f"file://{local}"]
    assert lock.packages["localonly"].sha256s == {sha256(local)}
    assert lock.machine_paths() == [str(local)]  # torch and filelock: by the index's URL
    refused = cli("lock", "--portable", profile, links=machine)
    assert refused.returncode == 2 and "tied to this machine" in refused.stderr


def test_an_offline_lock_asks_no_index(tmp_path: Path, machine: Path, server: IndexServer) -> None:
    torch_index = server.add("torch", [machine / TORCH])
    index = server.add("pypi", [machine / FILELOCK, machine / "sharedpkg-1.0-py3-none-any.whl"])
    project = tmp_path / "repo"
    profile = write_profile(project, torch_index=torch_index, index=index, packages=["sharedpkg"])
    profile.write_text(profile.read_text() + f'find-links = ["{machine}"]\noffline = true\n')
    locked = cli("lock", profile, links=None)
    assert locked.returncode == 0, locked.stderr
    assert server.requests == []
    assert "tied to this machine" in locked.stderr
    assert "http://" not in (project / "pylock.seed.toml").read_text()


# -- the pure part, on hand-written uv output ---------------------------------------------
HERE = Path("/project")
LOCAL = "file:///mnt/wheelhouse/a-1.0-py3-none-any.whl"
SERVED = "https://index.test/files/a-1.0-py3-none-any.whl"


def uv_lock(*wheels: tuple[str, str]) -> str:
    entries = ",\n".join(
        f'    {{ url = "{url}", hashes = {{ sha256 = "{sha}" }} }}' for url, sha in wheels
    )
    package = '[[packages]]\nname = "a"\nversion = "1.0"\n'
    return f'lock-version = "1.0"\n\n{package}wheels = [\n{entries},\n]\n'


def urls(text: str) -> list[str]:
    return [w.get("url") or w["path"] for w in tomllib.loads(text)["packages"][0]["wheels"]]


@pytest.mark.parametrize(
    ("wheels", "asked", "expected"),
    [
        # uv listed the index's copy beside the local one: same bytes, the index's URL
        ([(LOCAL, "s1"), (SERVED, "s1")], [], [SERVED]),
        # other bytes under that name: the local file stays, the index's is dropped
        ([(LOCAL, "s1"), (SERVED, "s2")], [], [LOCAL]),
        # uv did not consult the index that serves it: asked afterwards
        ([(LOCAL, "s1")], [(SERVED, "s1")], [SERVED]),
        ([(LOCAL, "s1")], [(SERVED, "s2")], [LOCAL]),
        ([(LOCAL, "s1")], [], [LOCAL]),
        # two find-links directories with the same file: the index's entry, once
        ([(LOCAL, "s1"), (LOCAL.replace("mnt", "srv"), "s1")], [(SERVED, "s1")], [SERVED]),
        # a wheel under the profile's directory is portable already
        ([("file:///project/w/a-1.0-py3-none-any.whl", "s1")], [(SERVED, "s1")], None),
    ],
)
def test_which_source_a_wheel_is_recorded_by(
    wheels: list[tuple[str, str]], asked: list[tuple[str, str]], expected: list[str] | None
) -> None:
    body = uv_lock(*wheels)
    answer = [{"url": url, "hashes": {"sha256": sha}} for url, sha in asked]
    result = record_index_sources(body, HERE, lambda name, version: answer)
    if expected is None:
        assert result == body
    else:
        assert urls(result) == expected
        assert tomllib.loads(result)["packages"][0]["wheels"][0]["hashes"]["sha256"] == "s1"


def test_a_lock_without_machine_files_is_left_as_uv_wrote_it() -> None:
    body = uv_lock((SERVED, "s1"))

    def never(name: str, version: str) -> list[dict[str, object]]:
        raise AssertionError("no index is asked")

    assert record_index_sources(body, HERE, never) == body


def test_an_index_wheel_installs_from_a_local_file_with_the_same_bytes(tmp_path: Path) -> None:
    links = tmp_path / "links"
    links.mkdir()
    (links / "a-1.0-py3-none-any.whl").write_bytes(b"the wheel")
    right = hashlib.sha256(b"the wheel").hexdigest()
    cached = with_local_copies(uv_lock((SERVED, right)), [str(links)])
    assert urls(cached) == [str(links / "a-1.0-py3-none-any.whl")]
    other = uv_lock((SERVED, "0" * 64))
    assert with_local_copies(other, [str(links)]) == other
    assert with_local_copies(other, [str(tmp_path / "missing"), "https://x.test/"]) == other
