"""`envlock init`: starter profiles for each target, and `--from` an existing pip-built venv
(read from its files: nothing in it runs), locked and compared with what is installed."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from envlock.lock.read import read_lock
from envlock.profile.read import load_profile
from tests.conftest import Envlock
from tests.json_shapes import conforms


def tree_digest(root: Path) -> str:
    """Every file's path, mode and bytes under `root`, as one digest: "untouched" checked."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        stat = path.lstat()
        digest.update(f"{path.relative_to(root)}\0{stat.st_mode}\0".encode())
        if path.is_file() and not path.is_symlink():
            digest.update(path.read_bytes())
    return digest.hexdigest()


@pytest.fixture(scope="module")
def pip_venv(tmp_path_factory: pytest.TempPathFactory, wheelhouse: Path) -> Path:
    """A venv built by pip, the way people build them by hand: torch 2.11.0+cu128 and
    trainutil from a wheel directory, tinydep from a wheel file, an editable local project,
    and a `.pth` that would write a canary if anything ran the environment's site."""
    base = tmp_path_factory.mktemp("pipvenv")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index"]
    subprocess.run(
        [*pip, "--find-links", wheelhouse, "torch==2.11.0+cu128", "trainutil"], check=True
    )
    subprocess.run([*pip, wheelhouse / "tinydep-1.0-py3-none-any.whl"], check=True)
    project = base / "myproj"
    (project / "myproj").mkdir(parents=True)
    (project / "myproj" / "__init__.py").write_text("")
    (project / "setup.py").write_text(
        'from setuptools import setup\nsetup(name="myproj", version="0.1", packages=["myproj"])\n'
    )
    # Building the editable project needs setuptools from an index (build isolation).
    subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "-e", project], check=True
    )
    site = next((venv / "lib").glob("python*/site-packages"))
    canary = base / "canary"
    (site / "zz-canary.pth").write_text(f"import pathlib; pathlib.Path({str(canary)!r}).touch()\n")
    canary.unlink(missing_ok=True)  # pip's own runs above wrote it; only envlock's count
    return venv


def test_init_from_a_pip_venv_writes_the_profile_locks_and_compares(
    pip_venv: Path, wheelhouse: Path, tmp_path: Path, envlock: Envlock
) -> None:
    before = tree_digest(pip_venv)
    profile = tmp_path / "imported.toml"
    result = envlock(
        "init", profile, "--from", pip_venv, "--find-links", wheelhouse, "--offline", "--json"
    )
    assert result.returncode == 1, result.stderr  # an editable install cannot be carried
    report = json.loads(result.stdout)
    conforms("init-from", report)
    assert report["comparison"]["not_locked"] == {"myproj": "0.1"}
    assert report["comparison"]["moved"] == {} and report["comparison"]["added"] == {}
    assert "editable install" in report["left_out"]["myproj"]
    assert report["seeded"] == ["pip", "setuptools"]
    prof = load_profile(profile)
    assert prof.python_version == f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert prof.torch is not None
    assert (prof.torch.version, prof.torch.backend) == ("2.11.0", "cu128")
    # Top-level distributions only: tinydep is trainutil's; torch is [torch]'s.
    assert prof.dependencies.packages == ("trainutil==2.0",)
    assert prof.dependencies.find_links == (str(wheelhouse),)
    assert Path(prof.target.venv) != pip_venv  # the surveyed venv is left alone
    # The lock installs what is installed, the editable project and the venv's tooling aside.
    locked = read_lock(Path(report["lock_file"])).versions()
    assert locked["torch"] == "2.11.0+cu128" and locked["tinydep"] == "1.0"
    assert "myproj" not in locked and "pip" not in locked
    assert tree_digest(pip_venv) == before, "the surveyed venv was changed"
    assert not (pip_venv.parent / "canary").exists(), "code from the environment ran"


def test_init_from_an_exactly_reproducible_venv_exits_0(
    tmp_path: Path, wheelhouse: Path, envlock: Envlock
) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    subprocess.run(
        [
            *(sys.executable, "-m", "uv", "pip", "install", "-q", "--offline", "--no-index"),
            *("--python", str(venv / "bin" / "python"), "--find-links", wheelhouse),
            *("torch==2.11.0+cpu", "trainutil"),
        ],
        check=True,
    )
    profile = tmp_path / "exact.toml"
    result = envlock("init", profile, "--from", venv, "--find-links", wheelhouse, "--offline")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "the lock installs exactly the 4 installed packages" in result.stdout
    # The find-links are a directory of this machine: the lock says so, as `lock` does.
    assert "note: the lock is tied to this machine: 4 wheel(s) by a local path (" in result.stdout
    assert "`lock --portable` refuses that" in result.stdout
    prof = load_profile(profile)
    assert prof.torch is not None and prof.torch.backend == "cpu"
    # The round trip: the imported profile builds and runs; the original is untouched.
    before = tree_digest(venv)
    assert envlock("apply", "-y", profile).returncode == 0
    ran = envlock("run", profile, "--", "python", "-c", "import trainutil, torch; print('ok')")
    assert ran.returncode == 0 and ran.stdout.strip() == "ok", ran.stderr
    assert tree_digest(venv) == before


