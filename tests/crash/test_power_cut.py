"""Power cuts, simulated on LazyFS: the root, the project and uv's cache live on a file system
that drops every byte not fsynced when the power goes. After any cut the active environment
is the old one or the new one, complete; `check` tells the truth; one `apply` converges."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.lazyfs import LazyFS
from tests.projects import write_seed_project

IMPORTS = "import tinydep, trainutil, torch; print(tinydep.VERSION)"


class Project:
    """A seed project on the mount, its uv cache there too (uv's default is on the same
    file system as the root on most machines)."""

    def __init__(self, fs: LazyFS, wheelhouse: Path) -> None:
        self.fs = fs
        self.profile = write_seed_project(fs.mnt / "proj", wheelhouse)
        self.root = self.profile.parent / "root"
        self.env = {**os.environ, "UV_CACHE_DIR": str(fs.mnt / "uv-cache")}

    def envlock(self, *args: str | Path) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "-m", "envlock", *map(str, args)],
            capture_output=True,
            text=True,
            env=self.env,
        )
        if fault := self.fs.faulted():
            pytest.fail(f"{fault}, during envlock {args[0]}: {done.stderr[-400:]}", pytrace=False)
        return done

    def start_apply(self) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "envlock", "apply", "-y", str(self.profile)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env,
            start_new_session=True,
        )

    def saved(self) -> None:
        """The user's own files (profile, scripts) were saved long before any cut."""
        for path in [*self.profile.parent.glob("*.toml"), *self.profile.parent.rglob("scripts")]:
            fsync(path)
            for inner in path.rglob("*") if path.is_dir() else ():
                fsync(inner)
        fsync(self.profile.parent)

    def relock(self, tinydep: str) -> None:
        text = self.profile.read_text()
        self.profile.write_text(text.replace('"tinydep==1.0"', f'"tinydep=={tinydep}"'))
        self.saved()
        assert self.envlock("lock", self.profile).returncode == 0

    def active(self) -> str:
        return Path(os.readlink(self.root / "current")).name

    def assert_active_is_whole(self) -> str:
        """`current` names a complete generation whose every file came back."""
        name = self.active()
        gen = self.root / "generations" / name
        meta = gen / ".envlock" / "generation.json"
        assert meta.is_file() and json.loads(meta.read_text()), f"{name} is not complete"
        ran = subprocess.run(
            [str(gen / "bin" / "python"), "-c", IMPORTS], capture_output=True, text=True
        )
        assert ran.returncode == 0, f"{name} lost files in the cut: {ran.stderr[-400:]}"
        return ran.stdout.strip()

    def assert_converges(self, version: str) -> None:
        """check tells the truth, `run` works or refuses with drift, one apply converges."""
        checked = self.envlock("check", "--json", self.profile)
        ran = self.envlock("run", self.profile, "--", "python", "-c", IMPORTS)
        if checked.returncode == 0:
            assert ran.returncode == 0, ran.stderr
        else:
            assert checked.returncode == 1, checked.stderr
            assert ran.returncode == 1 and "drift" in ran.stderr, ran.stderr
        applied = self.envlock("apply", "-y", self.profile)
        assert applied.returncode == 0, applied.stderr
        assert self.envlock("check", self.profile).returncode == 0
        ran = self.envlock("run", self.profile, "--", "python", "-c", IMPORTS)
        assert ran.returncode == 0 and ran.stdout.strip() == version, ran.stderr


def fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@pytest.fixture
def project(lazy: LazyFS, wheelhouse: Path) -> Project:
    proj = Project(lazy, wheelhouse)
    proj.saved()
    # The lock is the set-up, not what is cut: it resolves with the session's uv cache, off
    # the mount (a resolution through a fresh cache on the FUSE mount once failed in a full
    # run, uv finding no solution, and passed alone). apply, what is cut, uses the mount's.
    locked = subprocess.run(
        [sys.executable, "-m", "envlock", "lock", str(proj.profile)],
        capture_output=True,
        text=True,
    )
    assert locked.returncode == 0, locked.stderr
    return proj


def test_a_cut_right_after_apply_leaves_the_new_generation_whole(project: Project) -> None:
    applied = project.envlock("apply", "-y", project.profile)
    assert applied.returncode == 0, applied.stderr
    project.fs.cut()
    assert project.assert_active_is_whole() == "1.0"
    assert project.envlock("check", "--deep", project.profile).returncode == 0
    project.assert_converges("1.0")


