"""Generations that mean what users think, through the real CLI with real uv and venvs:
a rollback holds, a snapshot records the lock that ran, locks go stale only when what they
resolve changes, whatever check sees apply repairs, and concurrent applies never share a
generation number.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import Envlock
from tests.projects import write_seed_project
from tests.support import UV


def site(project: Path) -> Path:
    return project / "venv" / "lib" / "python3.11" / "site-packages"


def kinds(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [d["kind"] for d in json.loads(result.stdout)["drift"]]


def pollute(project: Path, wheelhouse: Path, requirement: str = "sglang") -> None:
    """A user's `uv pip install` straight into the live venv (offline, the test wheels)."""
    subprocess.run(
        [
            UV,
            "pip",
            "install",
            "-q",
            "--python",
            str(project / "venv" / "bin" / "python"),
            "--offline",
            "--no-index",
            "--find-links",
            str(wheelhouse),
            requirement,
        ],
        check=True,
    )


@pytest.fixture
def two_generations(tmp_path: Path, wheelhouse: Path, envlock: Envlock) -> Path:
    """Generation 1 from lock A (tinydep 1.0), generation 2 from lock B (tinydep 0.9)."""
    profile = write_seed_project(tmp_path / "proj", wheelhouse)
    for _ in range(2):
        assert envlock("lock", profile).returncode == 0
        applied = envlock("apply", "-y", profile)
        assert applied.returncode == 0, applied.stderr
        profile.write_text(profile.read_text().replace("tinydep==1.0", "tinydep==0.9"))
    return profile


def gen_lock(project: Path, number: int) -> str:
    (gen,) = (project / "root" / "generations").glob(f"{number}-*")
    return (gen / ".envlock" / "pylock.toml").read_text()


# -- 1. a rollback is a deliberate state, not drift ----------------------------------------


def test_rollback_holds_until_apply(
    two_generations: Path, wheelhouse: Path, envlock: Envlock
) -> None:
    profile, project = two_generations, two_generations.parent
    pollute(project, wheelhouse)
    assert "package-extra" in kinds(envlock("check", "--json", profile))

    rolled = envlock("rollback", profile)
    assert rolled.returncode == 0, rolled.stderr
    assert "generation 1-" in rolled.stdout and "rolled back" in rolled.stderr

    check = envlock("check", profile)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "rolled back: generation 1 (lock " in check.stderr
    assert "`envlock apply` returns to it" in check.stderr
    assert envlock("check", "--strict", profile).returncode == 1
    data = json.loads(envlock("check", "--json", profile).stdout)
    assert data["clean"] and data["hold"]["generation"].startswith("1-")
    assert data["hold"]["from"].startswith("2-")

    ran = envlock("run", profile, "--", "python", "-c", "import tinydep; print(tinydep.VERSION)")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "1.0" and "rolled back" in ran.stderr

    listed = json.loads(envlock("generations", "--json", profile).stdout)
    assert listed["hold"]["generation"].startswith("1-")
    # Each generation adds only what uv did not hardlink from its cache, as du counts it.
    for gen in listed["generations"]:
        assert 0 < gen["adds_bytes"] < gen["bytes"]
    assert [h["action"] for h in listed["history"]][-1] == "rollback"
    assert "held" in envlock("generations", profile).stdout

    plan = envlock("plan", profile)
    assert plan.returncode == 1 and "return to the profile's lock" in plan.stdout

    # Pollution of the held generation is drift, judged against its own lock.
    (site(project) / "zz-inject.pth").write_text("import os\n")
    assert kinds(envlock("check", "--json", profile)) == ["pth-injection"]
    refused = envlock("run", profile, "--", "true")
    assert refused.returncode == 1 and "pth-injection" in refused.stderr
    resync = envlock("rollback", "--resync", profile)
    assert resync.returncode == 0, resync.stderr
    assert envlock("check", profile).returncode == 0

    applied = envlock("apply", "-y", profile)
    assert applied.returncode == 0, applied.stderr
    after = envlock("check", "--json", profile)
    assert json.loads(after.stdout)["hold"] is None and "rolled back" not in after.stderr
    assert envlock("check", "--strict", profile).returncode == 0


# -- 2. a snapshot describes the environment that actually ran -----------------------------


def test_snapshot_after_rollback_records_and_rebuilds_the_rolled_back_lock(
    two_generations: Path, tmp_path: Path, envlock: Envlock
) -> None:
    profile, project = two_generations, two_generations.parent
    assert envlock("rollback", profile).returncode == 0
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    assert envlock("snapshot", profile, ckpt).returncode == 0
    snap = json.loads((ckpt / "envlock-snapshot.json").read_text())
    assert snap["lock"]["text"] == gen_lock(project, 1)
    assert snap["generation"].startswith("1-") and snap["packages"]["tinydep"] == "1.0"

    # Rebuild it on a fresh root (a copy of the profile pointing elsewhere).
    other = tmp_path / "other"
    other.mkdir()
    (other / "scripts").mkdir()
    (other / "scripts" / "train.py").write_text((project / "scripts" / "train.py").read_text())
    copy = other / profile.name
    copy.write_text(profile.read_text())
    lock = profile.parent / "pylock.seed.toml"  # the checkout's lock (generation 2's)
    (other / lock.name).write_text(lock.read_text())
    rebuilt = envlock("apply", "-y", "--from-snapshot", ckpt, copy)
    assert rebuilt.returncode == 0, rebuilt.stderr
    ran = envlock(
        "run", "--allow-drift", copy, "--", "python", "-c", "import tinydep; print(tinydep.VERSION)"
    )
    assert ran.stdout.strip() == "1.0"
    (gen,) = (other / "root" / "generations").glob("*-*")
    assert (gen / ".envlock" / "pylock.toml").read_text() == gen_lock(project, 1)


