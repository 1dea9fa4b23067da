"""`envlock apply --adopt`: a venv built by hand with pip (CPU torch) becomes generation 0
as it is, the lock is built beside it as generation 1, and a rollback returns to the
original environment — running, through its old path and shebangs, byte for byte as it was."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envlock.errors import UsageError
from envlock.profile.read import load_profile
from envlock.reconcile.drift import compute_drift
from envlock.reconcile.plan import make_plan
from envlock.reconcile.state import FileChange, FilesReport, Generation, VenvLink
from tests.conftest import Envlock
from tests.support import TORCH_CPU_VERSION, machine_find_links
from tests.unit.test_core import GEN, HASH, ROOT, VENV, expect, state

PYTHON = f"{sys.version_info[0]}.{sys.version_info[1]}"
SHOW = "import sys, numpy, torch; print(torch.__version__, sys.prefix)"


def tree_digest(root: Path) -> str:
    """Every path, mode and byte under `root` but envlock's own `.envlock/` (the manifest and
    generation.json adoption adds beside the venv's files)."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if rel.parts[0] == ".envlock":
            continue
        stat = path.lstat()
        digest.update(f"{rel}\0{stat.st_mode}\0".encode())
        if path.is_symlink():
            digest.update(os.readlink(path).encode())
        elif path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


