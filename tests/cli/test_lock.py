"""Locks resolved for real by uv from the suite's wheelhouse: variants, determinism, staleness."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from envlock.base.tomlread import tomllib
from envlock.lock.links import wheel_in_find_links
from envlock.lock.read import Lock, read_lock, resolution_sha256, stale_reasons
from envlock.lock.resolve import envlock_table, resolver_input
from envlock.profile.read import load_profile
from tests.conftest import Envlock
from tests.projects import write_seed_project
from tests.wheelhouse import build_wheelhouse


@pytest.mark.parametrize(
    ("backend", "torch_version", "cuda_libs", "other_libs"),
    [
        ("cu128", "2.11.0+cu128", {"nvidia-cublas-cu12", "nvidia-cuda-runtime-cu12"}, "-cu13"),
        ("cu130", "2.11.0+cu130", {"nvidia-cublas-cu13", "nvidia-cuda-runtime-cu13"}, "-cu12"),
        ("cpu", "2.11.0+cpu", set(), "nvidia-"),
    ],
)
def test_variant_locks_pin_the_backend_build(
    tmp_path: Path,
    wheelhouse: Path,
    envlock: Envlock,
    backend: str,
    torch_version: str,
    cuda_libs: set[str],
    other_libs: str,
) -> None:
    profile = write_seed_project(tmp_path, wheelhouse, backend=backend)
    result = envlock("lock", "--json", profile)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["torch"] == torch_version
    lock = read_lock(profile.parent / "pylock.seed.toml")
    names = set(lock.packages)
    assert cuda_libs <= names
    assert not any(other_libs in name for name in names)
    torch = lock.packages["torch"]
    assert torch.version == torch_version
    wheel_file = wheelhouse / f"torch-{torch_version}-py3-none-any.whl"
    import hashlib

    assert torch.sha256s == {hashlib.sha256(wheel_file.read_bytes()).hexdigest()}
    meta = lock.meta
    assert meta["torch-backend"] == backend and meta["torch"] == torch_version
    assert meta["inputs-sha256"] == resolution_sha256(load_profile(profile))
    assert meta["python-version"] == "3.11"
    assert set(meta["scripts"]) == {"train.py"}
    # Every package carries a hash: the lock can be installed with verification.
    assert all(pkg.sha256s for pkg in lock.packages.values())


def test_same_inputs_give_a_byte_identical_lock(
    tmp_path: Path, wheelhouse: Path, envlock: Envlock
) -> None:
    profile = write_seed_project(tmp_path, wheelhouse)
    lock_file = profile.parent / "pylock.seed.toml"
    assert envlock("lock", profile).returncode == 0
    first = lock_file.read_bytes()
    again = envlock("lock", profile)
    assert "unchanged" in again.stdout
    assert lock_file.read_bytes() == first
    # A wheelhouse rebuilt from scratch gives the same bytes too (no timestamps anywhere).
    other = build_wheelhouse(tmp_path / "rebuilt")
    assert sorted(p.read_bytes() for p in other.glob("*.whl")) == sorted(
        p.read_bytes() for p in wheelhouse.glob("*.whl")
    )
    lock_file.unlink()
    assert envlock("lock", profile).returncode == 0
    assert lock_file.read_bytes() == first


def test_stale_lock_is_refused_with_what_to_do(
    tmp_path: Path, wheelhouse: Path, envlock: Envlock
) -> None:
    profile = write_seed_project(tmp_path, wheelhouse)
    missing = envlock("lock", "--check", profile)
    assert missing.returncode == 1 and "no lock" in missing.stdout
    assert envlock("lock", profile).returncode == 0
    assert envlock("lock", "--check", profile).returncode == 0

    (profile.parent / "scripts" / "train.py").write_text("print('changed')\n")
    stale = envlock("lock", "--check", "--json", profile)
    assert stale.returncode == 1
    assert json.loads(stale.stdout)["reasons"] == ["script train.py changed"]
    refused = envlock("plan", profile)
    assert refused.returncode == 2
    assert "stale lock" in refused.stderr and "envlock lock" in refused.stderr

    assert envlock("lock", profile).returncode == 0
    lock_before = (profile.parent / "pylock.seed.toml").read_bytes()
    # Comments, [env] and key order are not resolution inputs: the lock stays fresh.
    text = profile.read_text()
    profile.write_text("# a comment\n" + text + '\n[env]\nOMP_NUM_THREADS = "4"\n')
    prof = load_profile(profile)
    assert stale_reasons(prof, read_lock(prof.lock_path)) == []
    assert envlock("lock", "--check", profile).returncode == 0
    relocked = envlock("lock", profile)
    assert "unchanged" in relocked.stdout
    assert (profile.parent / "pylock.seed.toml").read_bytes() == lock_before
    # A new dependency is: the lock goes stale.
    profile.write_text(text.replace("[python]", '[python]\nplatform = "x86_64-manylinux_2_34"', 1))
    prof = load_profile(profile)
    assert stale_reasons(prof, read_lock(prof.lock_path)) == [
        "seed.toml: [python] platform changed since the lock was written"
    ]


def test_offline_lock_fails_clearly_when_a_wheel_is_missing(
    tmp_path: Path, wheelhouse: Path, envlock: Envlock
) -> None:
    profile = write_seed_project(tmp_path, wheelhouse, packages=("no-such-package==1.0",))
    result = envlock("lock", profile)
    assert result.returncode == 3
    assert "uv could not resolve" in result.stderr and "no-such-package" in result.stderr
    assert not (profile.parent / "pylock.seed.toml").exists()


def test_torch_comes_from_the_backend_index_unless_find_links_has_it(
    tmp_path: Path, wheelhouse: Path
) -> None:
    profile_path = write_seed_project(tmp_path, wheelhouse)
    text = profile_path.read_text().replace("offline = true", "offline = false")
    profile_path.write_text(text)
    profile = load_profile(profile_path)
    # The wheelhouse holds torch 2.11.0+cu128, so no index source is needed.
    assert wheel_in_find_links([str(wheelhouse)], "torch", "2.11.0+cu128")
    assert "[tool.uv.sources]" not in resolver_input(profile, [str(wheelhouse)])
    # Without it, torch (and only the torch family) is tied to the backend's index.
    pinned = resolver_input(profile, [])
    assert 'torch = { index = "torch-backend" }' in pinned
    assert 'url = "https://download.pytorch.org/whl/cu128"' in pinned
    assert "trainutil = " not in pinned.split("[tool.uv.sources]")[1]
    mirror = profile_path.read_text().replace(
        'backend = "cu128"', 'backend = "cu128"\nindex-url = "https://mirror.example/whl/cu128"'
    )
    profile_path.write_text(mirror)
    assert 'url = "https://mirror.example/whl/cu128"' in resolver_input(
        load_profile(profile_path), []
    )


def test_local_cpu_profile_resolves_here(tmp_path: Path, envlock: Envlock) -> None:
    """The README demo's profile resolves on this machine (CPU torch from find-links)."""
    source = Path(__file__).parents[2] / "profiles" / "local-cpu.toml"
    copy = tmp_path / "profiles" / "local-cpu.toml"
    copy.parent.mkdir()
    copy.write_text(source.read_text())
    result = envlock("lock", "--json", copy)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["torch"].endswith("+cpu")
    assert "numpy" in report["packages"]


