"""A command that fails leaves what it found, or says exactly what it changed: `lock
--portable` refuses before writing, `add -y`/`remove -y` put the profile and lock back when
the apply fails (a real full disk), and a snapshot already in a directory (a run's own, with
its config and argv) is not overwritten without `--force`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from envlock.commands.undo import Written, undone_on_failure
from envlock.errors import EXIT_DRIFT, EXIT_FAILED, EXIT_USAGE, OperationError
from tests.conftest import Envlock
from tests.projects import write_seed_project
from tests.trust.test_bad_input import set_root, tmpfs  # noqa: F401  (tmpfs: a fixture)


def files_beside(profile: Path) -> dict[str, bytes]:
    """Every file in the profile's directory by name: no temp file left, bytes unchanged."""
    return {p.name: p.read_bytes() for p in profile.parent.iterdir() if p.is_file()}


def test_lock_portable_refuses_before_writing(
    tmp_path: Path, wheelhouse: Path, envlock: Envlock
) -> None:
    # The wheelhouse lies outside the profile's directory: the lock would name its paths.
    profile = write_seed_project(tmp_path / "proj", wheelhouse)
    refused = envlock("lock", "--portable", profile)
    assert refused.returncode == EXIT_USAGE, refused.stderr
    assert not (profile.parent / "pylock.seed.toml").exists()
    assert envlock("lock", "--check", profile).returncode == EXIT_DRIFT
    assert "tied to this machine" in refused.stderr and "was not written" in refused.stderr

    # A lock that exists stays the one it was, and --check still calls it stale.
    assert envlock("lock", profile).returncode == 0
    profile.write_text(profile.read_text().replace('"tinydep==1.0"', '"tinydep==0.9"'))
    before = files_beside(profile)
    again = envlock("lock", "--portable", profile)
    assert again.returncode == EXIT_USAGE, again.stderr
    assert files_beside(profile) == before
    check = envlock("lock", "--check", profile)
    assert check.returncode == EXIT_DRIFT and "is stale" in check.stdout


def fill(mount: Path) -> Path:
    """Leave ~48 KiB free on the tmpfs: no venv fits (the full-disk test's recipe)."""
    stat = os.statvfs(mount)
    filler = mount / "filler"
    with open(filler, "wb") as handle:
        handle.write(b"\0" * max(stat.f_bavail * stat.f_frsize - 48 * 1024, 0))
    return filler


@pytest.mark.parametrize(
    ("verb", "name"), [("add", "tinydep==0.9"), ("remove", "trainutil")], ids=["add", "remove"]
)
def test_a_failed_apply_puts_the_profile_and_lock_back(
    tmp_path: Path,
    wheelhouse: Path,
    envlock: Envlock,
    tmpfs: Path,  # noqa: F811  (the fixture imported above)
    verb: str,
    name: str,
) -> None:
    profile = write_seed_project(tmp_path / "p", wheelhouse)
    set_root(profile, tmpfs / "envs")
    for step in (("lock",), ("apply", "-y")):
        assert envlock(*step, profile).returncode == 0
    current = os.readlink(tmpfs / "envs" / "current")
    before = files_beside(profile)

    filler = fill(tmpfs)
    failed = envlock(verb, "-y", profile, name)
    assert failed.returncode == EXIT_FAILED, failed.stdout + failed.stderr
    assert "No space left on device" in failed.stderr or "os error 28" in failed.stderr
    assert files_beside(profile) == before
    assert os.readlink(tmpfs / "envs" / "current") == current
    assert envlock("check", profile).returncode == 0  # the profile matches the root again
    # Said under the error: what was put back, and how to carry the change out later.
    assert "seed.toml and pylock.seed.toml are back as before" in failed.stderr
    assert f"`envlock check {profile}` says whether the root still matches" in failed.stderr
    assert f"run `envlock {verb} -y {profile} {name}` again" in failed.stderr
    assert "Traceback" not in failed.stderr

    filler.unlink()
    redone = envlock(verb, "-y", profile, name)
    assert redone.returncode == 0, redone.stderr
    assert files_beside(profile) != before


RECORDING = """\
import sys, envlock
envlock.snapshot(sys.argv[1], config={"lr": 0.1})
"""


def test_a_snapshot_in_the_directory_is_kept_without_force(
    tmp_path: Path, wheelhouse: Path, envlock: Envlock
) -> None:
    profile = write_seed_project(tmp_path / "proj", wheelhouse)
    for step in (("lock",), ("apply", "-y")):
        assert envlock(*step, profile).returncode == 0
    ckpt, script = tmp_path / "ckpt", tmp_path / "train.py"
    script.write_text(RECORDING)
    snap = ckpt / "envlock-snapshot.json"

    # --snapshot-into writes before the command starts; the command's own snapshot, written
    # later and knowing its config and argv, is the one the directory keeps.
    ran = envlock("run", "--snapshot-into", ckpt, profile, "--", "python", script, ckpt)
    assert ran.returncode == 0, ran.stderr
    own = snap.read_bytes()
    assert json.loads(own)["config"] == {"lr": 0.1} and "process" in json.loads(own)

    again = envlock("run", "--snapshot-into", ckpt, profile, "--", "python", "-c", "print(1)")
    assert again.returncode == EXIT_USAGE and again.stdout == "", again.stderr
    assert snap.read_bytes() == own
    assert "a snapshot is already here" in again.stderr
    assert "written inside the run by envlock.snapshot()" in again.stderr
    assert "pass --force" in again.stderr
    cli = envlock("snapshot", profile, ckpt)
    assert cli.returncode == EXIT_USAGE and "a snapshot is already here" in cli.stderr
    assert snap.read_bytes() == own
    assert sorted(p.name for p in ckpt.iterdir()) == ["envlock-snapshot.json"]

    forced = envlock("snapshot", "--force", profile, ckpt)
    assert forced.returncode == 0, forced.stderr
    assert json.loads(snap.read_text())["config"] is None
    lone = envlock("run", "--force", profile, "--", "true")
    assert lone.returncode == EXIT_USAGE and "--force goes with --snapshot-into" in lone.stderr


def test_putting_back_restores_removes_or_leaves_an_edit_alone(tmp_path: Path) -> None:
    """The undo, on real files: content restored (mode too), a file that did not exist
    removed, one edited by someone since envlock wrote it left as it is, and all said."""
    profile, lock, notes = tmp_path / "p.toml", tmp_path / "pylock.p.toml", tmp_path / "n.txt"
    profile.write_bytes(b"new profile")
    lock.write_bytes(b"new lock")
    notes.write_bytes(b"edited by hand")
    written = [
        Written(profile, b"old profile", b"new profile", 0o600),
        Written(lock, None, b"new lock"),
        Written(notes, b"old notes", b"new notes"),
    ]
    error = OperationError("disk full", hint="free some space")
    with pytest.raises(OperationError) as raised, undone_on_failure(written, "the apply", "next"):
        raise error
    assert raised.value is error and profile.read_bytes() == b"old profile"
    assert profile.stat().st_mode & 0o777 == 0o600
    assert not lock.exists() and notes.read_bytes() == b"edited by hand"
    assert str(error).splitlines()[1:] == [
        "  hint: free some space",
        "  the apply failed, so p.toml and pylock.p.toml are back as before; not restored: "
        "n.txt changed since envlock wrote it, so left as it is; next",
    ]
    # A step that ends well (exit 0 included) undoes nothing.
    profile.write_bytes(b"new profile")
    with pytest.raises(SystemExit), undone_on_failure(written[:1], "the apply", "next"):
        raise SystemExit(0)
    assert profile.read_bytes() == b"new profile"
