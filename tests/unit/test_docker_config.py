"""[docker] read and compared with the engine's document, purely (envlock/docker/settings.py,
config.py): the rules a contributor starts from."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from envlock.docker.config import device_requests, differences, gpus_of
from envlock.docker.engine import EngineError, api_error
from envlock.docker.settings import DockerSpec, Volume
from envlock.errors import ProfileError, UsageError
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


# -- a Docker fleet: [target] select and hosts ---------------------------------------------------
FLEET = (
    '[profile]\nname = "t"\n[target]\ntype = "docker"\nroot = "/opt/envlock"\n'
    'select = { labels = { role = "trainer" }, name = "train-*" }\n'
)


def fleet_settings(tmp_path: Path, target: str, table: str = "") -> object:
    path = tmp_path / "t.toml"
    path.write_text(target + table + TAIL)
    return load_profile(path).target.settings


def test_a_docker_fleet_reads_its_labels_and_engines(tmp_path: Path) -> None:
    from envlock.targets.docker_fleet import DockerFleet
    from envlock.targets.members import Member

    settings = fleet_settings(
        tmp_path, FLEET + 'hosts = { gpu1 = "ssh://gpu-1", gpu2 = "unix:///run/d.sock" }\n'
    )
    fleet = settings.fleet  # type: ignore[attr-defined]
    assert fleet == DockerFleet(
        (("role", "trainer"),),
        "train-*",
        (("gpu1", "ssh://gpu-1"), ("gpu2", "unix:///run/d.sock")),
    )
    member = settings.member(Member(None, "gpu2", "train-0", "running"))  # type: ignore[attr-defined]
    assert (member.container, member.host, member.node) == ("train-0", "unix:///run/d.sock", "gpu2")
    assert member.member_key == "gpu2/train-0" and member.fleet is None
    one = fleet_settings(tmp_path, FLEET + 'host = "ssh://gpu-1"\n').fleet  # type: ignore[attr-defined]
    assert one.engines == (("ssh://gpu-1", "ssh://gpu-1"),)
    assert fleet_settings(tmp_path, FLEET).fleet.engines == (("default", None),)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("target", "table", "said"),
    [
        (FLEET + 'container = "box"\n', "", "a fleet profile (select) cannot name one container"),
        (
            FLEET + 'host = "ssh://a"\nhosts = { b = "ssh://b" }\n',
            "",
            "one `host` or several `hosts`, not both",
        ),
        (FLEET + 'hosts = { b = "tcp://b:2375" }\n', "", "expected a DOCKER_HOST"),
        (FLEET + 'hosts = { "b c" = "ssh://b" }\n', "", "expected an engine's name"),
        (TARGET + 'hosts = { b = "ssh://b" }\n', "", "several engines are for a fleet profile"),
        (
            TARGET.replace('container = "box"\n', "") + "select = {}\n",
            "",
            "expected the labels (or a name pattern)",
        ),
        (FLEET, '[docker]\nimage = "i"\n', "a [docker] table declares one container"),
        (TARGET.replace('container = "box"\n', ""), "", "or `select` for a fleet"),
    ],
)
def test_a_bad_docker_fleet_is_refused_by_key(
    tmp_path: Path, target: str, table: str, said: str
) -> None:
    with pytest.raises(ProfileError, match=re.escape(said)):
        fleet_settings(tmp_path, target, table)


def test_docker_ps_lines_become_members_and_on_picks_them() -> None:
    from envlock.targets.docker_fleet import parse_ps
    from envlock.targets.members import restrict

    out = (
        "train-1\trunning\trole=trainer,gpu=a100\n"
        "train-0\texited\trole=trainer\n"
        "eval-0\trunning\trole=trainer\n"
    )
    members = parse_ps("gpu1", out, "train-*")
    assert [(m.label, m.status, m.vmid) for m in members] == [
        ("gpu1/train-0", "exited", None),
        ("gpu1/train-1", "running", None),
    ]
    assert members[1].tags == ("gpu=a100", "role=trainer")
    assert [m.name for m in restrict(members, ("gpu=a100",))] == ["train-1"]
    assert [m.name for m in restrict(members, ("train-0",))] == ["train-0"]
    assert [m.name for m in restrict(members, ("gpu1",))] == ["train-0", "train-1"]
    with pytest.raises(UsageError, match="a container's name, an engine's name"):
        restrict(members, ("gpu9",))