def test_a_lock_travels_with_the_wheels_beside_its_profile(
    tmp_path: Path, wheelhouse: Path
) -> None:
    """Wheels under the profile's directory are recorded relative to the lock: the whole
    checkout moves to another place (another machine) and still locks, applies and runs."""
    import shutil
    import subprocess
    import sys

    project = tmp_path / "repo"
    shutil.copytree(wheelhouse, project / "wheels")
    profile = write_seed_project(project, project / "wheels")
    profile.write_text(profile.read_text().replace(str(project / "wheels"), "wheels"))
    # Only the profile's own find-links: none of this machine's.
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_FIND_LINKS": "", "UV_FIND_LINKS": ""}

    def envlock(*args: object, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "envlock", *map(str, args)],
            capture_output=True,
            text=True,
            env=env,
            cwd=cwd,
        )

    locked = envlock("lock", "--portable", "--json", profile)
    assert locked.returncode == 0, locked.stderr
    assert json.loads(locked.stdout)["machine_paths"] == []
    text = (project / "pylock.seed.toml").read_text()
    assert 'path = "wheels/torch-2.11.0+cu128-py3-none-any.whl"' in text
    assert "file://" not in text

    moved = tmp_path / "elsewhere" / "repo"
    shutil.copytree(project, moved)
    shutil.rmtree(project)
    again = moved / profile.name
    assert envlock("lock", "--check", again).returncode == 0  # still fresh after the move
    applied = envlock("apply", "-y", again)
    assert applied.returncode == 0, applied.stderr
    ran = envlock("run", again, "--", "python", "-c", "import tinydep; print(tinydep.VERSION)")
    assert ran.stdout.strip() == "1.0"


