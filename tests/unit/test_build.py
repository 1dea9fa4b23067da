"""A lock resolved and a generation built and repaired in-process, with real uv, offline,
from one tiny wheel: `lock.resolve`/`write_lock` and the agent's build, re-sync and their
failures (no Python of that version, a wheel gone, startup code refused). About a second a
test: a venv of one pure-Python wheel. test_reconcile.py and test_converge.py prove the same
through the CLI with the suite's wheelhouse.

The build tests start from locks checked in under tests/build_locks/ (made by its
make_locks.py, kept true by test_the_checked_in_locks_are_what_resolution_writes): they run
`uv pip sync` and never uv's resolver, so mutation testing gives the resolver's functions
only the resolution tests here and in test_units_lock*.py, not every slow build.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import tomllib

from envlock.agent import apply as agent_apply
from envlock.agent.apply import apply, do_build, do_repair
from envlock.agent.core import GENERATION, LOCK_COPY, MANIFEST, AgentError
from envlock.base.uvbin import uv_path
from envlock.errors import LockError
from envlock.lock.read import Lock, lock_policy, read_lock
from envlock.lock.resolve import (
    NeedsBuild,
    ResolutionFailed,
    clean_damaged_cache,
    install_text_for,
    resolve,
    write_lock,
)
from envlock.profile.read import Profile, load_profile
from tests.projects import toml_list
from tests.wheelhouse import build_sdist, build_wheel

SITE = "lib/python3.11/site-packages"
LOCKS = Path(__file__).parents[1] / "build_locks"
# The checked-in locks: pylock.<name>.toml resolves these requirements from `build_wheels`.
PROFILES = {"tiny": ["tinypkg==1.0"], "startup": ["startup==1.0"], "two": ["toppkg==1.0"]}


def build_wheels(dest: Path) -> None:
    """The wheels every lock here names: byte-identical from run to run, so the hashes in
    the checked-in locks hold."""
    dest.mkdir()
    build_wheel(dest, "tinypkg", "1.0", files={"tinypkg/__init__.py": "VALUE = 1\n"})
    build_wheel(dest, "startup", "1.0", files={"startup.pth": "import os\n"})
    build_wheel(dest, "toppkg", "1.0", ["tinypkg==1.0"])


def write_profile(base: Path, wheels: Path, packages: list[str]) -> Profile:
    path = base / "tiny.toml"
    path.write_text(
        "\n".join(
            [
                "[profile]",
                'name = "tiny"',
                "[target]",
                'type = "local"',
                'root = "root"',
                'venv = "venv"',
                "[python]",
                'version = "3.11"',
                "[dependencies]",
                f"packages = {toml_list(packages)}",
                f"find-links = {toml_list([str(wheels)])}",
                "offline = true",
                "",
            ]
        )
    )
    return load_profile(path)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Profile, str]]:
    """A profile of one pure-Python wheel, and its lock as `envlock lock` writes it (the
    agent gets it as the target installs it: paths made absolute)."""
    base = tmp_path_factory.mktemp("tiny")
    wheels = base / "wheels"
    build_wheels(wheels)
    profile = write_profile(base, wheels, ["tinypkg==1.0"])
    lock, changed = write_lock(profile)
    assert changed and not write_lock(profile)[1]  # the same inputs: the same bytes
    yield profile, install_text_for(lock, profile)


@pytest.fixture(scope="module")
def locks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The checked-in locks as the target installs them (`Lock.install_text`: the paths
    relative to the lock made absolute), naming wheels built here: no resolution."""
    base = tmp_path_factory.mktemp("locks").resolve()
    build_wheels(base / "wheels")
    texts = {name: (LOCKS / f"pylock.{name}.toml").read_text() for name in PROFILES}
    assert all(text.count('path = "wheels/') >= 1 for text in texts.values())
    return {
        name: text.replace('path = "wheels/', f'path = "{base}/wheels/')
        for name, text in texts.items()
    }


