"""[docker]: the container envlock creates, recreates (its volumes kept), commits before a
change and rolls back to, through the Docker SDK against the session's private engine. GPU
requests are checked as the engine records them (HostConfig.DeviceRequests): no GPU here."""

from __future__ import annotations

import json
from pathlib import Path

from tests.docker.test_docker_target import ROOT, cli, docker_target
from tests.projects import toml_list
from tests.remote.docker_fixtures import Engine
from tests.remote.test_remote import write_profile

# The container's main process. `sleep infinity` as PID 1 ignores SIGTERM (no handler, and
# the kernel drops default-action signals to a namespace's init), so every `docker stop` of a
# recreate, a rollback or a stopping engine waited the full stop timeout (10 s) before its
# SIGKILL; a shell that exits on SIGTERM stops at once. Nothing a test checks depends on it.
COMMAND = ["sh", "-c", "trap 'exit 0' TERM; sleep infinity & wait"]


def docker_table(image: str, volume: str, wheelhouse: Path, **extra: str) -> str:
    lines = [
        "[docker]",
        f'image = "{image}"',
        f"command = {toml_list(COMMAND)}",
        'network = "none"',
        f'volumes = [{{ source = "{volume}", path = "{ROOT}" }}, '
        f'{{ source = "{wheelhouse}", path = "{wheelhouse}", ro = true }}]',
        "keep-commits = 2",
        *(f"{key} = {value}" for key, value in extra.items()),
    ]
    return "\n".join(lines)


def inspect(engine: Engine, name: str) -> dict:
    done = engine.docker("inspect", name)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)[0]


def test_create_recreate_with_volumes_kept_commit_and_rollback(
    tmp_path: Path, wheelhouse: Path, docker_engine: Engine, docker_image: str
) -> None:
    name, volume = f"made-{tmp_path.name}"[:60], f"root-{tmp_path.name}"[:60]
    try:
        table = docker_table(docker_image, volume, wheelhouse, **{"shm-size": '"64m"'})
        profile = write_profile(
            tmp_path / "p", wheelhouse, docker_target(docker_engine, name), extra=table
        )
        planned = cli("plan", "--json", profile)
        assert planned.returncode == 1, planned.stderr
        assert [c["kind"] for c in json.loads(planned.stdout)["container"]] == ["container"]
        applied = cli("apply", "-y", profile)
        assert applied.returncode == 0, applied.stderr
        assert f"created container {name} on {docker_engine.host} from {docker_image}" in (
            applied.stdout
        )
        assert cli("check", profile).returncode == 0
        assert inspect(docker_engine, name)["HostConfig"]["ShmSize"] == 64 << 20

        # A changed setting: plan says it recreates; apply commits first, then recreates
        # from the same image, and the environment on the volume is found as it was.
        profile.write_text(profile.read_text().replace('shm-size = "64m"', 'shm-size = "128m"'))
        assert cli("lock", profile).returncode == 0
        planned = cli("plan", profile)
        assert planned.returncode == 1
        assert "shm-size" in planned.stdout and "recreates the container" in planned.stdout
        changed = cli("apply", "-y", profile)
        assert changed.returncode == 0, changed.stderr
        assert f"recreated container {name}" in changed.stdout, changed.stdout
        assert "its volumes kept" in changed.stdout
        assert "building" not in changed.stderr, changed.stderr
        assert inspect(docker_engine, name)["HostConfig"]["ShmSize"] == 128 << 20
        assert cli("check", profile).returncode == 0

        listed = cli("generations", "--container", "--json", profile)
        assert listed.returncode == 0, listed.stderr
        commits = json.loads(listed.stdout)["snapshots"]
        assert [c["name"].split(":")[0] for c in commits] == [f"envlock-{name}"]
        assert commits[0]["generation"].startswith("1-")
        said = cli("generations", "--container", profile)
        assert said.returncode == 0 and "kept by keep-commits" in said.stdout, said.stdout
        assert "keep-snapshots" not in said.stdout

        # The container's own files (not the volume's) go back with it.
        assert docker_engine.exec(name, "touch", "/etc/after-commit").returncode == 0
        back = cli("rollback", "--container", profile)
        assert back.returncode == 0, back.stderr
        assert commits[0]["name"] in back.stdout
        assert docker_engine.exec(name, "test", "-e", "/etc/after-commit").returncode == 1
        assert inspect(docker_engine, name)["Config"]["Image"] == commits[0]["name"]
        assert cli("run", profile, "--", "python", "-c", "import trainutil").returncode == 1
    finally:
        docker_engine.docker("rm", "-f", name)
        docker_engine.docker("volume", "rm", "-f", volume)


def test_gpus_become_the_engine_s_device_requests(
    tmp_path: Path, wheelhouse: Path, docker_engine: Engine, docker_image: str
) -> None:
    """No GPU and no NVIDIA runtime here: the engine records the request, then refuses to
    start the container, and envlock says what is missing (exit 3)."""
    for gpus, expected in (
        ('"all"', {"Count": -1, "DeviceIDs": []}),
        (toml_list(["0", "GPU-3b2f"]), {"Count": 0, "DeviceIDs": ["0", "GPU-3b2f"]}),
    ):
        name, volume = f"gpu-{len(gpus)}-{tmp_path.name}"[:60], f"g-{tmp_path.name}"[:60]
        try:
            table = docker_table(docker_image, volume, wheelhouse, gpus=gpus)
            base = tmp_path / str(len(gpus))
            profile = write_profile(
                base, wheelhouse, docker_target(docker_engine, name), extra=table
            )
            refused = cli("apply", "-y", profile)
            assert refused.returncode == 3, refused.stdout + refused.stderr
            assert "cannot give the container GPUs" in refused.stderr
            assert "NVIDIA container toolkit" in refused.stderr
            (request,) = inspect(docker_engine, name)["HostConfig"]["DeviceRequests"]
            assert request["Capabilities"] == [["gpu"]]
            assert {k: request[k] for k in expected} == expected
        finally:
            docker_engine.docker("rm", "-f", name)
            docker_engine.docker("volume", "rm", "-f", volume)


def test_engine_errors_of_the_lifecycle_are_one_message_each(
    tmp_path: Path, wheelhouse: Path, docker_engine: Engine, docker_image: str
) -> None:
    name = f"err-{tmp_path.name}"[:60]
    table = docker_table("envlock-test:no-such-tag", "vv", wheelhouse)
    profile = write_profile(
        tmp_path / "a", wheelhouse, docker_target(docker_engine, name), extra=table
    )
    missing = cli("apply", "-y", profile)
    assert missing.returncode == 3, missing.stderr
    assert "the image envlock-test:no-such-tag is not on the Docker engine" in missing.stderr
    assert "envlock never pulls" in missing.stderr

    down = docker_target(docker_engine, name)
    down[2] = f'host = "unix://{tmp_path}/none.sock"'
    table = docker_table(docker_image, "vv", wheelhouse)
    profile = write_profile(tmp_path / "b", wheelhouse, down, extra=table)
    for command in ("plan", "apply"):
        refused = cli(command, *(["-y"] if command == "apply" else []), profile)
        assert refused.returncode == 3, refused.stderr
        assert f"the Docker engine at unix://{tmp_path}/none.sock does not answer" in refused.stderr
        assert "Traceback" not in refused.stderr
