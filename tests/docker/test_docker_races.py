"""[docker] under contention: two applies at once, and the engine stopped under an apply;
the private engines of tests/remote/docker_fixtures.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.docker.test_docker_lifecycle import docker_table
from tests.docker.test_docker_target import ROOT, cli, docker_target
from tests.remote.docker_fixtures import IMAGE, Engine, start_engine, stop_engine
from tests.remote.test_remote import write_profile


def test_two_applies_at_once_converge_to_one_container(
    tmp_path: Path, wheelhouse: Path, vfs_engine: Engine
) -> None:
    """Both find no container and create it: the engine takes one name once, the other
    apply uses that container, and the root's lock orders the builds. On vfs (as this test
    always ran): a create takes seconds, so both applies find no container. (On overlay2 a
    create takes a moment and the second apply can find the first's container created but
    not started, commit it with pause=True while the first starts it, and the first then
    fails with "is not running": a race left to its own issue.)"""
    docker_engine = vfs_engine
    name, volume = f"twice-{tmp_path.name}"[:60], f"tw-{tmp_path.name}"[:60]
    try:
        table = docker_table(IMAGE, volume, wheelhouse)
        profile = write_profile(
            tmp_path / "p", wheelhouse, docker_target(docker_engine, name), extra=table
        )
        argv = [sys.executable, "-m", "envlock", "apply", "-y", str(profile)]
        both = [
            subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)
        ]
        done = [(proc.wait(timeout=600), *proc.communicate()) for proc in both]
        assert [code for code, _, _ in done] == [0, 0], "\n".join(out + err for _, out, err in done)
        listed = docker_engine.docker("ps", "-a", "--filter", f"name=^{name}$", "-q")
        assert len(listed.stdout.split()) == 1
        assert cli("check", profile).returncode == 0
        gens = docker_engine.exec(name, "ls", f"{ROOT}/generations")
        assert len(gens.stdout.split()) == 1, gens.stdout  # built once
    finally:
        docker_engine.docker("rm", "-f", name)
        docker_engine.docker("volume", "rm", "-f", volume)


def test_the_engine_stopped_mid_apply_then_a_rerun_converges(
    tmp_path: Path, wheelhouse: Path, second_engine: Engine
) -> None:
    """dockerd stops while the agent builds (its containers stop with it): the apply fails
    with a clear message (exit 3); once the engine is back, apply again converges."""
    engine, name = second_engine, "mid-apply"
    table = docker_table(IMAGE, "mid-root", wheelhouse)
    profile = write_profile(tmp_path / "p", wheelhouse, docker_target(engine, name), extra=table)
    argv = [sys.executable, "-m", "envlock", "apply", "-y", str(profile)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if "installing" in line:
            stop_engine(engine, remove=False)
            break
    out, rest = proc.communicate(timeout=300)
    said = "".join(seen) + rest
    assert proc.returncode == 3, out + said
    assert "Traceback" not in said and "error:" in said, said

    again = start_engine(engine.directory, engine.driver)
    try:
        healed = cli("apply", "-y", profile)
        assert healed.returncode == 0, healed.stdout + healed.stderr
        assert f"started container {name}" in healed.stdout, healed.stdout
        assert cli("check", profile).returncode == 0
    finally:
        stop_engine(again, remove=False)
