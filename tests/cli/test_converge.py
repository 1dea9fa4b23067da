"""Converge end to end on real local roots (real uv, venvs, processes): every kind a real
venv can show is repaired by `apply` (a broken interpreter included), two applies at once
build one generation, holds end with the converge that ends them, and a generation built
`--from-snapshot` is held like a rollback's.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import Envlock
from tests.projects import write_seed_project
from tests.support import UV, ctrl_c_during_install, uv_install
from tests.wheelhouse import build_wheel


def site(project: Path) -> Path:
    return project / "venv" / "lib" / "python3.11" / "site-packages"


def drift(envlock: Envlock, profile: Path) -> list[str]:
    return [d["kind"] for d in json.loads(envlock("check", "--json", profile).stdout)["drift"]]


def hold(envlock: Envlock, profile: Path) -> object:
    return json.loads(envlock("check", "--json", profile).stdout)["hold"]


def generations(project: Path) -> list[str]:
    return sorted(p.name for p in (project / "root" / "generations").iterdir())


def relock(envlock: Envlock, profile: Path, old: str, new: str) -> None:
    profile.write_text(profile.read_text().replace(old, new))
    locked = envlock("lock", profile)
    assert locked.returncode == 0, locked.stderr


@pytest.fixture
def seed(tmp_path: Path, wheelhouse: Path, envlock: Envlock) -> Path:
    profile = write_seed_project(tmp_path / "proj", wheelhouse)
    assert envlock("lock", profile).returncode == 0
    applied = envlock("apply", "-y", profile)
    assert applied.returncode == 0, applied.stderr
    return profile


# -- every kind a real venv can show, repaired by apply -----------------------------------


def test_a_broken_interpreter_is_rebuilt_by_apply(seed: Path, envlock: Envlock) -> None:
    project = seed.parent
    python = project / "root" / "current" / "bin" / "python"
    python.unlink()
    python.symlink_to("/nonexistent/bin/python3.11")
    assert drift(envlock, seed) == ["interpreter"]
    refused = envlock("run", seed, "--", "python", "-c", "print('ran')")
    assert refused.returncode == 1 and "ran" not in refused.stdout
    plan = envlock("plan", seed)
    assert plan.returncode == 1 and "interpreter does not start" in plan.stdout, plan.stdout

    applied = envlock("apply", "-y", seed)
    assert applied.returncode == 0, applied.stderr
    assert "nothing to do" not in applied.stdout
    check = envlock("check", seed)
    assert check.returncode == 0, check.stdout + check.stderr
    ran = envlock("run", seed, "--", "python", "-c", "import tinydep; print(tinydep.VERSION)")
    assert ran.returncode == 0 and ran.stdout.strip() == "1.0", ran.stderr
    assert len(generations(project)) == 2  # the broken one is kept, as any earlier one is


def remove_cache_dir(project: Path) -> None:
    (build,) = (project / "root" / "cache").iterdir()
    shutil.rmtree(build)


@pytest.mark.parametrize(
    ("damage", "kind"),
    [
        ("extra", "package-extra"),
        ("uninstall", "package-missing"),
        ("stray", "file-added"),
        ("sglang", "torch-build"),  # and cuda-libraries, package-extra
        ("profile", "generation-lock"),
        ("cache", "cache-dir"),
    ],
)
def test_apply_repairs_each_kind(
    seed: Path, wheelhouse: Path, envlock: Envlock, damage: str, kind: str
) -> None:
    project = seed.parent
    python = project / "venv" / "bin" / "python"
    if damage == "extra":
        uv_install(python, [wheelhouse], "sgl-kernel==0.3.0")
    elif damage == "uninstall":
        subprocess.run(
            [UV, "pip", "uninstall", "-q", "--python", str(python), "tinydep"], check=True
        )
    elif damage == "stray":
        (site(project) / "stray_module.py").write_text("VALUE = 1\n")
    elif damage == "sglang":
        uv_install(python, [wheelhouse], "sglang==0.5.0")
    elif damage == "profile":
        relock(envlock, seed, "tinydep==1.0", "tinydep==0.9")
    elif damage == "cache":
        remove_cache_dir(project)
    assert kind in drift(envlock, seed)

    applied = envlock("apply", "-y", seed)
    assert applied.returncode == 0, applied.stderr
    assert drift(envlock, seed) == []
    assert envlock("check", "--deep", seed).returncode == 0


# -- two applies at once build one generation --------------------------------------------


def test_two_applies_at_once_build_one_generation_and_the_waiting_one_has_nothing_to_do(
    tmp_path: Path, wheelhouse: Path, envlock: Envlock
) -> None:
    own = tmp_path / "wheels"
    shutil.copytree(wheelhouse, own)
    rounds = 4
    for n in range(rounds):
        build_wheel(own, f"racepkg{n}", "1.0")
    profile = write_seed_project(tmp_path / "proj", own)
    project = profile.parent
    assert envlock("lock", profile).returncode == 0
    assert envlock("apply", "-y", profile).returncode == 0
    raced = 0
    for n in range(rounds):  # each round a new lock: one build to do, two applies to do it
        relock(envlock, profile, '"tinydep==1.0"', f'"tinydep==1.0", "racepkg{n}"')
        before = generations(project)
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "envlock", "apply", "-y", str(profile)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        outputs = [proc.communicate(timeout=300) for proc in procs]
        for proc, (out, err) in zip(procs, outputs, strict=True):
            assert proc.returncode == 0, out + err
            assert "incomplete" not in out + err and "Traceback" not in err, out + err
        added = sorted(set(generations(project)) - set(before))
        assert len(added) == 1, (added, outputs)
        said = sorted("nothing to do" in out for out, _ in outputs)
        assert said == [False, True], outputs
        raced += any("planning again" in err for _, err in outputs)
        profile.write_text(profile.read_text().replace(f', "racepkg{n}"', ""))
    print(f"{raced} of {rounds} rounds: the waiting apply's plan was overtaken and made again")
    assert raced >= 1  # the race this test is about happened at least once


def test_a_plan_made_while_another_operation_holds_the_root_says_it_is_provisional(
    seed: Path, envlock: Envlock
) -> None:
    """The waiting apply shows its plan before the root's lock is its own: marked provisional,
    naming the holder (here: this test, holding the lock as an apply does, beside the
    generation another apply would be building), and never removing that build; planned
    again once the root changed."""
    project = seed.parent
    relock(envlock, seed, "tinydep==1.0", "tinydep==0.9")
    building = project / "root" / "generations" / "5-0123456789ab"
    building.mkdir()  # the other apply's build under way: not complete
    holder = f"pid {os.getpid()} on {os.uname().nodename}"
    fd = os.open(project / "root" / ".envlock.lock", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.ftruncate(fd, 0)
    os.pwrite(fd, holder.encode(), 0)
    waiting = subprocess.Popen(
        [sys.executable, "-m", "envlock", "apply", "-y", str(seed)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert waiting.stderr is not None
    said = [waiting.stderr.readline()]
    while "waiting for another envlock operation" not in said[-1] and said[-1]:
        said.append(waiting.stderr.readline())
    shutil.rmtree(building)  # the other apply finished, and let go
    os.close(fd)
    out, err = waiting.communicate(timeout=120)
    assert waiting.returncode == 0, out + "".join(said) + err
    assert out.startswith(
        "provisional plan: 3 action(s) (another envlock operation holds the root: "
        f"{holder}; planned again once this apply holds it, if the root changed)\n"
        "  1. build generation "
    ), out
    assert "incomplete" not in out  # the other apply's build is not planned away
    assert "planning again" in err and out.count("provisional") == 1, out + err
    assert drift(envlock, seed) == []


def test_a_slow_install_shows_its_count_on_a_terminal_and_nowhere_else(
    tmp_path: Path, wheelhouse: Path, envlock: Envlock
) -> None:
    """uv's install of a package of many files takes seconds: a terminal (a pty, through
    `script`) sees envlock's count of the packages in place meanwhile; a pipe and --json
    see none of it."""
    own = tmp_path / "wheels"
    shutil.copytree(wheelhouse, own)
    many = {f"bulkpkg/m{n}.py": f"VALUE = {n}\n" for n in range(15000)}
    for version in ("1.0", "1.1", "1.2"):
        build_wheel(own, "bulkpkg", version, files=many)
    profile = write_seed_project(tmp_path / "proj", own)
    relock(envlock, profile, '"tinydep==1.0"', '"tinydep==1.0", "bulkpkg==1.0"')
    clean = {k: v for k, v in os.environ.items() if k not in ("TTY_COMPATIBLE", "FORCE_COLOR")}
    line = shlex.join([sys.executable, "-m", "envlock", "apply", "-y", str(profile)])
    seen = subprocess.run(
        ["script", "-qfec", line, "/dev/null"],
        env={**clean, "TERM": "xterm", "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert seen.returncode == 0, seen.stdout
    count = re.findall(r"\x1b\[K  installing: (\d+) of (\d+) packages in place", seen.stdout)
    assert count and {total for _, total in count} == {"7"}, seen.stdout
    relock(envlock, profile, '"bulkpkg==1.0"', '"bulkpkg==1.1"')
    piped = envlock("apply", "-y", "--json", profile)
    assert piped.returncode == 0, piped.stderr
    json.loads(piped.stdout)
    assert "installing:" not in piped.stdout + piped.stderr
    relock(envlock, profile, '"bulkpkg==1.1"', '"bulkpkg==1.2"')
    plain = envlock("apply", "-y", profile)
    assert plain.returncode == 0 and "installing:" not in plain.stdout + plain.stderr


def test_ctrl_c_during_a_build_says_what_it_left(
    tmp_path: Path, wheelhouse: Path, envlock: Envlock
) -> None:
    """Ctrl-C (SIGINT to the process group, as a terminal sends it) while uv installs: the
    note names what is left on the root, not a half-built generation that is not there."""
    own = tmp_path / "wheels"
    shutil.copytree(wheelhouse, own)
    build_wheel(own, "bulkpkg", "1.0", files={f"bulkpkg/m{n}.py": "X = 1\n" for n in range(15000)})
    profile = write_seed_project(tmp_path / "proj", own)
    relock(envlock, profile, '"tinydep==1.0"', '"tinydep==1.0", "bulkpkg==1.0"')
    code, out, err = ctrl_c_during_install(profile, timeout=60)
    assert code == 130, out + err
    left = [
        p.name
        for p in (profile.parent / "root" / "generations").iterdir()
        if not (p / ".envlock" / "generation.json").exists()
    ]
    untouched = "interrupted: the active generation is untouched (the switch is atomic); "
    if left:
        assert f"{untouched}the half-built {left[0]} is removed by the next" in err, err
    else:
        assert f"{untouched}no half-built generation was left" in err, err
    assert "a half-built generation is removed by the next" not in err


# -- holds end with the converge ---------------------------------------------------------


def test_remove_after_a_rollback_ends_the_hold(
    seed: Path, envlock: Envlock, wheelhouse: Path
) -> None:
    added = envlock("add", "-y", seed, "sgl-kernel")
    assert added.returncode == 0, added.stdout + added.stderr
    assert envlock("rollback", seed).returncode == 0
    assert hold(envlock, seed) is not None

    removed = envlock("remove", "-y", seed, "sgl-kernel")
    assert removed.returncode == 0, removed.stdout + removed.stderr
    assert hold(envlock, seed) is None
    # The next profile change is drift again, and run refuses the old generation.
    relock(envlock, seed, "tinydep==1.0", "tinydep==0.9")
    assert envlock("check", seed).returncode == 1
    refused = envlock("run", seed, "--", "python", "-c", "print('ran')")
    assert refused.returncode == 1 and "ran" not in refused.stdout


def test_editing_the_profile_back_and_applying_ends_the_hold(seed: Path, envlock: Envlock) -> None:
    relock(envlock, seed, "tinydep==1.0", "tinydep==0.9")
    assert envlock("apply", "-y", seed).returncode == 0
    assert envlock("rollback", seed).returncode == 0  # back to generation 1 (tinydep 1.0)
    relock(envlock, seed, "tinydep==0.9", "tinydep==1.0")
    plan = envlock("plan", seed)
    assert plan.returncode == 1 and "end the rollback's hold" in plan.stdout, plan.stdout

    applied = envlock("apply", "-y", seed)
    assert applied.returncode == 0, applied.stderr
    assert hold(envlock, seed) is None
    assert envlock("check", "--strict", seed).returncode == 0
    relock(envlock, seed, "tinydep==1.0", "tinydep==0.9")
    assert envlock("check", seed).returncode == 1


def test_a_generation_built_from_a_snapshot_is_held_until_apply(
    seed: Path, tmp_path: Path, envlock: Envlock
) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    assert envlock("snapshot", seed, ckpt).returncode == 0
    relock(envlock, seed, "tinydep==1.0", "tinydep==0.9")
    assert envlock("apply", "-y", seed).returncode == 0

    rebuilt = envlock("apply", "-y", "--from-snapshot", ckpt, seed)
    assert rebuilt.returncode == 0, rebuilt.stderr
    probe = ["python", "-c", "import tinydep; print(tinydep.VERSION)"]
    ran = envlock("run", seed, "--", *probe)  # no --allow-drift: judged by its own lock
    assert ran.returncode == 0 and ran.stdout.strip() == "1.0", ran.stderr
    checked = envlock("check", seed)
    assert checked.returncode == 0 and "held (apply --from-snapshot)" in checked.stderr
    strict = envlock("check", "--strict", seed)
    assert strict.returncode == 1 and "✓" not in strict.stdout
    assert strict.stdout.startswith("✗ --strict: held (apply --from-snapshot): generation 1 (")
    held = hold(envlock, seed)
    assert isinstance(held, dict) and held["generation"].startswith("1-")

    back = envlock("apply", "-y", seed)
    assert back.returncode == 0, back.stderr
    assert hold(envlock, seed) is None
    assert envlock("run", seed, "--", *probe).stdout.strip() == "0.9"