def test_a_lock_tied_to_this_machine_is_said_and_refused_when_portable(
    tmp_path: Path, wheelhouse: Path, envlock: Envlock
) -> None:
    profile = write_seed_project(tmp_path / "p", wheelhouse)  # wheels outside the profile dir
    locked = envlock("lock", profile)
    assert locked.returncode == 0
    assert "tied to this machine" in locked.stderr
    refused = envlock("lock", "--portable", profile)
    assert refused.returncode == 2 and str(wheelhouse) in refused.stderr


# Each resolution input, changed alone: (the name a stale lock gives, how the profile changes).
RESOLUTION_INPUT_EDITS = [
    ("[python] version", lambda t: t.replace('version = "3.11"', 'version = "3.12"', 1)),
    (
        "[python] platform",
        lambda t: t.replace("[python]", '[python]\nplatform = "x86_64-manylinux_2_34"', 1),
    ),
    ("[torch] version", lambda t: t.replace('version = "2.11.0"', 'version = "2.10.0"', 1)),
    ("[torch] backend", lambda t: t.replace('backend = "cu128"', 'backend = "cu130"', 1)),
    (
        "[torch] index-url",
        lambda t: t.replace("[torch]", '[torch]\nindex-url = "https://torch.invalid/cu128"', 1),
    ),
    ("[torch] packages", lambda t: t.replace("[torch]", '[torch]\npackages = ["triton"]', 1)),
    ("[dependencies] packages", lambda t: t.replace('"tinydep==1.0"', '"tinydep==2.0"', 1)),
    (
        "[dependencies] index-url",
        lambda t: t.replace(
            "[dependencies]", '[dependencies]\nindex-url = "https://mirror.invalid/simple"', 1
        ),
    ),
    (
        "[dependencies] extra-index-urls",
        lambda t: t.replace(
            "[dependencies]",
            '[dependencies]\nextra-index-urls = ["https://extra.invalid/simple"]',
            1,
        ),
    ),
    ("[dependencies] find-links", lambda t: t.replace("find-links = [", 'find-links = [".", ', 1)),
    ("[dependencies] offline", lambda t: t.replace("offline = true", "offline = false", 1)),
]


@pytest.mark.parametrize(
    ("named", "edit"), RESOLUTION_INPUT_EDITS, ids=[n for n, _ in RESOLUTION_INPUT_EDITS]
)
def test_each_resolution_input_stales_the_lock_and_is_named(
    tmp_path: Path, wheelhouse: Path, named: str, edit: Callable[[str], str]
) -> None:
    """The most common profile edits (cu128 → cu130, a new index) must stale the lock, and
    the reason must say which input changed. The lock's [tool.envlock] table is what
    `envlock lock` writes; no resolution is needed to judge staleness."""
    profile = write_seed_project(tmp_path, wheelhouse)
    text = profile.read_text()
    written = tomllib.loads(envlock_table(load_profile(profile)))["tool"]["envlock"]
    lock = Lock(path=tmp_path / "pylock.seed.toml", text="", packages={}, meta=written)
    assert stale_reasons(load_profile(profile), lock) == []
    changed = edit(text)
    assert changed != text, "the edit must change the profile"
    profile.write_text(changed)
    assert stale_reasons(load_profile(profile), lock) == [
        f"seed.toml: {named} changed since the lock was written"
    ]