# -- 3. locks go stale only when resolution inputs change ------------------------------------


def test_two_locks_installing_the_same_share_one_generation(
    tmp_path: Path, wheelhouse: Path, envlock: Envlock
) -> None:
    profile = write_seed_project(tmp_path / "proj", wheelhouse)
    assert envlock("lock", profile).returncode == 0
    assert envlock("apply", "-y", profile).returncode == 0
    # Another find-links entry is a resolution input (the lock goes stale), but the same
    # packages resolve: the new lock installs what generation 1 holds.
    empty = tmp_path / "more-wheels"
    empty.mkdir()
    text = profile.read_text()
    profile.write_text(
        text.replace(f'find-links = ["{wheelhouse}"]', f'find-links = ["{wheelhouse}", "{empty}"]')
    )
    assert envlock("lock", "--check", profile).returncode == 1
    assert envlock("lock", profile).returncode == 0
    plan = envlock("plan", profile)
    assert plan.returncode == 0, plan.stdout
    assert len(list((tmp_path / "proj" / "root" / "generations").iterdir())) == 1


# -- 4. every drift that check can see, repair can fix -----------------------------------------


def stealthy_edit(path: Path) -> None:
    """Same size, mtime put back: only ctime (which user space cannot set) moves."""
    before = path.stat()
    data = bytearray(path.read_bytes())
    data[-2] = ord("#") if data[-2] != ord("#") else ord(" ")
    path.write_bytes(bytes(data))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)


@pytest.mark.parametrize(
    "repair", [["apply", "-y"], ["apply", "-y", "--deep"], ["rollback", "--resync", "--deep"]]
)
def test_a_stealthy_edit_is_seen_by_the_fast_check_and_repaired(
    tmp_path: Path, wheelhouse: Path, envlock: Envlock, repair: list[str]
) -> None:
    profile = write_seed_project(tmp_path / "proj", wheelhouse)
    assert envlock("lock", profile).returncode == 0
    assert envlock("apply", "-y", profile).returncode == 0
    target = site(profile.parent) / "tinydep" / "__init__.py"
    stealthy_edit(target)
    check = envlock("check", "--json", profile)
    assert kinds(check) == ["file-modified"], check.stdout
    refused = envlock("run", profile, "--", "true")
    assert refused.returncode == 1
    fixed = envlock(*repair, profile)
    assert fixed.returncode == 0, fixed.stderr
    assert "nothing to do" not in fixed.stdout
    assert envlock("check", "--deep", profile).returncode == 0
    assert envlock("run", "--deep", profile, "--", "true").returncode == 0


def test_uv_hardlinking_the_same_files_elsewhere_is_not_drift(
    tmp_path: Path, wheelhouse: Path, envlock: Envlock
) -> None:
    profile = write_seed_project(tmp_path / "proj", wheelhouse)
    assert envlock("lock", profile).returncode == 0
    assert envlock("apply", "-y", profile).returncode == 0
    target = site(profile.parent) / "tinydep" / "__init__.py"
    links = target.stat().st_nlink
    os.link(target, tmp_path / "another-link")  # what uv does when it builds another venv
    assert target.stat().st_nlink == links + 1
    assert envlock("check", profile).returncode == 0


# -- 5. generation numbers under concurrency ---------------------------------------------------


def test_concurrent_applies_of_different_locks_get_different_numbers(
    tmp_path: Path, wheelhouse: Path, envlock: Envlock
) -> None:
    first = write_seed_project(tmp_path / "proj", wheelhouse, name="first")
    second = write_seed_project(
        tmp_path / "proj", wheelhouse, name="second", packages=("trainutil", "tinydep==0.9")
    )
    for profile in (first, second):  # both manage the same root ("root" beside them)
        assert envlock("lock", profile).returncode == 0
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "envlock", "apply", "-y", str(p)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for p in (first, second)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        # The apply that finished first may see the other switch `current` after it: it
        # says so; what must never happen is two generations with one number.
        assert proc.returncode == 0 or "generation-lock" in err, err
    names = sorted(p.name for p in (tmp_path / "proj" / "root" / "generations").iterdir())
    numbers = [name.split("-")[0] for name in names]
    assert len(names) == 2 and sorted(numbers) == ["1", "2"], names