@pytest.fixture
def far_zone(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The target's local time nine hours off UTC: what envlock records stays UTC."""
    monkeypatch.setenv("TZ", "UTC-9")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def request(root: Path, lock_text: str, *actions: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {
        "root": str(root),
        "venv": str(root.parent / "venv"),
        "profile": "tiny.toml",
        "uv": uv_path(),
        "python_version": "3.11",
        "cache_dir": str(root.parent / "cache"),
        "lock_text": lock_text,
        "lock_sha256": "f" * 64,
        "package_count": 1,
        "offline": True,
        "python_downloads": False,
        "build": [],
        "binary_only": ["tinypkg"],
        "pth_allowed": None,
        "wait": False,
        "actions": list(actions),
        **more,
    }


def build(name: str, number: int = 1) -> dict[str, Any]:
    return {"kind": "build", "description": f"build {name}", "name": name, "number": number}


def test_the_lock_names_the_wheel_by_its_path_beside_the_profile(
    tiny: tuple[Profile, str],
) -> None:
    profile, installed = tiny
    lock = read_lock(profile.lock_path)
    text = lock.text
    assert list(lock.packages) == ["tinypkg"] and lock.packages["tinypkg"].version == "1.0"
    assert 'path = "wheels/tinypkg-1.0-py3-none-any.whl"' in text
    assert text.rstrip().endswith("[tool.envlock.scripts]")
    wheel = profile.path.parent.resolve() / "wheels" / "tinypkg-1.0-py3-none-any.whl"
    assert f'path = "{wheel}"' in installed
    assert lock.meta["profile"] == "tiny" and lock.machine_paths() == []
    assert (lock.meta["torch-backend"], lock.meta["torch"]) == ("", "")  # no [torch]


def test_a_lock_is_offered_before_it_is_written_and_read_as_the_profile_s(
    tiny: tuple[Profile, str],
) -> None:
    profile, _ = tiny
    offered: list[Lock] = []
    lock, changed = write_lock(profile, accept=offered.append)
    assert not changed and offered == [lock]
    assert lock.policy == lock_policy(profile) and lock.policy.origin == "profile"

    def refuse(lock: Lock) -> None:
        raise LockError("not portable")

    profile.lock_path.write_text(profile.lock_path.read_text() + "# edited\n")
    with pytest.raises(LockError, match="not portable"):
        write_lock(profile, accept=refuse)
    assert profile.lock_path.read_text().endswith("# edited\n")  # nothing written
    assert write_lock(profile)[1] and "# edited" not in profile.lock_path.read_text()


def test_resolution_failures_say_what_uv_said_and_what_to_do(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    profile = write_profile(tmp_path, wheels, ["nosuchpkg==1.0"])
    with pytest.raises(ResolutionFailed) as info:
        resolve(profile)
    assert "uv could not resolve tiny.toml:" in info.value.message
    assert type(info.value) is ResolutionFailed and info.value.exit_code == 3  # not the profile's
    assert "nosuchpkg" in info.value.reason and "envlock-resolve" not in info.value.reason
    assert (info.value.hint or "").startswith(
        "check the package names and versions; is the index reachable?"
    )
    assert not profile.lock_path.exists()


def test_what_only_an_sdist_satisfies_needs_the_profile_changed(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    canary = tmp_path / "built"
    build_sdist(wheels, "slowpkg", "1.0", canary)
    build_wheel(wheels, "toppkg", "1.0", ["tinypkg==1.0"])
    build_wheel(wheels, "tinypkg", "1.0")
    with pytest.raises(NeedsBuild) as info:
        resolve(write_profile(tmp_path, wheels, ["slowpkg==1.0"]))
    assert info.value.exit_code == 2 and "slowpkg" in info.value.reason
    assert (info.value.hint or "").startswith("slowpkg has no wheel here and envlock builds")
    assert not canary.exists()  # its code never ran
    # What `envlock add` asks of uv goes to it as it is.
    body = resolve(write_profile(tmp_path, wheels, ["toppkg==1.0"]), extra_args=("--no-deps",))
    assert [p["name"] for p in tomllib.loads(body)["packages"]] == ["toppkg"]


def test_the_checked_in_locks_are_what_resolution_writes(
    tiny: tuple[Profile, str], tmp_path: Path
) -> None:
    """The build tests' locks stay the locks `envlock lock` writes today: on a change of
    format or wheels, regenerate them (`python -m tests.build_locks.make_locks`)."""
    profile, _ = tiny
    (tmp_path / "wheels").symlink_to(profile.path.parent / "wheels")

    def essence(text: str) -> dict[str, Any]:
        # Only the find-links directory's hash, and so the inputs' whole one, is this run's.
        data = tomllib.loads(text)
        envlock = data["tool"]["envlock"]
        del envlock["inputs-sha256"], envlock["inputs"]["[dependencies] find-links"]
        return data

    for name, packages in PROFILES.items():
        made = write_lock(write_profile(tmp_path, tmp_path / "wheels", packages))[0].text
        kept = (LOCKS / f"pylock.{name}.toml").read_text()
        assert essence(made) == essence(kept), f"pylock.{name}.toml: regenerate it"


def test_a_generation_is_built_switched_to_and_linked(
    locks: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str], far_zone: None
) -> None:
    text = locks["tiny"]
    root = tmp_path / "root"
    name = "1-" + "a" * 12
    agent_apply.FREED.clear()
    answer = apply(
        request(
            root,
            text,
            build(name),
            {"kind": "switch", "description": "switch", "name": name, "why": "apply"},
            {"kind": "link-venv", "description": "link"},
            # uv runs in the environment the request gives it (an index's credentials
            # travel there): here, a cache of the build's own.
            uv_env={"UV_CACHE_DIR": str(tmp_path / "build-cache")},
        )
    )
    assert answer["done"] == ["build", "switch", "link-venv"] and answer["current"] == name
    assert any("tinypkg" in p.name for p in (tmp_path / "build-cache").rglob("*"))
    gen = root / "generations" / name
    meta = json.loads((gen / GENERATION).read_text())
    assert (meta["number"], meta["lock_sha256"], meta["python_version"]) == (1, "f" * 64, "3.11")
    assert meta["files"] > 0 and meta["bytes"] >= meta["own_bytes"] > 0
    built = datetime.strptime(meta["built"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert abs(datetime.now(UTC) - built) < timedelta(minutes=5)
    assert (gen / GENERATION).read_text() == json.dumps(meta, sort_keys=True)  # stable bytes
    said = [
        line.removeprefix("envlock-progress: ") for line in capsys.readouterr().err.splitlines()
    ]
    live = [line for line in said if line.startswith("live: ")]  # a terminal's, in place
    assert live[0] == "live: installing: 0 of 1 packages in place"
    # The manifest's count, from its first file (a large generation's takes seconds).
    assert any(
        re.fullmatch(r"live: writing the manifest: 0 of \d+ files, 0 MB read", x) for x in live
    )
    assert [line for line in said if line not in live] == [
        f"build {name}",
        "creating venv for Python 3.11",
        "installing 1 packages from the lock",
        "writing the manifest",
        "switch",
        "link",
    ]
    assert (gen / LOCK_COPY).read_text() == text and (gen / MANIFEST).is_file()
    assert (gen / SITE / "tinypkg" / "__init__.py").read_text() == "VALUE = 1\n"
    assert "generation 1" in (gen / "bin" / "pip").read_text()
    assert os.readlink(tmp_path / "venv") == f"{root}/current"
    # Built already: a second build of the same generation changes nothing.
    before = (gen / GENERATION).read_text()
    do_build(request(root, text), build(name))
    assert (gen / GENERATION).read_text() == before
    assert capsys.readouterr().err == f"envlock-progress: generation {name} already built\n"


def test_a_half_built_generation_never_stays(locks: dict[str, str], tmp_path: Path) -> None:
    text = locks["tiny"]
    root = tmp_path / "root"
    name = "1-" + "b" * 12
    (root / "generations" / name / "leftover").mkdir(parents=True)  # a killed build's
    gone = text.replace("tinypkg-1.0-py3-none-any.whl", "tinypkg-1.0-py3-none-any.whl.gone")
    with pytest.raises(AgentError, match=r"uv pip sync failed \(exit \d+\)") as info:
        do_build(request(root, gone), build(name))
    assert info.value.kind == "command"
    assert not (root / "generations" / name).exists()


def test_a_missing_python_is_said_with_what_to_do(locks: dict[str, str], tmp_path: Path) -> None:
    text = locks["tiny"]
    root = tmp_path / "root"
    with pytest.raises(AgentError, match=r"no Python 3\.99 on the target: install") as info:
        do_build(request(root, text, python_version="3.99"), build("1-" + "c" * 12))
    assert info.value.kind == "python"
    head, uv_says = str(info.value).split("\n", 1)
    assert head == (
        "no Python 3.99 on the target: install Python 3.99 on the target (e.g. `uv python "
        "install 3.99` or the OS package python3.99) where root or you own it, or set [python] "
        "download = true to let uv fetch a managed CPython; uv says:"
    )
    # None on PATH: uv looked among the managed CPythons only (agent/core.py's owned_python).
    assert "managed installations" in uv_says, uv_says
    allowed = request(root, text, python_version="3.99", python_downloads=True, offline=False)
    with pytest.raises(AgentError) as info:
        do_build(allowed, build("1-" + "c" * 12))
    head, uv_says = str(info.value).split("\n", 1)
    assert "download = true" not in head
    assert head.startswith("no Python 3.99 on the target: install Python 3.99")
    assert head.endswith("; uv says:")
    # uv's own words, each line indented, four at most.
    lines = uv_says.split("\n")
    assert 0 < len(lines) <= 4 and all(line.startswith("  ") and line.strip() for line in lines)
    assert "3.99" in uv_says and "uv venv failed" not in uv_says


def test_a_patch_version_is_that_of_the_owned_interpreter_chosen(
    locks: dict[str, str], tmp_path: Path
) -> None:
    root = tmp_path / "root"
    with pytest.raises(AgentError, match=r"no Python 3\.11\.999 on the target") as info:
        do_build(request(root, locks["tiny"], python_version="3.11.999"), build("1-" + "d" * 12))
    assert "; the owned one on PATH is:\n  3.11." in str(info.value)
    assert not (root / "generations" / ("1-" + "d" * 12)).exists()


def test_startup_code_a_lock_may_not_install_removes_the_generation(
    locks: dict[str, str], tmp_path: Path
) -> None:
    text = locks["startup"]
    root = tmp_path / "root"
    name = "1-" + "d" * 12
    with pytest.raises(AgentError, match=r"startup \(startup\.pth\)") as info:
        do_build(request(root, text, pth_allowed=[]), build(name))
    assert info.value.kind == "refused" and not (root / "generations" / name).exists()


def test_a_repair_re_syncs_the_generation_to_its_lock(
    locks: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str], far_zone: None
) -> None:
    text = locks["tiny"]
    root = tmp_path / "root"
    name = "1-" + "e" * 12
    do_build(request(root, text), build(name))
    gen = root / "generations" / name
    module = gen / SITE / "tinypkg" / "__init__.py"
    module.unlink()  # replaced, not edited: the file is a hardlink into uv's cache
    module.write_text("VALUE = 'edited'\n")
    (gen / SITE / "stray.py").write_text("")
    (gen / "bin" / "pip").unlink()
    outside = tmp_path / "outside.txt"
    outside.write_text("kept")
    action = {
        "kind": "repair",
        "name": name,
        "reinstall": ["tinypkg", "notinthelock"],
        "remove": [f"{SITE}/stray.py", "../../../outside.txt"],
        "clean_cache": ["tinypkg"],  # as planned when a hardlinked file was edited
    }
    capsys.readouterr()
    # uv runs in the environment the request gives it: here, a cache of the repair's own.
    own = {"UV_CACHE_DIR": str(tmp_path / "repair-cache")}
    do_repair(request(root, text, uv_env=own), action)
    assert module.read_text() == "VALUE = 1\n"
    assert any("tinypkg" in p.name for p in (tmp_path / "repair-cache").rglob("*"))
    said = [line.removeprefix("envlock-progress: ") for line in capsys.readouterr().err.split("\n")]
    assert said[:2] == [
        "dropping tinypkg from uv's cache (a hardlinked file was edited)",
        f"re-syncing generation {name} to its lock",
    ]
    # The cache is cleaned in that environment too.
    only_clean = {"name": name, "reinstall": [], "remove": [], "clean_cache": ["tinypkg"]}
    do_repair(request(root, text, uv_env=own), only_clean)
    assert not any("tinypkg" in p.name for p in (tmp_path / "repair-cache").rglob("*"))
    assert not (gen / SITE / "stray.py").exists() and outside.read_text() == "kept"
    meta = json.loads((gen / GENERATION).read_text())
    assert meta["number"] == 1 and (gen / GENERATION).read_text() == json.dumps(
        meta, sort_keys=True
    )
    repaired = datetime.strptime(meta["repaired"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert abs(datetime.now(UTC) - repaired) < timedelta(minutes=5)
    assert "(profile tiny.toml, generation 1). To add" in (gen / "bin" / "pip").read_text()


def test_a_damaged_uv_cache_is_cleaned_once_and_the_sync_retried(
    locks: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = locks["two"]  # toppkg and the tinypkg it requires
    cache = tmp_path / "cache"  # this test's alone, given to uv as the request says
    root = tmp_path / "root"
    do_build(request(root, text, uv_env={"UV_CACHE_DIR": str(cache)}), build("1-" + "a" * 12))
    # What a crash leaves: uv's pointer to one unpacked wheel cut short.
    (cut,) = [p for p in cache.rglob("*.rev") if "toppkg" in str(p)]
    cut.write_bytes(b"")
    capsys.readouterr()
    damaged = request(root, text, uv_env={"UV_CACHE_DIR": str(cache)})
    do_build(damaged, build("2-" + "b" * 12))
    module = root / "generations" / ("2-" + "b" * 12) / SITE / "toppkg" / "__init__.py"
    assert module.is_file()
    # uv blames one package at a time: every package the lock names is cleaned.
    assert (
        "uv's cache holds damaged entries (toppkg; after a crash?): cleaning 2 package(s) "
        "and retrying"
    ) in capsys.readouterr().err
    # Damage that cleaning does not cure is said whole, with what to do.
    sha = re.search(r'toppkg-1.0-py3-none-any.whl", hashes = { sha256 = "([0-9a-f]{64})"', text)
    assert sha is not None
    with pytest.raises(AgentError) as info:
        bad = request(root, text.replace(sha.group(1), "0" * 64), uv_env=damaged["uv_env"])
        do_build(bad, build("3-" + "c" * 12))
    assert info.value.kind == "uv-cache"
    said = str(info.value)
    assert said.startswith(
        "uv's cache is still damaged after cleaning tinypkg, toppkg: clean it whole on the "
        "target (`uv cache clean`) and apply again\nuv pip sync failed (exit "
    )
    assert "Computed:" in said  # uv's own words follow
    assert not (root / "generations" / ("3-" + "c" * 12)).exists()


def test_the_resolver_cleans_what_uv_blames_from_its_cache(
    tiny: tuple[Profile, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    profile, _ = tiny
    cache = tmp_path / "cache"
    monkeypatch.setenv("UV_CACHE_DIR", str(cache))  # this test's alone
    resolve(profile)
    assert any("tinypkg" in p.name for p in cache.rglob("*"))
    assert clean_damaged_cache(
        profile, "Failed to read `tinypkg==1.0`: failed to fill whole buffer"
    )
    assert not any("tinypkg" in p.name for p in cache.rglob("*"))


def test_a_resolution_on_a_damaged_cache_cleans_it_and_resolves_again(
    tiny: tuple[Profile, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    profile, _ = tiny
    cache = tmp_path / "cache"
    monkeypatch.setenv("UV_CACHE_DIR", str(cache))  # this test's alone
    first = resolve(profile)
    cut = [p for p in cache.rglob("*") if p.is_file() and "tinypkg" in str(p)]
    assert cut
    for entry in cut:
        entry.write_bytes(b"")
    capsys.readouterr()
    assert resolve(profile) == first
    assert "resolving again" in capsys.readouterr().err


def test_a_lock_file_that_cannot_be_read_is_refused(tmp_path: Path) -> None:
    (tmp_path / "pylock.x.toml").mkdir()
    with pytest.raises(LockError, match="cannot read the lock"):
        read_lock(tmp_path / "pylock.x.toml")
    shutil.rmtree(tmp_path / "pylock.x.toml")
