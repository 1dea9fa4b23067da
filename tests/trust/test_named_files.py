"""Every file the user names is read through the gate: a profile, its lock, `snapshot
--config`, `run --compile-artifacts`, the inputs of diff, inspect and bisect, a cache archive.
A FIFO, a device, a directory or a huge file in place of each path argument is refused at
once with the documented code and words (docs/security.md, "Files you name"); a command that
blocked (a plain `open` of a FIFO) or read on (a device that never ends) fails the table by
its timeout.

Device and FIFO shapes are made here, in the test's own directory (never the host's /dev).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.projects import write_seed_project

TIMEOUT = 60  # a blocked open would never return: the table fails on it, not the suite


def fifo(path: Path) -> None:
    os.mkfifo(path)


def device(path: Path) -> None:
    os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 5))  # /dev/zero's numbers, made here


def directory(path: Path) -> None:
    path.mkdir()


def huge(path: Path) -> None:
    with path.open("wb") as handle:  # a terabyte of holes: nothing on disk, all in fstat
        handle.truncate(2**40)


SHAPES: dict[str, tuple[Callable[[Path], None], str]] = {
    "fifo": (fifo, "a FIFO, not a regular file"),
    "device": (device, "a character device, not a regular file"),
    "directory": (directory, "a directory"),
    "huge": (huge, "exceeds"),
}


class Project:
    """A locked seed project, and a place for each case's shaped file."""

    def __init__(self, work: Path, wheelhouse: Path) -> None:
        self.work = work
        self.profile = write_seed_project(work / "proj", wheelhouse)
        done = run(["lock", self.profile])
        assert done.returncode == 0, done.stderr
        self.lock = self.profile.parent / "pylock.seed.toml"
        self.lock_text = self.lock.read_bytes()
        self.profile_text = self.profile.read_bytes()
        self.ran = work / "ran"

    def restore(self) -> None:
        for path, data in ((self.profile, self.profile_text), (self.lock, self.lock_text)):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            elif path.exists() or path.is_symlink():
                path.unlink()
            path.write_bytes(data)


def run(argv: list[Any]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "envlock", *map(str, argv)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, wheelhouse: Path) -> Project:
    return Project(tmp_path_factory.mktemp("named"), wheelhouse)


# Commands that read the profile (and then its lock), with the profile as P.
Argv = Callable[[Project, Path], list[Any]]
WITH_PROFILE: dict[str, Argv] = {
    "lock": lambda p, f: ["lock", f],
    "plan": lambda p, f: ["plan", f],
    "apply": lambda p, f: ["apply", "-y", f],
    "check": lambda p, f: ["check", f],
    "run": lambda p, f: ["run", f, "--", "touch", p.ran],
    "rollback": lambda p, f: ["rollback", f],
    "generations": lambda p, f: ["generations", f],
    "gc": lambda p, f: ["gc", "-y", f],
    "snapshot": lambda p, f: ["snapshot", f, p.work / "snap-out"],
    "data": lambda p, f: ["data", f],
    "cache": lambda p, f: ["cache", f, "status"],
    "add": lambda p, f: ["add", "-y", f, "filelock"],
    "remove": lambda p, f: ["remove", "-y", f, "trainutil"],
    "bisect": lambda p, f: ["bisect", f, p.lock, p.lock, "--", "touch", p.ran],
}
# Commands that read the profile's lock (the profile itself whole).
WITH_LOCK = {
    name: argv for name, argv in WITH_PROFILE.items() if name not in ("data", "lock", "bisect")
} | {"lock --check": lambda p, f: ["lock", "--check", p.profile]}
# Other path arguments: each shaped file is the argument itself. What each answers, by shape.
Expected = dict[str, tuple[int, str]]


def answers(code: int, **by_shape: tuple[int, str]) -> Expected:
    """The gate's words with `code` for every shape, but those given."""
    return {shape: (code, words) for shape, (_, words) in SHAPES.items()} | by_shape