def kill_when(proc: subprocess.Popen[str], ready: object) -> bool:
    """SIGKILL the apply as soon as `ready()` is true (what the apply did on disk, not a
    delay); whether it landed before the apply ended by itself."""
    assert callable(ready)
    while proc.poll() is None:
        if ready():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return True
        time.sleep(0.002)  # a polling interval, not a kill point
    return False


def present(root: Path, pattern: str) -> object:
    return lambda: any(root.glob(pattern))


STEPS = {
    "venv": "generations/2-*/bin/python",
    "install": "generations/2-*/lib/python3.11/site-packages/*.dist-info",
    "manifest": "generations/2-*/.envlock/manifest.json",
    "index": "generations/2-*/.envlock/stat-index",
    "generation.json": "generations/2-*/.envlock/generation.json",
}


@pytest.mark.parametrize("step", [*STEPS, "switch", "done"])
def test_a_cut_after_each_step_of_apply(project: Project, step: str) -> None:
    """Generation 1 is active; the apply of a new lock is cut right after `step`."""
    assert project.envlock("apply", "-y", project.profile).returncode == 0
    project.relock("0.9")
    proc = project.start_apply()
    if step in STEPS:
        kill_when(proc, present(project.root, STEPS[step]))
    elif step == "switch":
        kill_when(proc, lambda: project.active().startswith("2-"))
    else:
        proc.wait()
        assert proc.returncode == 0
    project.fs.cut()
    version = project.assert_active_is_whole()
    assert version in ("1.0", "0.9")
    if step == "done":
        assert version == "0.9"
    project.assert_converges("0.9")


@pytest.mark.parametrize("timing", ["before", "after"])
def test_the_file_system_dies_at_the_switch(project: Project, timing: str) -> None:
    """LazyFS's own crash fault: it loses its cache and dies at the rename of `current`."""
    assert project.envlock("apply", "-y", project.profile).returncode == 0
    project.relock("0.9")
    # from_rgx too: LazyFS a47a5ba checks a multi-path fault's `to` only when `from` is set.
    project.fs.command(
        f"lazyfs::crash::timing={timing}::op=rename::from_rgx=current::to_rgx=root/current$"
    )
    failed = project.envlock("apply", "-y", project.profile)
    assert failed.returncode != 0 and "Traceback" not in failed.stderr
    assert project.fs.crashed()
    project.fs.restart_after_crash()
    assert project.assert_active_is_whole() in ("1.0", "0.9")
    project.assert_converges("0.9")


def test_rollback_and_gc_are_durable(project: Project) -> None:
    assert project.envlock("apply", "-y", project.profile).returncode == 0
    project.relock("0.9")
    assert project.envlock("apply", "-y", project.profile).returncode == 0
    assert project.envlock("rollback", project.profile).returncode == 0
    project.fs.cut()
    assert project.assert_active_is_whole() == "1.0"  # the rollback and its hold survived
    held = project.envlock("check", project.profile)
    assert held.returncode == 0 and "rolled back" in held.stdout + held.stderr, held.stdout
    assert project.envlock("apply", "-y", project.profile).returncode == 0
    assert project.envlock("gc", "-y", "--keep", "1", project.profile).returncode == 0
    project.fs.cut()
    assert project.assert_active_is_whole() == "0.9"
    project.assert_converges("0.9")


def test_snapshot_and_add_are_whole_after_a_cut(project: Project, tmp_path: Path) -> None:
    assert project.envlock("apply", "-y", project.profile).returncode == 0
    ckpt = project.fs.mnt / "ckpt"
    ckpt.mkdir()
    assert project.envlock("snapshot", project.profile, ckpt).returncode == 0
    added = project.envlock("add", "-y", project.profile, "filelock")
    assert added.returncode == 0, added.stderr
    project.fs.cut()
    snapshot = json.loads((ckpt / "envlock-snapshot.json").read_text())
    assert snapshot["schema"] and snapshot["lock"]
    assert "filelock" in project.profile.read_text()
    assert project.envlock("lock", "--check", project.profile).returncode == 0
    project.assert_converges("1.0")


