"""An engine over `ssh://`, for real: a loopback sshd whose sessions reach the session's
private engine (tests/remote/docker_fixtures.py docker_sshd). `docker exec` goes through the
docker CLI's own ssh; the [docker] lifecycle through the SDK over envlock's dial bridge
(envlock/docker/bridge.py: the same ssh, no paramiko)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from tests.docker.test_docker_lifecycle import docker_table, inspect
from tests.docker.test_docker_target import ROOT, docker_target
from tests.remote.docker_fixtures import DockerNode, Engine
from tests.remote.test_remote import envlock_env, write_profile


def over_ssh(node: DockerNode, *args: str | Path) -> subprocess.CompletedProcess[str]:
    """The CLI with the node's `ssh` first on PATH (as a user's ~/.ssh/config would)."""
    return subprocess.run(
        [sys.executable, "-m", "envlock", *map(str, args)],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env=envlock_env(PATH=node.path),
    )


def ssh_target(node: DockerNode, engine: Engine, container: str, host: str = "") -> list[str]:
    lines = docker_target(engine, container)
    lines[2] = f'host = "{host or node.host}"'
    return lines


def test_a_container_and_its_lifecycle_on_an_engine_over_ssh(
    tmp_path: Path,
    wheelhouse: Path,
    docker_engine: Engine,
    docker_image: str,
    docker_sshd: DockerNode,
) -> None:
    # [docker] over ssh: the SDK creates the container on the node's engine (and finds it
    # as declared afterwards); the environment goes in through `docker -H ssh://node exec`.
    name, volume = f"ssh-{tmp_path.name}"[:60], f"sshroot-{tmp_path.name}"[:60]
    try:
        table = docker_table(docker_image, volume, wheelhouse)
        made = write_profile(
            tmp_path / "made",
            wheelhouse,
            ssh_target(docker_sshd, docker_engine, name),
            extra=table,
        )
        planned = over_ssh(docker_sshd, "plan", "--json", made)
        assert planned.returncode == 1, planned.stderr
        assert [c["kind"] for c in json.loads(planned.stdout)["container"]] == ["container"]
        created = over_ssh(docker_sshd, "apply", "-y", made)
        assert created.returncode == 0, created.stderr
        assert f"created container {name} on ssh://node" in created.stdout, created.stdout
        assert inspect(docker_engine, name)["Config"]["Image"] == docker_image
        assert over_ssh(docker_sshd, "check", made).returncode == 0
        ran = over_ssh(
            docker_sshd, "run", made, "--", "python", "-c", "import sys; print(sys.prefix)"
        )
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.startswith(f"{ROOT}/generations/1-"), ran.stdout
        sessions = docker_sshd.node.sshd_log.read_text()
        assert "Accepted publickey for root" in sessions  # it went through the sshd
    finally:
        docker_engine.docker("rm", "-f", name)
        docker_engine.docker("volume", "rm", "-f", volume)

    # A host ssh cannot reach: one message, exit 3, for docker exec and for the SDK alike
    # (the same profile and lock, another host; without [docker], for docker exec).
    lost = tmp_path / "lost"
    shutil.copytree(tmp_path / "made", lost)
    text = (lost / "remote.toml").read_text().replace(docker_sshd.host, "ssh://nowhere.invalid")
    (lost / "remote.toml").write_text(text)
    (lost / "bare.toml").write_text(text[: text.index("[docker]")])
    for command, profile in (("check", "bare.toml"), ("plan", "remote.toml")):
        refused = over_ssh(docker_sshd, command, lost / profile)
        assert refused.returncode == 3, refused.stdout + refused.stderr
        assert "the Docker engine at ssh://nowhere.invalid does not answer" in refused.stderr
        assert "nowhere.invalid" in refused.stderr.split("does not answer")[1]
        assert "Traceback" not in refused.stderr