CLICK_DIRECTORY = (2, "is a directory")  # click's, where a file is wanted
NEITHER = (2, "holds neither envlock-snapshot.json nor a checkpoint")  # not a checkpoint dir
NOT_A_VENV = (2, "is not a venv (no pyvenv.cfg)")
OTHER: dict[str, tuple[Argv, Expected]] = {
    "snapshot --config": (
        lambda p, f: ["snapshot", p.profile, p.work / "snap-out", "--config", f],
        answers(2, directory=CLICK_DIRECTORY),
    ),
    "run --compile-artifacts": (
        lambda p, f: ["run", p.profile, "--compile-artifacts", f, "--", "touch", p.ran],
        answers(2, directory=CLICK_DIRECTORY),
    ),
    "diff A": (lambda p, f: ["diff", f, p.lock], answers(3, directory=NEITHER)),
    "diff B": (lambda p, f: ["diff", p.lock, f], answers(3, directory=NEITHER)),
    "bisect GOOD": (
        lambda p, f: ["bisect", p.profile, f, p.lock, "--", "touch", p.ran],
        answers(3, directory=NEITHER),
    ),
    "bisect BAD": (
        lambda p, f: ["bisect", p.profile, p.lock, f, "--", "touch", p.ran],
        answers(3, directory=NEITHER),
    ),
    "cache restore": (
        lambda p, f: ["cache", p.profile, "restore", f],
        answers(3, directory=CLICK_DIRECTORY),
    ),
    "apply --from-snapshot": (
        lambda p, f: ["apply", "-y", "--from-snapshot", f, p.profile],
        answers(3, directory=(2, "envlock-snapshot.json: no snapshot here")),
    ),
    # A checkpoint is known by its name first: a huge "pylock" is no checkpoint, unread.
    "inspect": (
        lambda p, f: ["inspect", f],
        answers(
            3,
            directory=(2, "no checkpoint files here"),
            huge=(2, "not a checkpoint envlock can read"),
        ),
    ),
    # A venv is a directory holding pyvenv.cfg, read through the agent's gate.
    "init --from": (
        lambda p, f: ["init", p.work / "init-out.toml", "--from", f],
        dict.fromkeys(SHAPES, NOT_A_VENV),
    ),
}
# Path arguments no table above holds, and why: written, never read as a file.
WRITTEN = {
    ("init", "profile"): "the starter profile init writes (never over a file)",
    ("snapshot", "directory"): "where the snapshot is written",
    ("run", "snapshot_dir"): "where the snapshot is written",
}


def assert_refused(done: subprocess.CompletedProcess[str], code: int, words: str) -> None:
    said = done.stdout + done.stderr
    assert done.returncode == code, (done.args, done.returncode, said)
    assert words in said, (done.args, said)
    assert "Traceback" not in said, said


def each(cases: dict[str, list[Any]]) -> dict[str, subprocess.CompletedProcess[str]]:
    """Every command line run side by side (each is refused before it acts: wall time only)."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {name: pool.submit(run, argv) for name, argv in cases.items()}
    return {name: future.result() for name, future in futures.items()}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_profile_of_each_shape_is_refused_by_every_command(project: Project, shape: str) -> None:
    make, words = SHAPES[shape]
    shaped = project.work / f"profile-{shape}.toml"
    if not shaped.exists():
        make(shaped)
    results = each({name: argv(project, shaped) for name, argv in WITH_PROFILE.items()})
    for result in results.values():
        assert_refused(result, 2, words)
    assert not project.ran.exists()


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_lock_of_each_shape_is_refused_by_every_command(project: Project, shape: str) -> None:
    make, words = SHAPES[shape]
    project.lock.unlink()
    make(project.lock)
    try:
        results = each({name: argv(project, project.profile) for name, argv in WITH_LOCK.items()})
    finally:
        project.restore()
    for result in results.values():
        assert_refused(result, 2, words)
    assert not project.ran.exists()


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_other_path_argument_of_each_shape_is_refused(project: Project, shape: str) -> None:
    make, _ = SHAPES[shape]
    shaped = project.work / f"pylock.{shape}.toml"  # diff and bisect go by the name
    if not shaped.exists():
        make(shaped)
    results = each({name: argv(project, shaped) for name, (argv, _) in OTHER.items()})
    for name, result in results.items():
        assert_refused(result, *OTHER[name][1][shape])
    assert not project.ran.exists()
    assert not (project.work / "snap-out").exists()
    assert not (project.work / "init-out.toml").exists()


def test_every_path_argument_of_every_command_is_in_a_table() -> None:
    """A new command or option that takes a path gets a row here (or says why not)."""
    import importlib

    import click

    from envlock.commands import COMMANDS

    tabled = {("run", "artifacts"), ("snapshot", "config_file"), ("cache", "file")}
    tabled |= {("diff", "a"), ("diff", "b"), ("bisect", "good"), ("bisect", "bad")}
    tabled |= {("inspect", "path"), ("apply", "snapshot_dir"), ("init", "from_venv")}
    tabled |= {(name, "profile") for name in WITH_PROFILE}
    missing = []
    for name, module in COMMANDS.items():
        command = importlib.import_module(f"envlock.commands.{module}").command
        for param in command.params:
            pathlike = isinstance(param.type, click.Path) or param.name in ("a", "b", "good", "bad")
            pathlike |= any(opt.startswith("--from") for opt in param.opts)
            key = (name, param.name or "")
            if pathlike and key not in tabled and key not in WRITTEN:
                missing.append(key)
    assert missing == []