def test_init_from_refuses_what_it_cannot_import(
    pip_venv: Path, tmp_path: Path, envlock: Envlock
) -> None:
    profile = tmp_path / "p.toml"
    not_venv = envlock("init", profile, "--from", tmp_path)
    assert not_venv.returncode == 2 and "is not a venv (no pyvenv.cfg)" in not_venv.stderr
    other = envlock("init", profile, "--from", pip_venv, "--python", "3.9")
    assert other.returncode == 2 and "venv, not 3.9" in other.stderr
    assert not profile.exists()
    profile.write_text("# mine\n")
    exists = envlock("init", profile, "--from", pip_venv)
    assert exists.returncode == 2 and "init never overwrites a profile" in exists.stderr
    assert profile.read_text() == "# mine\n"


def test_init_from_a_generation_says_it_is_managed(
    tmp_path: Path, wheelhouse: Path, envlock: Envlock
) -> None:
    starter = tmp_path / "s.toml"
    made = envlock("init", starter, "--find-links", wheelhouse, "--offline")
    assert made.returncode == 0, made.stderr
    assert envlock("lock", starter).returncode == 0
    assert envlock("apply", "-y", starter).returncode == 0
    prof = load_profile(starter)
    result = envlock("init", tmp_path / "again.toml", "--from", prof.target.venv)
    assert result.returncode == 2 and "already managed by envlock" in result.stderr


@pytest.mark.parametrize(
    ("flags", "expect"),
    [
        ((), {"type": "local"}),
        (("--target", "ssh", "--host", "gpu1", "--user", "train"), {"type": "ssh"}),
        (
            ("--target", "proxmox-lxc", "--host", "pve1", "--node", "pve1", "--vmid", "200"),
            {"type": "proxmox-lxc"},
        ),
    ],
)
def test_init_writes_a_commented_valid_starter_for_each_target(
    tmp_path: Path, envlock: Envlock, flags: tuple[str, ...], expect: dict[str, str]
) -> None:
    profile = tmp_path / "train.toml"
    result = envlock("init", profile, *flags, "--torch", "2.11.0", "--backend", "cu128")
    assert result.returncode == 0, result.stderr
    assert "envlock lock" in result.stdout and "envlock apply" in result.stdout
    prof = load_profile(profile)
    assert prof.target.type == expect["type"] and prof.name == "train"
    assert prof.torch is not None and prof.torch.backend == "cu128"
    text = profile.read_text()
    tables = [line for line in text.splitlines() if line.startswith("[")]
    for table in tables:  # every table is explained by the comment line above it
        above = text.splitlines()[text.splitlines().index(table) - 1]
        assert above.startswith("#"), table
    again = envlock("init", profile, *flags)
    assert again.returncode == 2 and profile.read_text() == text


def test_a_local_starter_locks_applies_and_runs(
    tmp_path: Path, wheelhouse: Path, envlock: Envlock
) -> None:
    profile = tmp_path / "starter.toml"
    made = envlock(
        "init", profile, "--torch", "2.11.0", "--find-links", wheelhouse, "--offline", "--json"
    )
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["next"] == [
        f"envlock lock {profile}",
        f"envlock apply {profile}",
    ]
    assert envlock("lock", profile).returncode == 0
    assert envlock("apply", "-y", profile).returncode == 0
    assert envlock("check", profile).returncode == 0
    ran = envlock("run", profile, "--", "python", "-c", "import torch; print(torch.__version__)")
    assert ran.stdout.strip() == "2.11.0+cpu", ran.stderr


def test_bad_flags_name_what_to_do(tmp_path: Path, envlock: Envlock) -> None:
    profile = tmp_path / "p.toml"
    for flags, said in [
        (("--target", "ssh"), "--target ssh needs --host"),
        (("--target", "proxmox-lxc", "--host", "n"), "needs --vmid"),
        (("--backend", "cu128"), "--backend needs --torch"),
        (("--torch", "2.11.0", "--backend", "cuda12"), "[torch] backend"),
        (("--python", "3"), "[python] version"),
    ]:
        result = envlock("init", profile, *flags)
        assert result.returncode == 2 and said in result.stderr, (flags, result.stderr)
        assert not profile.exists()
