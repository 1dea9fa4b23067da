"""Guarded installs (issue #14), through the real CLI with real uv, venvs and wheelhouses:
`envlock add` / `remove` keep the torch pin, say what an older release was chosen for,
refuse what would move torch, keep the profile's comments, and land in a new generation;
inside the environment, `pip install` is refused with the way to do it safely."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from envlock.base.uvbin import uv_path
from envlock.edits.changes import wheel_size
from envlock.errors import UsageError
from envlock.lock.read import LockedPackage, read_lock
from envlock.profile.edit import add_requirements, remove_requirements
from tests.conftest import Envlock
from tests.projects import torch_profile_text, write_seed_project
from tests.wheelhouse import build_wheel


def generations(profile: Path) -> list[str]:
    return sorted(p.name for p in (profile.parent / "root" / "generations").iterdir())


def locked(profile: Path) -> dict[str, str]:
    return read_lock(next(profile.parent.glob("pylock.*.toml"))).versions()


def applied(envlock: Envlock, profile: Path) -> Path:
    for step in (("lock",), ("apply", "-y")):
        result = envlock(*step, profile)
        assert result.returncode == 0, result.stdout + result.stderr
    return profile


def snapshot_files(project: Path) -> dict[str, bytes]:
    """The profile and lock bytes, and every file name beside them (no temp file left)."""
    return {p.name: p.read_bytes() for p in project.iterdir() if p.is_file()}


@pytest.fixture
def seed(tmp_path: Path, wheelhouse: Path, envlock: Envlock) -> Path:
    """torch 2.11.0+cu128 and tinydep 1.0, applied (generation 1)."""
    return applied(
        envlock, write_seed_project(tmp_path / "proj", wheelhouse, packages=("tinydep==1.0",))
    )


def pypi_profile(base: Path, wheelhouse: Path) -> Path:
    """torch 2.11.0 from PyPI (a CUDA 13.0 build, no label) and numpy, resolved offline."""
    base.mkdir(parents=True)
    profile = base / "ml.toml"
    profile.write_text(
        torch_profile_text(
            "ml",
            torch="2.11.0",
            backend="pypi",
            packages=("numpy",),
            find_links=(str(wheelhouse),),
            offline=True,
        )
    )
    return profile


# -- the profile edit itself (pure) ----------------------------------------------------------
COMMENTED = """# Training environment for the summarizer.
[profile]
name = "ml"   # pylock.ml.toml

[torch]
version = "2.11.0"
backend = "pypi"  # PyPI's CUDA 13.0 build

