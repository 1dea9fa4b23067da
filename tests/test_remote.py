"""Remote targets for real: an ssh target, and a proxmox-lxc target whose container is a real
LXC container reached through a real sshd and the test `pct`; only the Proxmox API is fake.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.projects import toml_list
from tests.remote.fixtures import Node

SECRET_ENV = "ENVLOCK_TEST_PVE_PASSWORD"
TEMPLATE = "debian-12-standard_12.7-1_amd64.tar.zst"


def envlock_env(**extra: str) -> dict[str, str]:
    return {**os.environ, SECRET_ENV: "secret", **extra}


def cli(*args: str | Path, input: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "envlock", *map(str, args)],
        capture_output=True,
        text=True,
        input=input,
        env=envlock_env(),
    )


def ssh_lines(node: Node) -> list[str]:
    options = [
        f"UserKnownHostsFile={node.known_hosts_file}",
        "GlobalKnownHostsFile=/dev/null",
        "StrictHostKeyChecking=yes",
    ]
    return [
        'host = "127.0.0.1"',
        f"port = {node.port}",
        'user = "root"',
        f'identity-file = "{node.identity_file}"',
        f"ssh-options = {toml_list(options)}",
    ]


def write_profile(
    base: Path,
    wheelhouse: Path,
    target: list[str],
    *,
    extra: str = "",
    env: dict[str, str] | None = None,
) -> Path:
    base.mkdir(parents=True, exist_ok=True)
    (base / "scripts").mkdir(exist_ok=True)
    (base / "scripts" / "train.py").write_text("print('training')\n")
    env_lines = "".join(f"{k} = {json.dumps(v)}\n" for k, v in (env or {}).items())
    text = "\n".join(
        [
            "[profile]",
            'name = "remote"',
            "",
            "[target]",
            *target,
            "",
            "[python]",
            'version = "3.11"',
            "",
            "[torch]",
            'version = "2.11.0"',
            'backend = "cu128"',
            "",
            "[dependencies]",
            'packages = ["trainutil", "tinydep==1.0"]',
            f"find-links = {toml_list([str(wheelhouse)])}",
            "offline = true",
            "",
            "[env]",
            env_lines,
            "[scripts]",
            'source = "scripts"',
            'dest = "/opt/train dir"',
            'files = ["train.py"]',
            extra,
        ]
    )
    profile = base / "remote.toml"
    profile.write_text(text)
    assert cli("lock", profile).returncode == 0
    return profile


def kinds(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [d["kind"] for d in json.loads(result.stdout)["drift"]]


# -- ssh --------------------------------------------------------------------------------
def test_ssh_target_end_to_end(tmp_path: Path, wheelhouse: Path, node_sshd: Node) -> None:
    root = tmp_path / "ssh root"
    target = [
        'type = "ssh"',
        f'root = "{root}"',
        f'venv = "{tmp_path}/ssh venv"',
        *ssh_lines(node_sshd),
    ]
    profile = write_profile(tmp_path / "p", wheelhouse, target)
    first = cli("check", "--json", profile)
    assert first.returncode == 1 and "uv" in kinds(first)
    applied = cli("apply", "-y", profile)
    assert applied.returncode == 0, applied.stderr
    assert "uploading uv" in applied.stderr
    assert (root / "bin" / "uv").is_file()
    assert cli("check", profile).returncode == 0
    ran = cli("run", profile, "--", "python", "-c", "import sys, trainutil; print(sys.prefix)")
    assert ran.returncode == 0, ran.stderr
    assert f"{root}/generations/1-" in ran.stdout
    noop = cli("apply", "-y", profile)
    assert "nothing to do" in noop.stdout


def test_ssh_errors_are_clear(tmp_path: Path, wheelhouse: Path, node_sshd: Node) -> None:
    target = ['type = "ssh"', f'root = "{tmp_path}/r"', *ssh_lines(node_sshd)]
    target[3] = "port = 1"  # nothing listens there
    refused = cli("check", write_profile(tmp_path / "a", wheelhouse, target))
    assert refused.returncode == 3 and "connection refused" in refused.stderr
    wrong_key = tmp_path / "known_hosts"
    wrong_key.write_text(
        f"[127.0.0.1]:{node_sshd.port} ssh-ed25519 "
        "AAAAC3NzaC1lZDI1NTE5AAAAIBbN5bCqW7Z1wMbfTbCHuRgcGx5mUZ0u4GoSExpC5kq7\n"
    )
    target = ['type = "ssh"', f'root = "{tmp_path}/r"', *ssh_lines(node_sshd)]
    target[-1] = target[-1].replace(str(node_sshd.known_hosts_file), str(wrong_key))
    mismatch = cli("check", write_profile(tmp_path / "b", wheelhouse, target))
    assert mismatch.returncode == 3
    assert "host key verification failed" in mismatch.stderr
    assert "never disables host-key checking" in mismatch.stderr


# -- proxmox-lxc ---------------------------------------------------------------------------
@pytest.fixture
def lxc_profile(
    tmp_path: Path,
    wheelhouse: Path,
    node_sshd: Node,
    lxc_container: Any,
    fakepve: Any,
    fakepve_url: str,
    fakepve_cafile: str,
) -> tuple[Path, int]:
    """A proxmox-lxc profile: the API is fakepve; the container is a real LXC container."""
    vmid = lxc_container(mounts=[(wheelhouse, str(wheelhouse))])
    fakepve.store_file("local", TEMPLATE, 1, "vztmpl")
    canary = tmp_path / "CANARY"
    target = [
        'type = "proxmox-lxc"',
        f'api-url = "{fakepve_url}"',
        'node = "pve1"',
        f"vmid = {vmid}",
        'api-user = "root@pam"',
        f'secret-env = "{SECRET_ENV}"',
        f'ca-file = "{fakepve_cafile}"',
        f"root = \"/opt/env lock 'q' $(touch {canary}); x\"",
        'venv = "/opt/venv"',
        *ssh_lines(node_sshd),
    ]
    container = "\n".join(
        [
            "[container]",
            f'ostemplate = "local:vztmpl/{TEMPLATE}"',
            'rootfs = "local-lvm:8"',
            "cores = 2",
            "memory = 2048",
            'features = ["nesting=1"]',
            'devices = ["/dev/null"]',
            f'mounts = [{{ source = "{wheelhouse}", path = "{wheelhouse}" }}]',
            "snapshot-before-apply = true",
        ]
    )
    nasty = f'it\'s "quoted" $(touch {canary}); `touch {canary}`'
    profile = write_profile(
        tmp_path / "p", wheelhouse, target, extra=container, env={"NASTY": nasty}
    )
    return profile, vmid


def pct(node: Node, vmid: int, *argv: str) -> subprocess.CompletedProcess[str]:
    return node.run("pct", "exec", str(vmid), "--", *argv)


def test_proxmox_lxc_seed_scenario(
    lxc_profile: tuple[Path, int], node_sshd: Node, wheelhouse: Path, fakepve: Any
) -> None:
    profile, vmid = lxc_profile
    planned = cli("plan", "--json", profile)
    assert planned.returncode == 1
    assert [c["kind"] for c in json.loads(planned.stdout)["container"]] == ["container"]

    applied = cli("apply", "-y", profile)
    assert applied.returncode == 0, applied.stderr
    assert f"container: created container {vmid} on pve1" in applied.stdout
    assert cli("check", profile).returncode == 0

    # The seed failure: a raw pct exec uses the system python3, which lacks the packages.
    raw = pct(node_sshd, vmid, "python3", "-c", "import trainutil")
    assert raw.returncode != 0 and "No module named 'trainutil'" in raw.stderr
    ran = cli(
        "run",
        profile,
        "--",
        "python3",
        "-c",
        "import os, trainutil, torch; print(torch.__version__); print(os.environ['NASTY'])",
    )
    assert ran.returncode == 0, ran.stderr
    version, nasty = ran.stdout.splitlines()
    assert version == "2.11.0+cu128"
    assert nasty.startswith('it\'s "quoted" $(touch ')

    # Pollute inside the container, as a user would, with the uv envlock bootstrapped there.
    root = json.loads(cli("generations", "--json", profile).stdout)
    assert root["current"].startswith("1-")
    uv = "/opt/env lock 'q' $(touch " + str(profile.parent.parent / "CANARY") + "); x/bin/uv"
    polluted = pct(
        node_sshd,
        vmid,
        uv,
        "pip",
        "install",
        "-q",
        "--offline",
        "--python",
        "/opt/venv/bin/python",
        "--find-links",
        str(wheelhouse),
        "sglang",
    )
    assert polluted.returncode == 0, polluted.stderr
    drift = cli("check", "--json", profile)
    assert drift.returncode == 1
    assert {"torch-build", "cuda-libraries", "package-extra"} <= set(kinds(drift))
    assert cli("rollback", "--resync", profile).returncode == 0
    assert cli("check", profile).returncode == 0

    # Nothing was ever executed from profile values: no canary on the node or in the container.
    assert not (profile.parent.parent / "CANARY").exists()
    inside = pct(node_sshd, vmid, "test", "-e", str(profile.parent.parent / "CANARY"))
    assert inside.returncode == 1


def test_container_config_drift_snapshot_and_rollback(
    lxc_profile: tuple[Path, int], fakepve: Any, fakepve_url: str, fakepve_cafile: str
) -> None:
    profile, vmid = lxc_profile
    assert cli("apply", "-y", profile).returncode == 0
    from proxmoxer import ProxmoxAPI

    api = ProxmoxAPI(
        fakepve_url.split("//")[1].split(":")[0],
        port=int(fakepve_url.rsplit(":", 1)[1].split("/")[0]),
        user="root@pam",
        password="secret",
        verify_ssl=fakepve_cafile,
    )
    api.nodes("pve1").lxc(vmid).config.put(cores=8)
    drift = cli("check", "--json", profile)
    assert drift.returncode == 1
    item = next(d for d in json.loads(drift.stdout)["drift"] if d["kind"] == "container-config")
    assert (item["subject"], item["expected"], item["actual"]) == ("cores", "2", "8")

    # A new lock: apply takes an LXC snapshot named after the generation, then fixes cores.
    profile.write_text(profile.read_text().replace('"tinydep==1.0"', '"tinydep==0.9"'))
    assert cli("lock", profile).returncode == 0
    applied = cli("apply", "-y", profile)
    assert applied.returncode == 0, applied.stderr
    snaps = [s["name"] for s in api.nodes("pve1").lxc(vmid).snapshot.get()]
    assert any(name.startswith("envlock-2-") for name in snaps), snaps
    assert api.nodes("pve1").lxc(vmid).config.get()["cores"] == 2
    assert cli("check", profile).returncode == 0

    back = cli("rollback", "--container", "--json", profile)
    assert back.returncode == 0, back.stderr
    assert json.loads(back.stdout)["container_snapshot"].startswith("envlock-2-")


def test_container_errors_are_distinct(
    tmp_path: Path, wheelhouse: Path, node_sshd: Node, lxc_container: Any
) -> None:
    vmid = lxc_container()
    target = ['type = "ssh"', f'root = "{tmp_path}/r"', *ssh_lines(node_sshd)]
    profile = write_profile(tmp_path / "p", wheelhouse, target)
    # Through the transport directly: the three pct failures are three different errors.
    from envlock.targets.pct import (
        CommandMissing,
        ContainerMissing,
        ContainerNotRunning,
        PctTransport,
    )
    from envlock.targets.ssh import SshTransport

    options = tuple(
        ssh_lines(node_sshd)[-1].split("= ", 1)[1].strip("[]").replace('"', "").split(", ")
    )
    ssh = SshTransport(
        "127.0.0.1",
        user="root",
        port=node_sshd.port,
        identity_file=str(node_sshd.identity_file),
        options=options,
    )
    with pytest.raises(CommandMissing):
        PctTransport(ssh, vmid).run(["no-such-command-here"])
    with pytest.raises(ContainerMissing):
        PctTransport(ssh, 9099).run(["true"])
    subprocess.run(["lxc-stop", "-k", "-n", str(vmid)], check=True)
    with pytest.raises(ContainerNotRunning):
        PctTransport(ssh, vmid).run(["true"])
    assert profile.exists()
