"""Every way a command can fail to start under `envlock run`, on every target type
(targets/registry.py's TARGET_TYPES, walked): a shell's 127 (not found) or 126 (anything
the kernel refuses to start), envlock's own words for each, never a traceback or a status
outside the README's table. Remote types are walked twice: as a batch job (the agent's
one-call run) and from a terminal (stdin a tty).

Real targets: the machine itself, the loopback sshd, a real LXC container behind the test
`pct` (the API faked), a container of the suite's private Docker engine."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from envlock.targets.registry import TARGET_TYPES
from tests.docker.test_docker_target import docker_target
from tests.projects import write_seed_project
from tests.remote.docker_fixtures import Engine, MakeDocker
from tests.remote.fixtures import Node
from tests.remote.test_remote import (  # noqa: F401 (lxc_profile: a fixture)
    envlock_env,
    lxc_profile,
    pct,
    ssh_target,
    write_profile,
)

# On the target, made by each type's `shell`: a script without its x bit, an executable
# file with no `#!` line (ENOEXEC), a directory, and a name below a plain file (ENOTDIR).
PLACE = (
    'mkdir -p "$1/dir" && printf "print(1)\\n" > "$1/script.py" && chmod 644 "$1/script.py" '
    '&& printf "\\001\\002 not a program\\n" > "$1/plain" && chmod 755 "$1/plain"'
)
KERNEL = "is not a program the kernel can run"


def failures(d: str) -> list[tuple[str, list[str], int, str]]:
    """(what, argv, the status, envlock's words) with the files placed under `d`."""
    return [
        ("not found", ["no-such-command-x"], 127, "envlock: command not found: no-such-command-x"),
        ("no x bit", [f"{d}/script.py"], 126, f"not executable: {d}/script.py"),
        ("no #! line", [f"{d}/plain"], 126, f"envlock: cannot execute: {d}/plain {KERNEL}"),
        ("a directory", [f"{d}/dir"], 126, f"not executable: {d}/dir"),
        ("below a file", [f"{d}/plain/x"], 126, f"envlock: cannot execute: {d}/plain/x"),
    ]


def envlock_run(profile: Path, argv: list[str], *, tty: bool) -> tuple[int, str]:
    """`envlock run` as a batch job (stdin no terminal) or from a terminal; its status and
    what it said (from a terminal, the target's words come through the remote terminal,
    on stdout, as the user's terminal shows both)."""
    cmd = [sys.executable, "-m", "envlock", "run", str(profile), "--", *argv]
    if not tty:
        done = subprocess.run(
            cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, env=envlock_env()
        )
        return done.returncode, done.stderr
    leader, follower = pty.openpty()
    try:
        done = subprocess.run(
            cmd, capture_output=True, text=True, stdin=follower, env=envlock_env(), timeout=120
        )
    finally:
        os.close(leader)
        os.close(follower)
    return done.returncode, done.stdout + done.stderr


def applied(profile: Path) -> Path:
    for step in ("lock", "apply"):
        done = subprocess.run(
            [sys.executable, "-m", "envlock", step, *(["-y"] if step == "apply" else []),
             str(profile)],
            capture_output=True, text=True, stdin=subprocess.DEVNULL, env=envlock_env(),
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    return profile


def walk(kind: str, profile: Path, place: Callable[[str], None], where: str) -> None:
    """Each failure, as a batch job and (remote types) from a terminal: its status and words."""
    place(where)
    remote = TARGET_TYPES[kind].remote
    wrong = []
    for tty in (False, True) if remote else (False,):
        for what, argv, code, words in failures(where):
            status, stderr = envlock_run(profile, argv, tty=tty)
            said = status == code and words in stderr and "Traceback" not in stderr
            if not said or stderr.count("envlock:") != 1:
                mode = "terminal" if tty else "batch"
                wrong.append(f"{kind} {mode} {what}: exit {status}, said {stderr!r}")
    assert not wrong, "\n".join(wrong)


def test_local(tmp_path: Path, wheelhouse: Path) -> None:
    profile = applied(write_seed_project(tmp_path / "proj", wheelhouse))

    def place(d: str) -> None:
        subprocess.run(["sh", "-c", PLACE, "sh", d], check=True)

    walk("local", profile, place, str(tmp_path / "cmds"))


def test_ssh(tmp_path: Path, wheelhouse: Path, node_sshd: Node) -> None:
    target = ssh_target(tmp_path / "root", tmp_path / "venv", node_sshd)
    profile = applied(write_profile(tmp_path / "p", wheelhouse, target))

    def place(d: str) -> None:
        assert node_sshd.run("sh", "-c", PLACE, "sh", d).returncode == 0

    walk("ssh", profile, place, str(tmp_path / "cmds"))


def test_proxmox_lxc(lxc_profile: tuple[Path, int], node_sshd: Node) -> None:  # noqa: F811
    profile, vmid = lxc_profile

    def place(d: str) -> None:
        assert pct(node_sshd, vmid, "sh", "-c", PLACE, "sh", d).returncode == 0

    walk("proxmox-lxc", applied(profile), place, "/tmp/cmds")


def test_docker(
    tmp_path: Path, wheelhouse: Path, docker_engine: Engine, docker_container: MakeDocker
) -> None:
    box = docker_container(mounts=[(wheelhouse, str(wheelhouse))])
    target = docker_target(docker_engine, box)
    profile = applied(write_profile(tmp_path / "p", wheelhouse, target))

    def place(d: str) -> None:
        assert docker_engine.docker("exec", box, "sh", "-c", PLACE, "sh", d).returncode == 0

    walk("docker", profile, place, "/tmp/cmds")


WALKED = {"local": test_local, "ssh": test_ssh, "proxmox-lxc": test_proxmox_lxc,
          "docker": test_docker}  # fmt: skip


def test_every_target_type_is_walked() -> None:
    assert set(WALKED) == set(TARGET_TYPES), "a new target type needs its test here"
