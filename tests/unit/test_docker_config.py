"""[docker] read and compared with the engine's document, purely (envlock/docker/settings.py,
config.py): the rules a contributor starts from."""

from __future__ import annotations

from pathlib import Path

import pytest

from envlock.docker.config import device_requests, differences, gpus_of
from envlock.docker.engine import EngineError, api_error
from envlock.docker.settings import DockerSpec, Volume
from envlock.errors import ProfileError
from envlock.profile.read import load_profile

TARGET = (
    '[profile]\nname = "t"\n[target]\ntype = "docker"\ncontainer = "box"\nroot = "/opt/envlock"\n'
)
TAIL = '[python]\nversion = "3.11"\n[dependencies]\npackages = []\n'


def read(tmp_path: Path, table: str, target: str = TARGET) -> DockerSpec:
    path = tmp_path / "t.toml"
    path.write_text(target + table + TAIL)
    spec = load_profile(path).container
    assert isinstance(spec, DockerSpec)
    return spec


def test_a_docker_table_reads_into_its_spec(tmp_path: Path) -> None:
    spec = read(
        tmp_path,
        '[docker]\nimage = "img:1"\ngpus = ["0", "1"]\nshm-size = "16g"\nipc = "host"\n'
        'volumes = [{ source = "root", path = "/opt/envlock" }, '
        '{ source = "/data", path = "/data", ro = true }]\n'
        'env = { NCCL_DEBUG = "WARN" }\nlabels = { team = "vision" }\n',
    )
    assert spec.name == "box" and spec.image == "img:1" and spec.gpus == ("0", "1")
    assert spec.shm_size == 16 << 30 and spec.ipc == "host"
    assert spec.volumes == (Volume("root", "/opt/envlock"), Volume("/data", "/data", True))
    assert [v.kind for v in spec.volumes] == ["volume", "bind"]
    assert spec.env == (("NCCL_DEBUG", "WARN"),) and spec.labels == (("team", "vision"),)
    assert spec.repository == "envlock-box" and spec.keep_commits == 3


@pytest.mark.parametrize(
    ("table", "said"),
    [
        ('[docker]\nimage = "i"\ngpus = 2\n', 'expected "all" or an array of device ids'),
        ('[docker]\nimage = "i"\nshm-size = "lots"\n', 'expected a size such as "16g"'),
        ('[docker]\nimage = "i"\nipc = "hots"\n', "expected one of private, shareable, host"),
        ('[docker]\nimage = "i"\nname = "other"\n', "expected the container [target] names"),
        ('[docker]\nimage = "i"\nvolumes = [{ source = "x y", path = "/a" }]\n', "volume's name"),
        ('[docker]\nimage = "i"\nvolumes = [{ source = "vv", path = "a" }]\n', "absolute path"),
        ('[docker]\nimage = "i"\nkeep-commits = 0\n', "expected an integer >= 1"),
        ('[docker]\nimage = "i"\nprivileged = true\n', "unknown key"),
        ('[docker]\nimage = "-i"\n', "expected an image reference"),
        ("[container]\nostemplate = 'x'\nrootfs = 'l:8'\n", "only applies to proxmox-lxc"),
    ],
)
def test_a_bad_docker_table_is_refused_by_key(tmp_path: Path, table: str, said: str) -> None:
    with pytest.raises(ProfileError) as refused:
        read(tmp_path, table)
    assert said in str(refused.value)


def test_docker_applies_to_docker_targets_only(tmp_path: Path) -> None:
    local = '[profile]\nname = "t"\n[target]\ntype = "local"\n'
    with pytest.raises(ProfileError, match=r"\[docker\] only applies to docker targets"):
        read(tmp_path, '[docker]\nimage = "i"\n', local)


def spec(**changes: object) -> DockerSpec:
    base = DockerSpec(name="box", image="img:1", volumes=(Volume("root", "/opt/envlock"),))
    return DockerSpec(**{**base.__dict__, **changes})


