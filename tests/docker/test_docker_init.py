"""`envlock init --from` of a venv inside a running Docker container, then adopted, run and
rolled back to (as tests/remote/test_init.py does through pct)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from envlock.profile.read import load_profile
from tests.docker.test_docker_target import ROOT
from tests.remote.docker_fixtures import Engine, MakeDocker
from tests.remote.test_init import PIP, tree_sums
from tests.remote.test_remote import envlock_env

CONTAINER_VENV = "/srv/venv"


def test_init_from_in_a_container_then_adopt_run_and_rollback(
    tmp_path: Path, wheelhouse: Path, docker_engine: Engine, docker_container: MakeDocker
) -> None:
    """`init --from` of a pip venv inside a running container, on the engine DOCKER_HOST
    names (no [target] host: the docker CLI's default)."""
    box = docker_container(mounts=[(wheelhouse, str(wheelhouse))])

    def inside(*argv: str) -> subprocess.CompletedProcess[str]:
        done = docker_engine.exec(box, *argv)
        assert done.returncode == 0, done.stderr
        return done

    inside("python3", "-m", "venv", CONTAINER_VENV)
    inside(f"{CONTAINER_VENV}/bin/python", *PIP, str(wheelhouse), "torch==2.11.0+cpu", "trainutil")
    before = inside(*tree_sums(CONTAINER_VENV)).stdout
    env = {**envlock_env(), "DOCKER_HOST": docker_engine.host}

    def envlock(*args: str | Path) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "envlock", *map(str, args)]
        return subprocess.run(argv, capture_output=True, text=True, env=env)

    profile = tmp_path / "box.toml"
    made = envlock(
        "init", profile, "--target", "docker", "--container", box,
        "--root", ROOT, "--venv", CONTAINER_VENV,
        "--find-links", str(wheelhouse), "--offline", "--from", CONTAINER_VENV, "--json",
    )  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    assert json.loads(made.stdout)["installed"] >= 4
    assert load_profile(profile).target.type == "docker"
    assert f'container = "{box}"' in profile.read_text()

    applied = envlock("apply", "--adopt", "-y", profile)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert inside("readlink", CONTAINER_VENV).stdout.strip() == f"{ROOT}/current"
    ran = envlock("run", profile, "--", "python", "-c", "import sys, trainutil; print(sys.prefix)")
    assert ran.returncode == 0 and f"{ROOT}/generations/1-" in ran.stdout, ran.stderr
    assert envlock("rollback", profile).returncode == 0
    deep = envlock("check", "--deep", profile)
    assert deep.returncode == 0 and "matches its manifest" in deep.stdout, deep.stdout
    gen0 = inside("readlink", f"{ROOT}/current").stdout.strip()
    assert gen0.startswith("generations/0-")
    assert inside(*tree_sums(f"{ROOT}/{gen0}")).stdout == before