[dependencies]
# Keep tqdm pinned: 4.68 changed its API.
packages = [
    "numpy",          # arrays
    "tqdm==4.67.1",   # see above
]
offline = true
"""


def test_add_appends_one_line_and_remove_restores_the_bytes() -> None:
    edit = add_requirements(COMMENTED, ["sglang"])
    assert edit.dependencies == ("sglang",) and not edit.touches_torch
    lines, new_lines = COMMENTED.splitlines(), edit.text.splitlines()
    assert new_lines == [*lines[:13], '    "sglang",', *lines[13:]]
    assert remove_requirements(edit.text, ["SGLang"]).text == COMMENTED


def test_add_replaces_a_listed_package_in_place_and_routes_torch_family() -> None:
    edit = add_requirements(COMMENTED, ["tqdm==4.66.0", "triton"])
    assert '    "tqdm==4.66.0",   # see above' in edit.text.splitlines()
    assert edit.torch_packages == ("triton",)
    assert 'backend = "pypi"  # PyPI\'s CUDA 13.0 build\npackages = ["triton"]' in edit.text
    assert add_requirements(COMMENTED, ["numpy"]).text == COMMENTED  # already listed


def test_add_and_remove_say_what_they_change_and_never_drop_a_constraint() -> None:
    text = COMMENTED.replace("tqdm==4.67.1", "tqdm>=4.66")
    kept = add_requirements(text, ["tqdm"])
    assert kept.text == text and kept.kept == ("tqdm: already listed as tqdm>=4.66",)
    assert add_requirements(text, ["tqdm >= 4.66"]).text == text  # the same, spelt apart
    moved = add_requirements(text, ["tqdm>=4.70", "numpy"])
    assert moved.dependencies == ("tqdm>=4.66 → tqdm>=4.70",)
    assert moved.kept == ("numpy: already listed as numpy",)
    assert '    "tqdm>=4.70",   # see above' in moved.text.splitlines()
    assert remove_requirements(text, ["TQDM"]).dependencies == ("tqdm>=4.66",)


def test_edits_refuse_torch_and_unknown_names() -> None:
    with pytest.raises(UsageError, match="torch pin is never moved"):
        add_requirements(COMMENTED, ["torch==2.14.1"])
    with pytest.raises(UsageError, match="torch cannot be removed"):
        remove_requirements(COMMENTED, ["torch"])
    with pytest.raises(UsageError, match="not in \\[dependencies\\] packages"):
        remove_requirements(COMMENTED, ["filelock"])
    with pytest.raises(UsageError, match="not a requirement"):
        add_requirements(COMMENTED, ["sglang>>1"])


def test_wheel_sizes_come_from_the_lock_or_the_local_file(tmp_path: Path) -> None:
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "a-1-py3-none-any.whl").write_bytes(b"x" * 700)
    relative = LockedPackage("a", "1", ({"path": "wheels/a-1-py3-none-any.whl"},))
    assert wheel_size(relative, tmp_path) == 700
    url = (tmp_path / "wheels" / "a-1-py3-none-any.whl").as_uri()
    assert wheel_size(LockedPackage("a", "1", ({"url": url},)), Path("/")) == 700
    recorded = ({"url": "https://x/a.whl", "size": 5}, {"url": "https://x/b.whl", "size": 9})
    assert wheel_size(LockedPackage("a", "1", recorded), tmp_path) == 9
    assert wheel_size(LockedPackage("a", "1", ({"url": "https://x/a.whl"},)), tmp_path) is None


# -- add and rollback ---------------------------------------------------------------------
def test_add_a_compatible_package_builds_a_new_generation_rollback_restores(
    seed: Path, envlock: Envlock
) -> None:
    project = seed.parent
    (first,) = generations(seed)
    first_lock = (project / "root" / "generations" / first / ".envlock" / "pylock.toml").read_text()

    added = envlock("add", "-y", seed, "trainutil")
    assert added.returncode == 0, added.stdout + added.stderr
    assert "+ [dependencies] packages: trainutil" in added.stdout
    assert "torch build: unchanged (torch 2.11.0+cu128)" in added.stdout
    assert "packages added" in added.stdout and "+ trainutil 2.0 (" in added.stdout
    assert '"trainutil"' in seed.read_text() and locked(seed)["trainutil"] == "2.0"
    assert len(generations(seed)) == 2
    # The previous generation is intact: its own lock, and check is clean on the new one.
    gen1 = project / "root" / "generations" / first
    assert (gen1 / ".envlock" / "pylock.toml").read_text() == first_lock
    assert envlock("check", seed).returncode == 0
    ran = envlock("run", seed, "--", "python", "-c", "import trainutil; print(trainutil.NAME)")
    assert ran.stdout.strip() == "trainutil", ran.stderr

    rolled = envlock("rollback", seed)
    assert rolled.returncode == 0, rolled.stderr
    assert os.readlink(project / "root" / "current").endswith(first)
    gone = envlock("run", seed, "--", "python", "-c", "import trainutil")
    assert gone.returncode != 0 and "No module named 'trainutil'" in gone.stderr


def test_remove_takes_a_package_out_in_a_generation_of_its_own(
    tmp_path: Path, wheelhouse: Path, envlock: Envlock
) -> None:
    profile = applied(envlock, write_seed_project(tmp_path / "proj", wheelhouse))
    removed = envlock("remove", "-y", profile, "trainutil")
    assert removed.returncode == 0, removed.stdout + removed.stderr
    assert "- [dependencies] packages: trainutil" in removed.stdout
    assert "- trainutil 2.0" in removed.stdout
    assert "trainutil" not in locked(profile) and locked(profile)["tinydep"] == "1.0"
    assert len(generations(profile)) == 2

    torch = envlock("remove", profile, "torch")
    assert torch.returncode == 2 and "torch cannot be removed" in torch.stderr


# -- the polluter ---------------------------------------------------------------------------
def test_add_sglang_keeps_torch_and_says_which_release_and_why(
    tmp_path: Path, pypi_wheelhouse: Path, envlock: Envlock
) -> None:
    profile = applied(envlock, pypi_profile(tmp_path / "proj", pypi_wheelhouse))
    added = envlock("add", "-y", profile, "sglang")
    assert added.returncode == 0, added.stdout + added.stderr
    assert (
        "sglang resolved to 0.5.2, the newest release compatible with torch 2.11.0 "
        "(the newest, 0.5.23, needs torch 2.14.1)"
    ) in added.stdout
    assert "torch build: unchanged (torch 2.11.0)" in added.stdout
    versions = locked(profile)
    assert versions["sglang"] == "0.5.2" and versions["torch"] == "2.11.0"
    assert "nvidia-cutlass-dsl-libs-cu12" not in versions
    assert len(generations(profile)) == 2
    probe = "import torch; print(torch.__version__)"
    assert envlock("run", profile, "--", "python", "-c", probe).stdout.strip() == "2.11.0+cu130"
    # An exact pin of the newest: refused for what the pin needs, not for every release.
    pinned = envlock("add", "-y", profile, "sglang==0.5.23")
    assert pinned.returncode == 1, pinned.stdout + pinned.stderr
    assert pinned.stderr.startswith(
        "error: sglang==0.5.23 needs torch 2.14.1; 0.5.2 works with the pinned torch (the lock's)"
    ), pinned.stderr
    assert "no release of sglang works" not in pinned.stderr
    assert locked(profile)["sglang"] == "0.5.2" and len(generations(profile)) == 2


def test_add_sglang_with_no_compatible_release_is_refused_and_writes_nothing(
    tmp_path: Path, pypi_wheelhouse: Path, envlock: Envlock
) -> None:
    only_new = tmp_path / "wheels"
    shutil.copytree(pypi_wheelhouse, only_new)
    (old,) = only_new.glob("sglang-0.5.2-*.whl")
    old.unlink()
    profile = applied(envlock, pypi_profile(tmp_path / "proj", only_new))
    before = snapshot_files(profile.parent)

    for extra in ((), ("--dry-run",), ("--allow-torch-change",)):
        refused = envlock("add", "-y", *extra, profile, "sglang")
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert "no release of sglang works with torch 2.11.0" in refused.stderr
        assert "the newest (sglang 0.5.23) needs torch 2.14.1" in refused.stderr
        assert "sglang depend on torch==2.14.1" in refused.stderr  # uv's own reason
        assert snapshot_files(profile.parent) == before
    pinned = envlock("add", "-y", profile, "sglang==0.5.23")
    assert pinned.returncode == 1 and snapshot_files(profile.parent) == before
    assert "error: sglang==0.5.23 needs torch 2.14.1; the profile pins torch 2.11.0" in (
        pinned.stderr
    )
    assert len(generations(profile)) == 1


# -- torch's own packages ----------------------------------------------------------------
def test_a_torch_cuda_library_is_refused_unless_allowed(seed: Path, envlock: Envlock) -> None:
    before = snapshot_files(seed.parent)
    refused = envlock("add", "-y", seed, "nvidia-cublas-cu13==13.0.2.14")
    assert refused.returncode == 1
    assert (
        "refusing to move torch's own packages (nvidia-cublas-cu13: — → 13.0.2.14) without "
        "--allow-torch-change: they ship with torch's build, and another version of them can "
        "break torch — even when torch itself stays, as here (torch 2.11.0+cu128, unchanged "
        "above)"
    ) in refused.stderr
    assert "hint: to accept it, run the same command with --allow-torch-change" in refused.stderr
    assert "CUDA libraries" in refused.stdout and "+ nvidia-cublas-cu13 13.0.2.14" in (
        refused.stdout
    )
    assert snapshot_files(seed.parent) == before

    allowed = envlock("add", "-y", "--allow-torch-change", seed, "nvidia-cublas-cu13==13.0.2.14")
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    assert locked(seed)["nvidia-cublas-cu13"] == "13.0.2.14"
    assert len(generations(seed)) == 2


def test_torch_packages_edits_need_the_flag_even_when_the_lock_installs_the_same(
    tmp_path: Path, pypi_wheelhouse: Path, envlock: Envlock
) -> None:
    profile = applied(envlock, pypi_profile(tmp_path / "proj", pypi_wheelhouse))
    refused = envlock("add", "-y", profile, "triton")
    assert refused.returncode == 1
    assert (
        "refusing to add triton without --allow-torch-change: triton is one of torch's own "
        "packages, released with torch, and envlock changes those only when asked — even when "
        "torch itself stays, as here (torch 2.11.0, unchanged above; triton 3.6.0 fits it)"
    ) in refused.stderr
    # torch requires triton already: only its marker changes in the lock.
    assert "no package is added, removed or moved to another version" in refused.stdout
    before = locked(profile)

    allowed = envlock("add", "-y", "--allow-torch-change", profile, "triton")
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    assert 'packages = ["triton"]' in profile.read_text()
    assert locked(profile) == before
    assert envlock("lock", "--check", profile).returncode == 0
    assert envlock("check", profile).returncode == 0


# -- the profile's layout, dry runs, confirmation ------------------------------------------
def test_a_commented_profile_keeps_every_byte_but_the_new_line(
    tmp_path: Path, pypi_wheelhouse: Path, envlock: Envlock
) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    profile = project / "ml.toml"
    text = COMMENTED.replace(
        "offline = true", f'find-links = ["{pypi_wheelhouse}"]\noffline = true'
    )
    text += '\n[target]\ntype = "local"   # this machine\nroot = "root"\nvenv = "venv"\n'
    text += '\n[python]\nversion = "3.11"\n'
    profile.write_text(text)
    applied(envlock, profile)

    added = envlock("add", "-y", profile, "requests")
    assert added.returncode == 0, added.stdout + added.stderr
    lines = text.splitlines(keepends=True)
    at = lines.index('    "tqdm==4.67.1",   # see above\n') + 1
    assert profile.read_text() == "".join([*lines[:at], '    "requests",\n', *lines[at:]])

    removed = envlock("remove", "-y", profile, "requests")
    assert removed.returncode == 0, removed.stdout + removed.stderr
    assert profile.read_text() == text


def test_dry_run_exit_codes_and_no_confirmation_without_a_terminal(
    seed: Path, envlock: Envlock
) -> None:
    before = snapshot_files(seed.parent)
    would = envlock("add", "--dry-run", seed, "trainutil")
    assert would.returncode == 1 and "dry run: nothing written" in would.stderr
    assert "+ trainutil 2.0" in would.stdout
    dropped = envlock("remove", "--dry-run", seed, "tinydep")
    assert dropped.returncode == 1
    assert "- [dependencies] packages: tinydep==1.0" in dropped.stdout
    same = envlock("add", "--dry-run", seed, "tinydep==1.0")
    assert same.returncode == 0 and "nothing to change" in same.stdout
    bare = envlock("add", seed, "tinydep")  # no -y, no terminal: nothing to ask
    assert bare.returncode == 0, bare.stdout + bare.stderr
    assert "tinydep: already listed as tinydep==1.0" in bare.stdout
    unasked = envlock("add", seed, "trainutil")
    assert unasked.returncode == 2 and "pass -y" in unasked.stderr
    assert snapshot_files(seed.parent) == before
    assert len(generations(seed)) == 1

    stale = seed.read_text().replace("tinydep==1.0", "tinydep==0.9")
    seed.write_text(stale)
    refused = envlock("add", "--dry-run", seed, "trainutil")
    assert refused.returncode == 2 and "stale lock" in refused.stderr


# -- the environment's own pip ------------------------------------------------------------
def test_pip_inside_the_environment_is_guarded(
    seed: Path, wheelhouse: Path, envlock: Envlock
) -> None:
    (gen,) = generations(seed)
    shim = seed.parent / "root" / "generations" / gen / "bin" / "pip"
    assert shim.read_text().startswith("#!/bin/sh\n")
    assert (shim.parent / "pip3").read_bytes() == shim.read_bytes()
    assert envlock("check", seed).returncode == 0  # the shims are the generation's own

    refused = envlock("run", seed, "--", "pip", "install", "trainutil")
    assert refused.returncode == 1
    assert (
        f"this environment is managed by envlock (profile {seed}, generation 1). "
        f"To add packages: `envlock add {seed} REQ…`"
    ) in refused.stderr
    assert "ENVLOCK_ALLOW_PIP=1 pip install …" in refused.stderr
    assert envlock("run", seed, "--", "pip3", "uninstall", "-y", "tinydep").returncode == 1
    # The `python -m pip` habit, with the generation's python started directly: the same.
    python = shim.parent / "python"
    habit = subprocess.run([python, "-m", "pip", "install", "six"], capture_output=True, text=True)
    assert habit.returncode == 1 and "this environment is managed by envlock" in habit.stderr
    asked = subprocess.run([python, "-m", "pip", "freeze"], capture_output=True, text=True)
    assert "tinydep==1.0" in asked.stdout.splitlines(), asked.stderr

    listed = envlock("run", seed, "--", "pip", "list", "--format", "json")
    assert listed.returncode == 0, listed.stderr
    assert {"name": "tinydep", "version": "1.0"} in json.loads(listed.stdout)
    frozen = envlock("run", seed, "--", "pip", "freeze")
    assert "tinydep==1.0" in frozen.stdout.splitlines()
    assert envlock("check", seed).returncode == 0

    allowed_env = {**os.environ, "ENVLOCK_ALLOW_PIP": "1"}
    install = ["pip", "install", "--offline", "--no-index", "--find-links", str(wheelhouse)]
    forced = envlock("run", seed, "--", *install, "trainutil", env=allowed_env)
    assert forced.returncode == 0, forced.stderr
    check = envlock("check", "--json", seed)
    assert check.returncode == 1
    drift = json.loads(check.stdout)["drift"]
    assert any(d["kind"] == "package-extra" and "trainutil" in d["subject"] for d in drift)

    removed = envlock(
        "run", "--allow-drift", seed, "--", "pip", "uninstall", "-y", "trainutil", env=allowed_env
    )
    assert removed.returncode == 0, removed.stderr
    assert envlock("check", seed).returncode == 0


def test_a_generation_needs_nothing_of_the_controller_s_checkout(
    tmp_path: Path, wheelhouse: Path, envlock: Envlock
) -> None:
    """pip runs the root's uv, and activate keeps the stable venv path: moving envlock's
    checkout (its uv) away, or a later gc, strands no generation and no shell."""
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    shutil.copy2(uv_path(), checkout / "uv")
    from_checkout = {**os.environ, "ENVLOCK_UV": str(checkout / "uv")}
    profile = write_seed_project(tmp_path / "proj", wheelhouse, packages=("tinydep==1.0",))
    for step in (("lock",), ("apply", "-y")):
        result = envlock(*step, profile, env=from_checkout)
        assert result.returncode == 0, result.stdout + result.stderr
    shutil.rmtree(checkout)  # the checkout moved or was re-created elsewhere

    (gen,) = (profile.parent / "root" / "generations").iterdir()
    assert str(checkout) not in (gen / "bin" / "pip").read_text()
    listed = subprocess.run(
        [gen / "bin" / "pip", "list", "--format", "json"], capture_output=True, text=True
    )
    assert listed.returncode == 0, listed.stderr
    assert {"name": "tinydep", "version": "1.0"} in json.loads(listed.stdout)

    venv = profile.parent / "venv"
    script = '. "$1/bin/activate" && echo "$VIRTUAL_ENV" && command -v python'
    shell = subprocess.run(
        ["bash", "-c", script, "-", str(venv)],
        capture_output=True,
        text=True,
    )
    assert shell.stdout.splitlines() == [str(venv), f"{venv}/bin/python"], shell.stderr


def test_adding_torchvision_says_why_it_is_refused_and_what_to_do(
    tmp_path: Path, pypi_wheelhouse: Path, envlock: Envlock
) -> None:
    """torch stays and torchvision resolves to the release that fits it: the refusal says
    it is refused for being torch's own package, not for moving torch (issue #47)."""
    wheels = tmp_path / "wheels"
    shutil.copytree(pypi_wheelhouse, wheels)
    build_wheel(wheels, "torchvision", "0.26.0", ["torch==2.11.0"])
    build_wheel(wheels, "torchvision", "0.29.0", ["torch==2.14.1"])
    profile = applied(envlock, pypi_profile(tmp_path / "proj", wheels))
    before = snapshot_files(profile.parent)
    refused = envlock("add", "-y", profile, "torchvision")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "torch build: unchanged (torch 2.11.0)" in refused.stdout
    assert "torchvision resolved to 0.26.0, the newest release compatible" in refused.stdout
    assert refused.stderr.startswith(
        "error: refusing to add torchvision without --allow-torch-change: torchvision is one "
        "of torch's own packages, released with torch, and envlock changes those only when "
        "asked — even when torch itself stays, as here (torch 2.11.0, unchanged above; "
        "torchvision 0.26.0 fits it)"
    ), refused.stderr
    assert "run the same command with --allow-torch-change" in refused.stderr
    assert snapshot_files(profile.parent) == before
    allowed = envlock("add", "-y", "--allow-torch-change", profile, "torchvision")
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    assert locked(profile)["torchvision"] == "0.26.0" and locked(profile)["torch"] == "2.11.0"