ENGINE = {
    "Config": {"Image": "img:1", "Env": ["PATH=/bin", "A=1"], "Labels": {"x": "y"}, "Cmd": ["sh"]},
    "HostConfig": {"ShmSize": 67108864, "IpcMode": "private", "NetworkMode": "none"},
    "Mounts": [
        {"Type": "volume", "Name": "root", "Destination": "/opt/envlock", "RW": True},
        {"Type": "tmpfs", "Destination": "/tmp"},
    ],
}


def test_only_what_the_table_declares_is_compared() -> None:
    assert differences(spec(), ENGINE) == []
    found = differences(
        spec(shm_size=128 << 20, env=(("A", "2"),), gpus="all", labels=(("x", "y"),)), ENGINE
    )
    assert [(d.key, d.expected, d.actual) for d in found] == [
        ("gpus", "all", "none"),
        ("shm-size", str(128 << 20), str(64 << 20)),
        ("env.A", "2", "1"),
    ]
    moved = differences(spec(volumes=(Volume("root", "/opt/envlock", ro=True),)), ENGINE)
    assert [d.key for d in moved] == ["volumes"]


def test_gpus_are_docker_run_s_device_requests_and_read_back() -> None:
    assert device_requests(None) == []
    (every,) = device_requests("all")
    assert (every["Count"], every["Capabilities"]) == (-1, [["gpu"]])
    assert gpus_of(device_requests("all")) == "all"
    assert gpus_of(device_requests(("0", "GPU-1"))) == ("0", "GPU-1")
    # As the engine stores them ("all": no ids, an empty list).
    assert gpus_of([{"Count": -1, "DeviceIDs": [], "Capabilities": [["gpu"]]}]) == "all"
    assert gpus_of([{"Count": -1, "Capabilities": [["compute"]]}]) is None


def test_an_engine_refusal_is_said_in_its_own_words() -> None:
    from docker.errors import APIError

    class Response:
        status_code = 409
        reason = "Conflict"

    conflict = APIError(
        "409", Response(), 'Conflict. The container name "/box" is already in use by container'
    )
    said = api_error(conflict, "unix:///s", "box")
    assert isinstance(said, EngineError) and said.exit_code == 3
    assert "a container named box already exists" in said.message


# The docker CLI's own words (20.10 and 28), as raw output → the error it becomes.
CLI_WORDS = [
    (
        "permission denied while trying to connect to the Docker daemon socket at "
        'unix:///var/run/docker.sock: Get "http://%2Fvar%2Frun%2Fdocker.sock/v1.24/containers'
        '/box/json": dial unix /var/run/docker.sock: connect: permission denied',
        "EnginePermission",
        "permission denied on the Docker engine's socket",
    ),
    (
        "Cannot connect to the Docker daemon at unix:///s. Is the docker daemon running?",
        "EngineUnreachable",
        "does not answer",
    ),
    ("Error response from daemon: No such container: box", "ContainerMissing", "does not exist"),
    (
        "Error response from daemon: Container 0123abcd is not running",
        "ContainerNotRunning",
        "is not running",
    ),
]


@pytest.mark.parametrize(("said", "kind", "message"), CLI_WORDS)
def test_the_docker_cli_s_own_failures_are_one_error_each(
    said: str, kind: str, message: str
) -> None:
    from envlock.targets.docker import DockerSettings, DockerTransport

    failure = DockerTransport(DockerSettings("box", "unix:///s")).failure_of(said)
    assert failure is not None and type(failure).__name__ == kind
    assert message in failure.message and failure.exit_code == 3


def test_the_sdk_s_permission_refusal_is_said_as_such() -> None:
    from envlock.docker.engine import unreachable

    said = unreachable(
        OSError("('Connection aborted.', PermissionError(13, 'Permission denied'))"), "unix:///s"
    )
    assert "permission denied on the Docker engine's socket (unix:///s)" in said.message
    assert "`docker` group" in str(said.hint)