@pytest.fixture(scope="module")
def pip_torch_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv built by pip, as people build them by hand: CPU torch and numpy (pip's
    INSTALLER and RECORD habits, pip itself installed, console scripts whose shebangs name
    the venv's absolute path)."""
    venv = tmp_path_factory.mktemp("adopt") / "venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    links = [arg for link in machine_find_links() for arg in ("--find-links", link)]
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-compile", *links]
    proc = subprocess.run(
        [*pip, f"torch=={TORCH_CPU_VERSION}", "numpy"], capture_output=True, text=True
    )
    assert proc.returncode == 0, f"pip could not install CPU torch:\n{proc.stderr}"
    return venv


@pytest.fixture
def no_bytecode(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing the test runs writes __pycache__ into the environment it compares."""
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")


def test_adopt_keeps_the_pip_venv_as_generation_0_and_rollback_returns_to_it(
    pip_torch_venv: Path, envlock: Envlock, no_bytecode: None
) -> None:
    venv = pip_torch_venv
    before = tree_digest(venv)
    profile = venv.parent / "train.toml"
    links = [arg for link in machine_find_links() for arg in ("--find-links", link)]
    made = envlock("init", profile, "--from", venv, "--venv", venv, *links, "--json")
    # 0: the lock installs exactly what is installed (1 only if the index moved a dependency
    # since pip installed it: the round trip below holds either way).
    assert made.returncode in (0, 1), made.stdout + made.stderr
    imported = json.loads(made.stdout)
    assert imported["comparison"]["not_locked"] == {} and imported["lock_file"]
    assert imported["next"][0].startswith("envlock apply --adopt ")
    prof = load_profile(profile)
    assert Path(prof.target.venv) == venv
    root = Path(prof.target.root)

    applied = envlock("apply", "--adopt", "-y", profile, "--json")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    plan = [a["kind"] for a in json.loads(applied.stdout)["actions"]]
    assert plan[0] == "adopt" and "build" in plan
    # The venv path is the link now; the directory itself moved, unchanged, under the root.
    assert venv.is_symlink() and os.readlink(venv) == str(root / "current")
    (gen0,) = (root / "generations").glob("0-*")
    meta = json.loads((gen0 / ".envlock" / "generation.json").read_text())
    assert meta["adopted_from"] == str(venv) and meta["number"] == 0
    ran = envlock("run", profile, "--", "python", "-c", SHOW)
    assert ran.returncode == 0, ran.stderr
    version, prefix = ran.stdout.split()
    assert version == TORCH_CPU_VERSION and Path(prefix).name.startswith("1-")

    rolled = envlock("rollback", profile)
    assert rolled.returncode == 0, rolled.stderr
    assert os.readlink(root / "current") == f"generations/{gen0.name}"
    deep = envlock("check", "--deep", profile, "--json")
    assert deep.returncode == 0, deep.stdout + deep.stderr
    report = json.loads(deep.stdout)
    assert report["clean"] and report["deep"] and report["files_checked"] > 1000
    assert report["generation"] == gen0.name
    resync = envlock("rollback", "--resync", profile)
    assert resync.returncode == 2 and "no lock to re-sync it to" in resync.stderr
    ran = envlock("run", profile, "--", "python", "-c", SHOW)
    assert ran.returncode == 0, ran.stderr
    version, prefix = ran.stdout.split()
    assert version == TORCH_CPU_VERSION and Path(prefix) == gen0
    # The old habits: pip's own script (its shebang names the venv's old absolute path) and
    # `source VENV/bin/activate` reach the original environment.
    pip = subprocess.run([venv / "bin" / "pip", "--version"], capture_output=True, text=True)
    assert pip.returncode == 0 and f"{venv}/lib/python{PYTHON}/site-packages/pip" in pip.stdout
    activated = subprocess.run(
        ["bash", "-c", f'. "{venv}/bin/activate" && python -c "import sys; print(sys.prefix)"'],
        capture_output=True,
        text=True,
    )
    assert activated.stdout.split() == [str(venv)], activated.stderr
    assert tree_digest(gen0) == before, "the adopted environment changed"

    again = envlock("apply", "--adopt", "-y", profile)
    assert again.returncode == 2 and "already managed by envlock" in again.stderr


def test_a_real_venv_dir_is_refused_without_adopt_and_adopt_of_nothing_is_a_plain_apply(
    tmp_path: Path, wheelhouse: Path, envlock: Envlock
) -> None:
    profile = tmp_path / "s.toml"
    made = envlock("init", profile, "--find-links", wheelhouse, "--offline")
    assert made.returncode == 0, made.stderr
    assert envlock("lock", profile).returncode == 0
    venv = Path(load_profile(profile).target.venv)
    venv.mkdir(parents=True)
    (venv / "notes.txt").write_text("mine\n")
    not_venv = envlock("apply", "--adopt", "-y", profile)
    assert not_venv.returncode == 2 and "not a venv (no pyvenv.cfg)" in not_venv.stderr
    assert (venv / "notes.txt").read_text() == "mine\n" and not venv.is_symlink()
    shutil.rmtree(venv)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    plain = envlock("apply", "-y", profile)
    assert plain.returncode == 2 and "envlock apply --adopt" in plain.stderr, plain.stderr
    assert venv.is_dir() and not venv.is_symlink() and (venv / "pyvenv.cfg").is_file()
    shutil.rmtree(venv)
    nothing = envlock("apply", "--adopt", "-y", profile)
    assert nothing.returncode == 0, nothing.stderr
    assert "does not exist: nothing to adopt, a plain apply" in nothing.stdout + nothing.stderr
    root = Path(load_profile(profile).target.root)
    assert [g.name[:2] for g in (root / "generations").iterdir()] == ["1-"]
    assert venv.is_symlink()


# -- the pure core: what apply --adopt plans, how an adopted generation is judged ----------
FRESH = dict(
    generations=(),
    current=None,
    in_generation=False,
    packages=None,
    torch=None,
    files=None,
    cache=None,
    scripts=None,
)


def test_adopt_plans_generation_0_first_then_the_lock_as_generation_1() -> None:
    observed = state(venv_link=VenvLink("directory", venv=True), **FRESH)
    plan = make_plan(expect(), observed, compute_drift(expect(), observed), adopt=True)
    kinds = [a.kind for a in plan.actions]
    assert kinds[:4] == ["adopt", "build", "cache-dir", "switch"], kinds
    assert "link-venv" not in kinds  # adoption links the venv path itself
    assert plan.actions[0].args == {"number": 0}
    assert plan.actions[1].args["number"] == 1


@pytest.mark.parametrize(
    ("link", "said"),
    [
        (VenvLink("symlink", f"{ROOT}/current"), "already managed by envlock"),
        (VenvLink("directory", venv=False), "not a venv (no pyvenv.cfg)"),
        (VenvLink("file"), "exists and is a real file"),
    ],
)
def test_adopt_refuses_what_is_not_a_venv_of_its_own(link: VenvLink, said: str) -> None:
    observed = state(venv_link=link)
    with pytest.raises(UsageError, match=re.escape(said)):
        make_plan(expect(), observed, compute_drift(expect(), observed), adopt=True)


def test_without_adopt_the_refusal_names_it() -> None:
    observed = state(venv_link=VenvLink("directory", venv=True), **FRESH)
    with pytest.raises(UsageError) as refused:
        make_plan(expect(), observed, compute_drift(expect(), observed))
    assert "envlock apply --adopt" in (refused.value.hint or "")


def test_a_held_adopted_generation_is_judged_by_its_manifest_alone() -> None:
    adopted = Generation(0, "0-abcdefabcdef", "abcdefabcdef", True, {"adopted_from": VENV})
    observed = state(
        generations=(adopted, Generation(1, GEN, HASH, True)),
        current=adopted.name,
        packages={"torch": "2.13.0+cpu", "pip": "24.0"},  # not the lock's: no lock built it
    )
    assert compute_drift(expect(adopted=True), observed) == []
    # Against the profile's lock (what apply plans from), it is another generation.
    assert "generation-lock" in [d.kind for d in compute_drift(expect(), observed)]
    changed = state(
        generations=observed.generations,
        current=adopted.name,
        packages=observed.packages,
        files=FilesReport(
            modified=(
                FileChange("lib/python3.11/site-packages/torch/x.py", "torch", why="edited"),
            ),
            checked=100,
        ),
    )
    found = compute_drift(expect(adopted=True), changed)
    assert [d.kind for d in found] == ["file-modified"]


# -- a crash mid-adopt: the old venv in place, or a complete generation 0 -------------------
def crash(*args: object, **kwargs: object) -> None:
    raise SystemExit("the power went out here")


@pytest.mark.parametrize("where", ["os.rename", "symlink_atomic"])
def test_a_crash_mid_adopt_leaves_the_old_venv_or_a_complete_generation_0(
    where: str, tmp_path: Path, wheelhouse: Path, envlock: Envlock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent's adoption stopped at its move (before it: the venv where it was) or at its
    links (after it: a complete generation 0, nothing at the venv path); the next apply
    carries on from either, and the environment's files never change."""
    from envlock.agent import adopt as agent_adopt

    venv, root = tmp_path / "venv", tmp_path / "root"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    before = tree_digest(venv)
    profile = tmp_path / "c.toml"
    where_flags = ("--root", root, "--venv", venv, "--find-links", wheelhouse, "--offline")
    assert envlock("init", profile, *where_flags).returncode == 0
    assert envlock("lock", profile).returncode == 0
    (root / "generations").mkdir(parents=True)
    if where == "os.rename":
        monkeypatch.setattr(agent_adopt.os, "rename", crash)
    else:
        monkeypatch.setattr(agent_adopt, "symlink_atomic", crash)
    with pytest.raises(SystemExit):
        agent_adopt.do_adopt({"root": str(root), "venv": str(venv)}, {"number": 0})
    monkeypatch.undo()
    if where == "os.rename":
        assert venv.is_dir() and not venv.is_symlink() and tree_digest(venv) == before
        assert list((root / "generations").iterdir()) == []
        carried = envlock("apply", "--adopt", "-y", profile)
    else:
        assert not os.path.lexists(venv)
        (gen0,) = (root / "generations").iterdir()
        assert (gen0 / ".envlock" / "generation.json").is_file() and tree_digest(gen0) == before
        carried = envlock("apply", "-y", profile)  # nothing at the venv path: a plain apply
    assert carried.returncode == 0, carried.stdout + carried.stderr
    assert envlock("rollback", profile).returncode == 0
    (gen0,) = (root / "generations").glob("0-*")
    assert os.readlink(root / "current") == f"generations/{gen0.name}"
    assert tree_digest(gen0) == before
    prefix = subprocess.run(
        [venv / "bin" / "python", "-c", "import sys; print(sys.prefix)"],
        capture_output=True,
        text=True,
    )
    assert prefix.stdout.strip() == str(venv)
    assert envlock("check", "--deep", profile).returncode == 0


def test_gc_keeps_what_no_lock_can_rebuild_unless_named_or_included(
    tmp_path: Path, wheelhouse: Path, envlock: Envlock
) -> None:
    """An adopted generation (the only copy of a hand-built venv) and one whose lock file is
    gone stay through gc, named as such in `generations`, `--dry-run` and the prompt; only
    `--include N` or `--include-adopted` removes them."""
    profile = tmp_path / "s.toml"
    assert envlock("init", profile, "--find-links", wheelhouse, "--offline").returncode == 0
    assert envlock("lock", profile).returncode == 0
    prof = load_profile(profile)
    venv, root = Path(prof.target.venv), Path(prof.target.root)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    assert envlock("apply", "--adopt", "-y", profile).returncode == 0
    for pin in ("tinydep==0.9", "tinydep==1.0"):  # generations 2 and 3: 0 and 1 are old
        assert envlock("add", "-y", profile, pin).returncode == 0
    (gen0,) = (root / "generations").glob("0-*")
    (gen1,) = (root / "generations").glob("1-*")
    (gen1 / ".envlock" / "pylock.toml").unlink()  # its lock file is gone
    adopted = f"adopted from {venv}, no lock can rebuild it"
    gone = "its lock file is gone, no lock can rebuild it"

    listed = envlock("generations", profile)
    assert adopted in listed.stdout and gone in listed.stdout, listed.stdout
    assert all(line == line.rstrip() for line in listed.stdout.splitlines()), listed.stdout
    rows = json.loads(envlock("generations", "--json", profile).stdout)["generations"]
    assert [r["irreplaceable"] for r in rows][:2] == [adopted, gone]

    would = envlock("gc", "--keep", "0", "--dry-run", profile)
    assert would.returncode == 0, would.stderr
    assert "nothing to remove" in would.stdout
    assert f"kept {gen0.name}: {adopted}" in would.stdout
    assert "`--include 0` or `--include-adopted`" in would.stdout
    kept = envlock("gc", "-y", "--keep", "0", profile)
    assert kept.returncode == 0 and gen0.is_dir() and gen1.is_dir(), kept.stdout

    named = envlock("gc", "--keep", "0", "--include", "1", "--dry-run", profile)
    assert f"would remove 1 generation(s): {gen1.name} ({gone})" in named.stdout
    assert f"kept {gen0.name}: {adopted}" in named.stdout
    # The question names what stays too, before it is asked (and said once).
    prompt = envlock("gc", "--keep", "0", "--include", "1", profile, input="n\n")
    assert prompt.stdout.count(f"kept {gen0.name}: {adopted}") == 1, prompt.stdout
    assert gen1.is_dir()
    asked = envlock("gc", "--keep", "0", "--include-adopted", profile, input="n\n")
    assert f"{gen0.name} ({adopted})" in asked.stdout, asked.stdout
    assert gen0.is_dir()
    removed = envlock("gc", "-y", "--keep", "0", "--include-adopted", "--json", profile)
    assert removed.returncode == 0, removed.stderr
    (action,) = json.loads(removed.stdout)["actions"]
    assert set(action["irreplaceable"]) == {gen0.name, gen1.name}
    assert not gen0.exists() and not gen1.exists()
