"""A real Docker engine for the docker target's tests: a private `dockerd` per test session.

Registered by tests/conftest.py. `docker.io` from the distribution (tests/setup, Makefile's
system-deps); its daemon runs on a socket of the session's own, with its own data and exec
roots, `--storage-driver overlay2 --iptables=false --bridge=none` (no host network touched;
vfs_engine: vfs, whose creates take seconds). No registry is reachable: the image is
imported (`docker import`) from the
suite's debootstrap rootfs (tests/remote/rootfs.sh, python3 and python3-venv included), and
every container runs with `--network none`.

Fixtures:
  docker_engine     (session) Engine: host (unix://SOCK), the daemon's directory; stopped
                    at the end.
  docker_image      (session) the imported image's tag.
  other_engine      (session) a second engine with the image, on its own socket and data
                    root: a fleet's second host.
  second_engine     (function) another engine with the image, the test's own to stop and start.
  vfs_engine        (function) another engine with the image, on the vfs storage driver.
  docker_sshd       (session) DockerNode: an sshd on loopback whose sessions reach the
                    session's engine as their default one (DOCKER_HOST), `host` the
                    ssh://node that reaches it, `path` a PATH whose `ssh` knows `node`.
  docker_container  (function) make(name=None, mounts=(), engine=None) -> the name of a
                    running container; every container made is removed at teardown.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.remote.fixtures import SYSTEM_DEPS, Node, _serve_node, _tail, build_rootfs

IMAGE = "envlock-test:bookworm"
DOCKERD = "/usr/sbin/dockerd"
# The docker CLI of the distribution's package (envlock finds `docker` on PATH; so do tests).
DOCKER_PACKAGE = "docker.io"


@dataclass(frozen=True)
class Engine:
    """A private Docker engine: `host` is its DOCKER_HOST (unix://SOCK)."""

    host: str
    directory: Path
    pid: int
    driver: str = "overlay2"

    def docker(self, *argv: str, input: str | None = None, timeout: float = 300):
        """The docker CLI against this engine."""
        return subprocess.run(
            ["docker", "-H", self.host, *argv],
            capture_output=True,
            text=True,
            input=input if input is not None else "",
            timeout=timeout,
            check=False,
        )

    def exec(self, container: str, *argv: str, input: str | None = None):
        return self.docker("exec", "-i", container, *argv, input=input)

    def exec_starts(self, container: str, since: float, until: float) -> int:
        """`docker exec`s the engine started in `container` between two times (its events):
        each one round trip of envlock's."""
        listed = self.docker(
            "events",
            "--since",
            f"{since:.3f}",
            "--until",
            f"{until:.3f}",
            "--filter",
            f"container={container}",
            "--filter",
            "event=exec_start",
            "--format",
            "{{.Action}}",
        )
        assert listed.returncode == 0, listed.stderr
        return sum(1 for line in listed.stdout.splitlines() if line.startswith("exec_start"))


def start_engine(d: Path, driver: str = "overlay2") -> Engine:
    """dockerd on d/sock, with its data and exec roots under d and the storage driver
    `driver`; ready when `docker version` answers. overlay2 (the engine's default) makes a
    container, a commit or a removal cheap; vfs copies the image's files for each."""
    for sub in ("data", "exec"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    sock, log = d / "sock", d / "dockerd.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                DOCKERD,
                "--data-root",
                str(d / "data"),
                "--exec-root",
                str(d / "exec"),
                "-H",
                f"unix://{sock}",
                "--pidfile",
                str(d / "dockerd.pid"),
                "--iptables=false",
                "--ip6tables=false",
                "--bridge=none",
                f"--storage-driver={driver}",
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    engine = Engine(f"unix://{sock}", d, proc.pid, driver)
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        if engine.docker("version", timeout=10).returncode == 0:
            return engine
        time.sleep(0.1)
    stop_engine(engine)
    pytest.fail(f"dockerd did not start on {sock} (exit {proc.poll()}):\n{_tail(log)}")


def stop_engine(engine: Engine, *, remove: bool = True) -> None:
    """SIGTERM the daemon (it stops its containers and its containerd), wait, then remove
    what it left (plain directories once it stopped) unless it is to start again on them."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(engine.pid, signal.SIGTERM)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            os.waitpid(engine.pid, os.WNOHANG)
            os.kill(engine.pid, 0)
        except (ChildProcessError, ProcessLookupError):
            break
        time.sleep(0.1)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.kill(engine.pid, signal.SIGKILL)
    if not remove:
        return
    subprocess.run(
        ["rm", "-rf", "--one-file-system", str(engine.directory)], capture_output=True, check=False
    )


def docker_ready() -> None:
    """docker.io installed (installed when missing, as for LXC); we are root."""
    if os.geteuid() != 0:
        pytest.fail("docker tests need root (a private dockerd)")
    if shutil.which(DOCKERD) and shutil.which("docker"):
        return
    proc = subprocess.run(
        ["bash", str(SYSTEM_DEPS), DOCKER_PACKAGE], capture_output=True, text=True, timeout=900
    )
    if not (shutil.which(DOCKERD) and shutil.which("docker")):
        pytest.fail(
            f"dockerd or the docker CLI is missing (Debian package {DOCKER_PACKAGE}); "
            f"`bash {SYSTEM_DEPS} {DOCKER_PACKAGE}` exited {proc.returncode}:\n"
            f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
        )


@contextlib.contextmanager
def private_engine(
    tmp_path_factory: pytest.TempPathFactory, label: str, driver: str = "overlay2"
) -> Iterator[Engine]:
    docker_ready()
    # A short path: a unix socket's name is at most 107 bytes.
    d = Path(tmp_path_factory.mktemp(label))
    engine = start_engine(d, driver)
    try:
        yield engine
    finally:
        stop_engine(engine)


@pytest.fixture(scope="session")
def docker_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    """The session's private Docker engine."""
    with private_engine(tmp_path_factory, "dockerd") as engine:
        yield engine


def import_image(engine: Engine, rootfs: Path) -> str:
    imported = engine.docker("import", str(rootfs), IMAGE, timeout=600)
    if imported.returncode != 0:
        pytest.fail(f"docker import {rootfs} failed: {imported.stderr}")
    return IMAGE


@pytest.fixture(scope="session")
def docker_image(docker_engine: Engine) -> str:
    """The suite's debootstrap rootfs (tests/remote/rootfs.sh, shared with LXC's containers)
    as an image of the session's engine."""
    if shutil.which("debootstrap") is None:
        subprocess.run(["bash", str(SYSTEM_DEPS), "debootstrap"], capture_output=True, check=False)
    return import_image(docker_engine, build_rootfs())


@pytest.fixture(scope="session")
def other_engine(tmp_path_factory: pytest.TempPathFactory, docker_image: str) -> Iterator[Engine]:
    """A second private engine for the session (a fleet's other host), with the suite's
    image imported; never stopped by a test."""
    with private_engine(tmp_path_factory, "dockerd-b") as engine:
        import_image(engine, build_rootfs())
        yield engine


@pytest.fixture
def second_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    """Another private engine, the test's own (it may stop and start it), with the suite's
    image imported."""
    with private_engine(tmp_path_factory, "dockerd2") as engine:
        import_image(engine, build_rootfs())
        yield engine


@pytest.fixture
def vfs_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    """Another private engine, the test's own, on the vfs storage driver (a create copies the
    image's files first: seconds, where overlay2 takes a moment), with the suite's image."""
    with private_engine(tmp_path_factory, "dockerd-vfs", driver="vfs") as engine:
        import_image(engine, build_rootfs())
        yield engine


@dataclass(frozen=True)
class DockerNode:
    """A host reached over ssh whose docker CLI's default engine is the session's engine:
    `docker -H ssh://node …` there is the engine a user reaches on a GPU node."""

    host: str  # the DOCKER_HOST: ssh://node
    path: str  # PATH for envlock: its `ssh` is ssh -F the node's ssh_config
    node: Node


@pytest.fixture(scope="session")
def docker_sshd(
    system_ready: None, docker_engine: Engine, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DockerNode]:
    """A real sshd on 127.0.0.1 (tests/remote/fixtures.py) whose sessions have DOCKER_HOST
    set to the session's engine. ssh finds its hosts in the user's ssh_config, which a test
    must not touch: envlock's PATH holds an `ssh` that runs the real one with -F the node's
    config (Host node: its port, key and known host), as a user's ~/.ssh/config would."""
    d = tmp_path_factory.mktemp("docker_sshd")
    with _serve_node(d, with_pct=False, env={"DOCKER_HOST": docker_engine.host}) as node:
        client = d / "client-bin"
        client.mkdir()
        ssh = shutil.which("ssh")
        assert ssh is not None
        wrapper = client / "ssh"
        wrapper.write_text(f'#!/bin/sh\nexec {ssh} -F {node.ssh_config_file} "$@"\n')
        wrapper.chmod(0o755)
        yield DockerNode("ssh://node", f"{client}{os.pathsep}{os.environ['PATH']}", node)


MakeDocker = Callable[..., str]


@pytest.fixture
def docker_container(docker_engine: Engine, docker_image: str) -> Iterator[MakeDocker]:
    """Factory: make(name=None, mounts=(), engine=None, labels={}, volumes=()) -> the name of a
    running container (`sleep infinity`, `--network none`), one bind mount per (host_dir,
    path) and one named volume per (volume, path); containers and volumes go at teardown."""
    made: list[tuple[Engine, str]] = []
    made_volumes: set[tuple[Engine, str]] = set()

    def make(
        name: str | None = None,
        mounts: Sequence[tuple[str | os.PathLike[str], str]] = (),
        engine: Engine | None = None,
        labels: dict[str, str] | None = None,
        volumes: Sequence[tuple[str, str]] = (),
    ) -> str:
        engine = engine or docker_engine
        name = name or f"box{len(made)}-{os.getpid()}"
        argv = ["run", "-d", "--name", name, "--network", "none", "--init"]
        for host, path in mounts:
            argv += ["--mount", f"type=bind,source={host},target={path}"]
        for volume, path in volumes:
            argv += ["--mount", f"type=volume,source={volume},target={path}"]
            made_volumes.add((engine, volume))
        for key, value in (labels or {}).items():
            argv += ["--label", f"{key}={value}"]
        created = engine.docker(*argv, docker_image, "sleep", "infinity")
        if created.returncode != 0:
            pytest.fail(f"docker run {name} failed: {created.stderr}")
        made.append((engine, name))
        return name

    try:
        yield make
    finally:
        for engine, name in reversed(made):
            engine.docker("rm", "-f", "-v", name)
        for engine, volume in made_volumes:
            engine.docker("volume", "rm", "-f", volume)
