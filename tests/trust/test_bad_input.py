"""Bad input and hostile conditions: each a clear message, exit 2 or 3, nothing lost."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from envlock.schema import DOCUMENTS
from tests.conftest import Envlock
from tests.projects import write_seed_project


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A small real tmpfs (the suite runs as root, as CI does), unmounted afterwards: room
    for a root (envlock's uv, ~40 MB, is copied into it) and not much more."""
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=80m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.fail(f"this test needs root to mount a tmpfs: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def set_root(profile: Path, root: Path) -> None:
    text = profile.read_text()
    text = text.replace('root = "root"', f'root = "{root}"')
    text = text.replace('venv = "venv"', f'venv = "{root}/venv"')
    profile.write_text(text)


def test_missing_interpreter_for_the_pinned_python(
    tmp_path: Path, wheelhouse: Path, envlock: Envlock
) -> None:
    profile = write_seed_project(tmp_path, wheelhouse)
    # A Python no machine has: resolving for it needs no interpreter, building does.
    profile.write_text(profile.read_text().replace('version = "3.11"', 'version = "3.99"'))
    locked = envlock("lock", profile)
    assert locked.returncode == 0, locked.stderr
    result = envlock("apply", "-y", profile)
    assert result.returncode == 3
    assert "no Python 3.99 on the target" in result.stderr, result.stderr
    assert "[python] download = true" in result.stderr
    assert "uv python install 3.99" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "root" / "current").exists()
    assert list((tmp_path / "root" / "generations").iterdir()) == []


def test_unwritable_root(tmp_path: Path, wheelhouse: Path, envlock: Envlock, tmpfs: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    profile = write_seed_project(tmp_path / "p", wheelhouse)
    set_root(profile, tmpfs / "envs")
    assert envlock("lock", profile).returncode == 0
    result = envlock("apply", "-y", profile)
    assert result.returncode == 3
    assert "Read-only file system" in result.stderr
    assert "read-only filesystem: set [target] root" in result.stderr
    assert "Traceback" not in result.stderr


def test_full_disk_during_build_keeps_the_active_generation(
    tmp_path: Path, wheelhouse: Path, envlock: Envlock, tmpfs: Path
) -> None:
    profile = write_seed_project(tmp_path / "p", wheelhouse)
    set_root(profile, tmpfs / "envs")
    assert envlock("lock", profile).returncode == 0
    assert envlock("apply", "-y", profile).returncode == 0
    first = os.readlink(tmpfs / "envs" / "current")

    profile.write_text(profile.read_text().replace('"tinydep==1.0"', '"tinydep==0.9"'))
    assert envlock("lock", profile).returncode == 0
    free = os.statvfs(tmpfs).f_bavail * os.statvfs(tmpfs).f_frsize
    filler = tmpfs / "filler"
    with open(filler, "wb") as handle:  # leave ~48 KiB: a venv does not fit
        handle.write(b"\0" * max(free - 48 * 1024, 0))
    result = envlock("apply", "-y", profile)
    assert result.returncode == 3, result.stdout
    # The cause first (not uv's 230-character command line), and what to do.
    error = next(line for line in result.stderr.splitlines() if line.startswith("error:"))
    assert error.startswith("error: local: No space left on device: "), result.stderr
    assert "hint: the target's disk is full: run `envlock gc`" in result.stderr
    assert "Traceback" not in result.stderr
    assert os.readlink(tmpfs / "envs" / "current") == first
    ran = subprocess.run(
        [
            str(tmpfs / "envs" / "venv" / "bin" / "python"),
            "-c",
            "import tinydep; print(tinydep.VERSION)",
        ],
        capture_output=True,
        text=True,
    )
    assert ran.stdout.strip() == "1.0"
    # The failed generation was removed; with room again the apply completes.
    assert [p.name for p in (tmpfs / "envs" / "generations").iterdir()] == [first.split("/")[-1]]
    filler.unlink()
    assert envlock("apply", "-y", profile).returncode == 0
    assert envlock("check", profile).returncode == 0


def test_lock_whose_hashes_do_not_match_the_wheels(
    tmp_path: Path, wheelhouse: Path, envlock: Envlock
) -> None:
    profile = write_seed_project(tmp_path, wheelhouse)
    assert envlock("lock", profile).returncode == 0
    lock_file = tmp_path / "pylock.seed.toml"
    text = lock_file.read_text()
    block = text[text.index('name = "tinydep"') :]
    real = re.search(r'sha256 = "([0-9a-f]{64})"', block).group(1)  # type: ignore[union-attr]
    lock_file.write_text(text.replace(real, "0" * 64))
    result = envlock("apply", "-y", profile)
    assert result.returncode == 3
    assert "hash" in result.stderr.lower() and "tinydep" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "root" / "current").exists()


