"""kill -9 at many points of an apply, concurrent applies, and bad input that must not hurt.

An interrupted apply must leave the active generation untouched and usable, and the next
apply must complete; a half-built generation is never switched to and is cleaned up.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import Envlock
from tests.projects import write_seed_project


def start_apply(profile: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "envlock", "apply", "-y", *extra, str(profile)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def kill_after_lines(proc: subprocess.Popen[str], lines: int) -> list[str]:
    """Read progress lines from stderr; SIGKILL the whole process group after `lines`."""
    seen: list[str] = []
    assert proc.stderr is not None
    while len(seen) < lines:
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(line.strip())
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return seen


def kill_when_present(proc: subprocess.Popen[str], root: Path, pattern: str) -> bool:
    """SIGKILL the apply's process group as soon as `pattern` (a glob under the root) exists:
    a kill point set by what the apply has done on disk, not by a delay. Returns whether the
    kill landed before the apply ended by itself."""
    while proc.poll() is None:
        if any(root.glob(pattern)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return True
        time.sleep(0.002)  # a polling interval, not a kill point
    return False


def assert_active_generation_usable(project: Path) -> str:
    root = project / "root"
    current = os.readlink(root / "current")
    gen = root / current
    assert (gen / ".envlock" / "generation.json").is_file(), f"{current} is not complete"
    ran = subprocess.run(
        [
            str(project / "venv" / "bin" / "python"),
            "-c",
            "import tinydep, trainutil, torch; print(tinydep.VERSION)",
        ],
        capture_output=True,
        text=True,
    )
    assert ran.returncode == 0, ran.stderr
    return Path(current).name


def assert_listed_complete_means_whole(project: Path, profile: Path, envlock: Envlock) -> None:
    """Before anything repairs it: a generation listed complete imports every locked package,
    and one that is not cannot be switched to (`rollback --to` refuses it)."""
    listed = envlock("generations", "--json", profile)
    assert listed.returncode == 0, listed.stderr
    for gen in json.loads(listed.stdout)["generations"]:
        python = project / "root" / "generations" / gen["name"] / "bin" / "python"
        if gen["complete"]:
            imports = subprocess.run(
                [str(python), "-c", "import tinydep, trainutil, torch"], capture_output=True
            )
            assert imports.returncode == 0, f"{gen['name']} is listed complete but is not whole"
        else:
            refused = envlock("rollback", "--to", str(gen["number"]), profile)
            assert refused.returncode != 0, f"rollback switched to incomplete {gen['name']}"
            assert Path(os.readlink(project / "root" / "current")).name.startswith("1-")


def reset_to_first_generation(project: Path, envlock: Envlock, profile: Path) -> None:
    assert envlock("rollback", "--to", "1", profile).returncode == 0
    for gen in (project / "root" / "generations").iterdir():
        if not gen.name.startswith("1-"):
            shutil.rmtree(gen)


@pytest.fixture
def two_locks(tmp_path: Path, wheelhouse: Path, envlock: Envlock) -> Path:
    """Generation 1 (tinydep 1.0) active; the profile now locks tinydep 0.9 (not built)."""
    profile = write_seed_project(tmp_path / "proj", wheelhouse)
    assert envlock("lock", profile).returncode == 0
    assert envlock("apply", "-y", profile).returncode == 0
    profile.write_text(profile.read_text().replace('"tinydep==1.0"', '"tinydep==0.9"'))
    assert envlock("lock", profile).returncode == 0
    return profile


def test_apply_killed_at_every_step_leaves_the_active_generation_usable(
    two_locks: Path, envlock: Envlock
) -> None:
    project = two_locks.parent
    # How many progress lines does a complete apply print? Kill after each of them.
    probe = start_apply(two_locks)
    _, err = probe.communicate()
    assert probe.returncode == 0, err
    steps = len([line for line in err.splitlines() if line.startswith("  ")])
    assert steps >= 6
    reset_to_first_generation(project, envlock, two_locks)

    outcomes = set()
    for lines in range(1, steps + 1):
        seen = kill_after_lines(start_apply(two_locks), lines)
        active = assert_active_generation_usable(project)
        outcomes.add(active.split("-")[0])
        finished = envlock("apply", "-y", two_locks)
        assert finished.returncode == 0, (lines, seen, finished.stderr)
        assert envlock("check", two_locks).returncode == 0
        gens = list((project / "root" / "generations").iterdir())
        assert all((g / ".envlock" / "generation.json").is_file() for g in gens), gens
        reset_to_first_generation(project, envlock, two_locks)
    # Some kills landed before the switch (gen 1 still active) — the interesting ones.
    assert "1" in outcomes


@pytest.mark.parametrize(
    "moment",
    [
        "generations/2-*",  # the new generation's directory appears
        "generations/2-*/bin/python",  # uv venv made the interpreter
        "generations/2-*/.envlock/pylock.toml",  # the lock copied in, sync about to start
        "generations/2-*/lib/python3.11/site-packages/*.dist-info",  # uv installing
        "generations/2-*/.envlock/manifest.json",  # the manifest written, not yet complete
        "generations/2-*/.envlock/generation.json",  # complete, not yet switched to
    ],
)
def test_apply_killed_at_each_moment_on_disk(
    two_locks: Path, envlock: Envlock, moment: str
) -> None:
    project = two_locks.parent
    landed = kill_when_present(start_apply(two_locks), project / "root", moment)
    # Those moments are followed by whole build steps: the kill always lands in time.
    assert landed or moment.endswith(("manifest.json", "generation.json"))
    assert_active_generation_usable(project)
    assert_listed_complete_means_whole(project, two_locks, envlock)
    finished = envlock("apply", "-y", two_locks)
    assert finished.returncode == 0, finished.stderr
    assert envlock("check", two_locks).returncode == 0
    ran = envlock("run", two_locks, "--", "python", "-c", "import tinydep; print(tinydep.VERSION)")
    assert ran.stdout.strip() == "0.9"


def test_concurrent_applies_are_serialized(two_locks: Path, envlock: Envlock) -> None:
    lock_file = two_locks.parent / "root" / ".envlock.lock"
    with open(lock_file, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        handle.write("pid 1 on another-apply")
        handle.flush()
        busy = envlock("apply", "-y", "--no-wait", two_locks)
        assert busy.returncode == 3
        assert "another envlock operation holds" in busy.stderr
        waiting = start_apply(two_locks)
        assert waiting.stderr is not None
        said = ""
        for line in waiting.stderr:  # until the apply says it waits (or ends, failing)
            said += line
            if "waiting for another envlock operation" in line:
                break
        assert "waiting for another envlock operation" in said, said
        assert waiting.poll() is None
    _out, err = waiting.communicate(timeout=120)
    assert waiting.returncode == 0, err
    assert envlock("check", two_locks).returncode == 0
