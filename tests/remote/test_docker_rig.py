"""The docker tests' rig itself: a private engine, an imported image, a container without a
network; what every test of the docker target stands on."""

from __future__ import annotations

from tests.remote.docker_fixtures import Engine, MakeDocker


def test_the_private_engine_runs_containers_of_the_suite_s_image(
    docker_engine: Engine, docker_container: MakeDocker
) -> None:
    box = docker_container()
    answer = docker_engine.exec(box, "python3", "-c", "import venv, sys; print(sys.version[:4])")
    assert answer.returncode == 0, answer.stderr
    assert answer.stdout.strip() == "3.11"
    network = docker_engine.docker("inspect", "-f", "{{.HostConfig.NetworkMode}}", box)
    assert network.stdout.strip() == "none"
    assert docker_engine.host.startswith("unix://")