def test_existing_real_venv_directory_is_refused_and_kept(
    tmp_path: Path, wheelhouse: Path, envlock: Envlock
) -> None:
    profile = write_seed_project(tmp_path, wheelhouse)
    precious = tmp_path / "venv" / "precious.txt"
    precious.parent.mkdir()
    precious.write_text("a user's work")
    assert envlock("lock", profile).returncode == 0
    for command in (["plan"], ["apply", "-y"]):
        result = envlock(*command, profile)
        assert result.returncode == 2
        assert "exists and is a real directory" in result.stderr
        assert "never deletes" in result.stderr
    assert precious.read_text() == "a user's work"
    assert not (tmp_path / "root" / "current").exists()


def test_errors_are_one_message_and_verbose_shows_the_traceback(
    tmp_path: Path, envlock: Envlock
) -> None:
    missing = envlock("plan", tmp_path / "nope.toml")
    assert missing.returncode == 2
    assert missing.stderr.startswith("error:") and "no such file" in missing.stderr
    assert "Traceback" not in missing.stderr
    verbose = envlock("-v", "plan", tmp_path / "nope.toml")
    assert "Traceback" in verbose.stderr
    for late in (("plan", "-v", tmp_path / "nope.toml"), ("plan", tmp_path / "nope.toml", "-v")):
        after = envlock(*late)  # -v anywhere before `--`, not only before the command
        assert after.returncode == 2 and "Traceback" in after.stderr, after.stderr


def test_a_mistyped_command_gets_a_suggestion(envlock: Envlock) -> None:
    for typed in ("chek", "CHECK"):
        result = envlock(typed, "p.toml")
        assert result.returncode == 2
        assert f"No such command '{typed}': did you mean check?" in result.stderr
    unknown = envlock("xyzzy", "p.toml")
    assert "known commands: add, apply, bisect, cache, check," in unknown.stderr


def test_version_and_help_list_every_command(envlock: Envlock) -> None:
    assert envlock("--version").stdout.startswith("envlock, version ")
    help_text = envlock("--help").stdout
    for name in (
        "lock",
        "plan",
        "apply",
        "check",
        "run",
        "rollback",
        "generations",
        "gc",
        "snapshot",
        "diff",
        "inspect",
        "cache",
    ):
        assert re.search(rf"^\s+{name}\s", help_text, re.M), name


def test_check_json_schema_is_stable(tmp_path: Path, wheelhouse: Path, envlock: Envlock) -> None:
    profile = write_seed_project(tmp_path, wheelhouse)
    assert envlock("lock", profile).returncode == 0
    report = json.loads(envlock("check", "--json", profile).stdout)
    assert set(report) == {
        "schema",
        "profile",
        "lock_id",
        "judged_lock_id",  # added in schema 1: the lock judged (a held generation's)
        "hold",
        "generation",
        "deep",
        "files_checked",
        "clean",
        "drift",
        "warnings",
        "gpu",
    }
    assert (
        report["schema"] == DOCUMENTS["check"]
        and report["hold"] is None
        and report["clean"] is False
    )
    assert report["drift"][0]["kind"] == "no-environment"
    assert set(report["drift"][0]) == {"kind", "subject", "expected", "actual", "detail", "dist"}
