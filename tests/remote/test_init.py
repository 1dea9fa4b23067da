"""`envlock init --from` over ssh and `pct exec`: a pip-built venv on a host reached over the
real loopback sshd, and one inside a real LXC container behind it (ssh → pct → lxc-attach),
read by the isolated survey, locked here and compared; the container's venv then adopted,
run and rolled back to. Bad input said plainly: not a venv, a venv of a Python the target
does not have."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from envlock.profile.read import load_profile
from tests.conftest import Envlock
from tests.remote.fixtures import CONTAINER_ROOT, CONTAINER_VENV, Node

PIP = ("-m", "pip", "install", "-q", "--no-compile", "--no-index", "--find-links")


def ssh_flags(node: Node) -> list[str]:
    """init's flags that reach the loopback node (its own keys and known hosts)."""
    options = [
        f"UserKnownHostsFile={node.known_hosts_file}",
        "GlobalKnownHostsFile=/dev/null",
        "StrictHostKeyChecking=yes",
    ]
    flags = ["--host", "127.0.0.1", "--port", str(node.port), "--user", "root"]
    flags += ["--identity-file", str(node.identity_file)]
    return flags + [arg for option in options for arg in ("--ssh-option", option)]


def digest(node: Node, *argv: str) -> str:
    """A digest of every file's path and bytes under a directory, computed on the target."""
    listed = node.run(*argv)
    assert listed.returncode == 0, listed.stderr
    return hashlib.sha256(listed.stdout.encode()).hexdigest()


def tree_sums(path: str) -> tuple[str, ...]:
    """sha256sum of every file under `path` (names sorted), as a shell command's argv."""
    script = (
        'cd "$1" && find . -path ./.envlock -prune -o -type f -print0 | sort -z '
        "| xargs -0 sha256sum"
    )
    return ("sh", "-c", script, "sh", path)


def test_init_from_over_ssh_reads_a_pip_venv_and_refuses_bad_input(
    tmp_path: Path, wheelhouse: Path, node_sshd: Node, envlock: Envlock
) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    python = str(venv / "bin" / "python")
    subprocess.run([python, *PIP, wheelhouse, "torch==2.11.0+cpu", "trainutil"], check=True)
    before = digest(node_sshd, *tree_sums(str(venv)))
    profile = tmp_path / "far.toml"
    flags = ["--target", "ssh", *ssh_flags(node_sshd), "--find-links", str(wheelhouse)]
    made = envlock("init", profile, *flags, "--offline", "--from", venv, "--json")
    assert made.returncode == 0, made.stdout + made.stderr
    report = json.loads(made.stdout)
    assert report["comparison"]["moved"] == {} and report["comparison"]["not_locked"] == {}
    prof = load_profile(profile)
    assert prof.target.type == "ssh"
    assert prof.python_version == f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert prof.torch is not None and (prof.torch.version, prof.torch.backend) == ("2.11.0", "cpu")
    assert prof.dependencies.packages == ("trainutil==2.0",)
    assert digest(node_sshd, *tree_sums(str(venv))) == before

    not_venv = envlock("init", tmp_path / "a.toml", *flags, "--from", tmp_path)
    assert not_venv.returncode == 2 and "is not a venv (no pyvenv.cfg)" in not_venv.stderr
    # A venv made on another machine, whose Python this target does not have.
    alien = tmp_path / "alien"
    (alien / "lib" / "python3.9" / "site-packages").mkdir(parents=True)
    (alien / "pyvenv.cfg").write_text("home = /usr/bin\nversion_info = 3.9.18\n")
    other = envlock("init", tmp_path / "b.toml", *flags, "--from", alien)
    assert other.returncode == 2, other.stdout + other.stderr
    assert "/usr/bin/python3.9 (pyvenv.cfg's home) is not on the target" in other.stderr
    assert not (tmp_path / "a.toml").exists() and not (tmp_path / "b.toml").exists()


def test_init_from_in_a_container_then_adopt_run_and_rollback(
    tmp_path: Path, wheelhouse: Path, node_sshd: Node, lxc_container: Any, envlock: Envlock
) -> None:
    vmid = lxc_container(mounts=[(wheelhouse, str(wheelhouse))])

    def pct(*argv: str) -> subprocess.CompletedProcess[str]:
        done = node_sshd.run("pct", "exec", str(vmid), "--", *argv, timeout=300)
        assert done.returncode == 0, done.stderr
        return done

    pct("python3", "-m", "venv", CONTAINER_VENV)
    pct(f"{CONTAINER_VENV}/bin/python", *PIP, str(wheelhouse), "torch==2.11.0+cpu", "trainutil")
    before = hashlib.sha256(pct(*tree_sums(CONTAINER_VENV)).stdout.encode()).hexdigest()
    profile = tmp_path / "ct.toml"
    target = ["--target", "proxmox-lxc", *ssh_flags(node_sshd), "--vmid", str(vmid)]
    where = ["--root", CONTAINER_ROOT, "--venv", CONTAINER_VENV]
    made = envlock(
        "init", profile, *target, *where, "--find-links", str(wheelhouse), "--offline",
        "--from", CONTAINER_VENV, "--json",
    )  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    assert json.loads(made.stdout)["installed"] >= 4
    assert load_profile(profile).target.type == "proxmox-lxc"

    applied = envlock("apply", "--adopt", "-y", profile)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert pct("readlink", CONTAINER_VENV).stdout.strip() == f"{CONTAINER_ROOT}/current"
    ran = envlock("run", profile, "--", "python", "-c", "import sys, trainutil; print(sys.prefix)")
    assert ran.returncode == 0 and f"{CONTAINER_ROOT}/generations/1-" in ran.stdout, ran.stderr
    assert envlock("rollback", profile).returncode == 0
    deep = envlock("check", "--deep", profile)
    assert deep.returncode == 0 and "matches its manifest" in deep.stdout, deep.stdout
    gen0 = pct("readlink", f"{CONTAINER_ROOT}/current").stdout.strip()
    assert gen0.startswith("generations/0-")
    sums = pct(*tree_sums(f"{CONTAINER_ROOT}/{gen0}")).stdout
    assert hashlib.sha256(sums.encode()).hexdigest() == before
    pip = pct(f"{CONTAINER_VENV}/bin/pip", "--version").stdout  # its shebang names the venv
    assert f"{CONTAINER_VENV}/lib/python3" in pip
