"""The environment's guarded pip on a real LXC container (behind sshd and the test pct):
installs are refused with the way to add packages safely, queries go to the uv envlock
pushed, and an install allowed on purpose is reported by check."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.remote.fixtures import Node
from tests.remote.test_remote import cli, envlock_env, ssh_lines, write_profile


def test_the_pip_shim_in_an_lxc_container(
    tmp_path: Path, wheelhouse: Path, node_sshd: Node, lxc_container: Any
) -> None:
    vmid = lxc_container(mounts=[(wheelhouse, str(wheelhouse))])
    target = [
        'type = "proxmox-lxc"',
        f"vmid = {vmid}",
        'root = "/opt/envroot"',
        'venv = "/opt/venv"',
        *ssh_lines(node_sshd),
    ]
    profile = write_profile(tmp_path / "p", wheelhouse, target)
    applied = cli("apply", "-y", profile)
    assert applied.returncode == 0, applied.stderr
    assert cli("check", profile).returncode == 0  # the shim is part of the generation

    refused = cli("run", profile, "--", "pip", "install", "six")
    assert refused.returncode == 1
    assert "managed by envlock" in refused.stderr and "envlock add" in refused.stderr

    listed = cli("run", profile, "--", "pip", "list")
    assert listed.returncode == 0, listed.stderr
    assert "tinydep" in listed.stdout  # answered by the uv pushed to <root>/bin/uv

    argv = [
        "run",
        "--env",
        "ENVLOCK_ALLOW_PIP",
        str(profile),
        "--",
        "pip",
        "install",
        "--offline",
        "--find-links",
        str(wheelhouse),
        "tinydep==0.9",
    ]
    allowed = subprocess.run(
        [sys.executable, "-m", "envlock", *argv],
        capture_output=True,
        text=True,
        env=envlock_env(ENVLOCK_ALLOW_PIP="1"),
    )
    assert allowed.returncode == 0, allowed.stderr
    kinds = [d["kind"] for d in json.loads(cli("check", "--json", profile).stdout)["drift"]]
    assert kinds == ["package-version"]