def test_a_cache_damaged_by_the_cut_is_cleaned_and_apply_retries(project: Project) -> None:
    """uv's cache does not fsync what it writes: after a cut its entries may be empty. The
    next build names what it cleaned and succeeds, instead of ending in uv's words."""
    assert project.envlock("apply", "-y", project.profile).returncode == 0
    project.fs.cut()
    project.relock("0.9")
    applied = project.envlock("apply", "-y", project.profile)
    assert applied.returncode == 0, applied.stderr
    project.assert_converges("0.9")


# The files of a generation a gc removes, each a point its removal may be cut at. The
# generation's name may carry a trash prefix: wherever the removal deletes them.
GC_CUTS = {
    "manifest": r"\.envlock/manifest\.json$",
    "generation.json": r"\.envlock/generation\.json$",
    "lock copy": r"\.envlock/pylock\.toml$",
    "a package": r"site-packages/tinydep/__init__\.py$",
}


@pytest.mark.parametrize("cut", GC_CUTS)
def test_a_cut_in_the_middle_of_gc_leaves_no_half_removed_generation(
    project: Project, cut: str
) -> None:
    """gc removes generation 1 (neither active nor previous) and the power goes after one of
    its unlinks: generation 1 is then gone for `generations`, `rollback` and `run`, and the
    next operation on the root finishes the removal."""
    assert project.envlock("apply", "-y", project.profile).returncode == 0
    project.relock("0.9")
    assert project.envlock("apply", "-y", project.profile).returncode == 0
    added = project.envlock("add", "-y", project.profile, "flashinfer-python")
    assert added.returncode == 0, added.stderr
    assert project.envlock("apply", "-y", project.profile).returncode == 0
    in_gen1 = r"generations/[^/]*1-[0-9a-f]{12}[^/]*/(.*/)?"
    project.fs.command(f"lazyfs::crash::timing=after::op=unlink::from_rgx={in_gen1}{GC_CUTS[cut]}")
    before = project.envlock("generations", project.profile).stdout
    gc = project.envlock("gc", "-y", "--keep", "1", project.profile)
    assert "Traceback" not in gc.stderr
    assert project.fs.crashed(), (
        f"the cut never came: {before} {gc.stdout[-400:]} {gc.stderr[-400:]}"
    )
    project.fs.restart_after_crash()
    assert project.assert_active_is_whole() == "0.9"
    listed = project.envlock("generations", "--json", project.profile)
    assert listed.returncode == 0, listed.stderr
    names = [g["name"] for g in json.loads(listed.stdout)["generations"]]
    assert not any(name.startswith("1-") for name in names), names
    rolled = project.envlock("rollback", "--to", "1", project.profile)
    assert rolled.returncode != 0 and "is active" not in rolled.stdout, rolled.stdout
    assert project.active().startswith("3-")
    applied = project.envlock("apply", "-y", project.profile)
    assert applied.returncode == 0, applied.stderr
    left = sorted(p.name[:2] for p in (project.root / "generations").iterdir())
    assert left == ["2-", "3-"], left
    project.assert_converges("0.9")


def test_a_cut_between_the_profile_and_its_lock_is_completed_by_the_next_command(
    project: Project,
) -> None:
    """`add` writes the profile, then its lock; the power goes between the two renames. The
    next command completes the pair by itself and says so: never a new profile with its old
    lock (a stale lock the user must know to fix with `lock`, then `apply`)."""
    assert project.envlock("apply", "-y", project.profile).returncode == 0
    # from_rgx too: LazyFS a47a5ba checks a multi-path fault's `to` only when `from` is set.
    cut = r"lazyfs::crash::timing=after::op=rename::from_rgx=seed\.toml::to_rgx=proj/seed\.toml$"
    project.fs.command(cut)
    # The file system dies under `add` (what it says then is no matter: its disk is gone).
    added = project.envlock("add", "-y", project.profile, "flashinfer-python")
    assert project.fs.crashed(), f"the cut never came: {added.stderr[-400:]}"
    project.fs.restart_after_crash()
    assert "flashinfer-python" in project.profile.read_text()
    checked = project.envlock("check", project.profile)
    assert "completed a change a crash interrupted" in checked.stderr, checked.stderr
    assert project.envlock("lock", "--check", project.profile).returncode == 0
    assert not list(project.profile.parent.glob(".*pending*"))
    project.assert_converges("1.0")
