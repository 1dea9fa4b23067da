"""Remote targets for real: an ssh target, and a proxmox-lxc target whose container is a real
LXC container reached through a real sshd and the test `pct`; only the Proxmox API is fake.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from envlock.targets.pct import CONTAINER_PATH
from tests.json_shapes import conforms
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


def ssh_target(root: Path, venv: Path, node: Node) -> list[str]:
    """The [target] lines of an ssh target on the loopback node."""
    return ['type = "ssh"', f'root = "{root}"', f'venv = "{venv}"', *ssh_lines(node)]


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
    # A snapshot's DIR is on this machine, not the target: said, and by name.
    shot = cli("snapshot", profile, tmp_path / "ckpt")
    assert shot.returncode == 0, shot.stderr
    assert shot.stdout.startswith(
        f"✓ wrote {tmp_path / 'ckpt' / 'envlock-snapshot.json'} on this machine "
        f"({socket.gethostname()}, a directory created here), "
        f"recording ssh root@127.0.0.1:{node_sshd.port}: "
    ), shot.stdout


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
            # No `devices`: reconcile/gpu.py reads any [container] device as a GPU
            # declaration (/dev/null included) and would report the missing NVIDIA driver.
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
    canary = profile.parent.parent / "CANARY"
    assert nasty == f'it\'s "quoted" $(touch {canary}); `touch {canary}`'  # literally
    assert not canary.exists()

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
        "--no-index",
        "--python",
        "/opt/venv/bin/python",
        "--find-links",
        str(wheelhouse),
        "sglang==0.5.0",
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


def pve_api(fakepve_url: str, fakepve_cafile: str) -> Any:
    """The fake API as a test (not envlock) sees it: root@pam, its CA."""
    from proxmoxer import ProxmoxAPI

    return ProxmoxAPI(
        fakepve_url.split("//")[1].split(":")[0],
        port=int(fakepve_url.rsplit(":", 1)[1].split("/")[0]),
        user="root@pam",
        password="secret",
        verify_ssl=fakepve_cafile,
    )


def snapshot_names(api: Any, vmid: int) -> list[str]:
    return [s["name"] for s in api.nodes("pve1").lxc(vmid).snapshot.get() if s["name"] != "current"]


def logins(fakepve: Any) -> int:
    """API logins (password tickets) the fake API has seen."""
    return sum(1 for m, p, _ in fakepve.requests if (m, p) == ("POST", "/api2/json/access/ticket"))


def test_container_config_drift_snapshot_and_rollback(
    lxc_profile: tuple[Path, int], fakepve: Any, fakepve_url: str, fakepve_cafile: str
) -> None:
    profile, vmid = lxc_profile
    assert cli("apply", "-y", profile).returncode == 0
    api = pve_api(fakepve_url, fakepve_cafile)
    api.nodes("pve1").lxc(vmid).config.put(cores=8)
    drift = cli("check", "--json", profile)
    assert drift.returncode == 1
    item = next(d for d in json.loads(drift.stdout)["drift"] if d["kind"] == "container-config")
    assert (item["subject"], item["expected"], item["actual"]) == ("cores", "2", "8")
    # `run` refuses on the container's drift like on any other.
    refused = cli("run", profile, "--", "true")
    assert refused.returncode == 1 and "refusing to run" in refused.stderr
    assert "cores" in refused.stderr
    assert cli("run", "--allow-drift", profile, "--", "true").returncode == 0

    # A new lock: apply snapshots the container (generation 1 in it), then fixes cores.
    profile.write_text(profile.read_text().replace('"tinydep==1.0"', '"tinydep==0.9"'))
    assert cli("lock", profile).returncode == 0
    applied = cli("apply", "-y", profile)
    assert applied.returncode == 0, applied.stderr
    (name,) = snapshot_names(api, vmid)
    assert name.startswith("envlock-1-"), name
    assert api.nodes("pve1").lxc(vmid).config.get()["cores"] == 2
    assert cli("check", profile).returncode == 0

    back = cli("rollback", "--container", "--json", profile)
    assert back.returncode == 0, back.stderr
    conforms("rollback-container", json.loads(back.stdout))
    assert json.loads(back.stdout)["container_snapshot"] == name


def test_every_changing_apply_snapshots_once_with_a_unique_name(
    lxc_profile: tuple[Path, int],
    node_sshd: Node,
    fakepve: Any,
    fakepve_url: str,
    fakepve_cafile: str,
) -> None:
    profile, vmid = lxc_profile
    api = pve_api(fakepve_url, fakepve_cafile)
    before = logins(fakepve)
    assert cli("apply", "-y", profile).returncode == 0
    assert logins(fakepve) - before == 1  # one API session per command
    assert snapshot_names(api, vmid) == []  # a new container: nothing to go back to
    assert "nothing to do" in cli("apply", "-y", profile).stdout
    assert snapshot_names(api, vmid) == []  # nothing changed, nothing snapshotted

    # A script deploy, twice, on the same generation: the container runs and its config
    # matches, yet each apply snapshots first, under a name of its own.
    for _ in range(2):
        removed = pct(node_sshd, vmid, "rm", "/opt/train dir/train.py")
        assert removed.returncode == 0, removed.stderr
        before = logins(fakepve)
        applied = cli("apply", "-y", profile)
        assert applied.returncode == 0, applied.stderr
        assert "taking LXC snapshot envlock-1-" in applied.stderr
        assert logins(fakepve) - before == 1
    names = snapshot_names(api, vmid)
    assert len(names) == 2 and all(n.startswith("envlock-1-") for n in names), names
    before = logins(fakepve)
    assert cli("check", profile).returncode == 0
    assert logins(fakepve) - before == 1

    current = json.loads(cli("generations", "--json", profile).stdout)
    listed = cli("generations", "--container", "--json", profile)
    assert listed.returncode == 0, listed.stderr
    conforms("generations-container", json.loads(listed.stdout))
    rows = json.loads(listed.stdout)["snapshots"]
    gen = next(g for g in current["generations"] if g["active"])
    assert [(r["name"], r["generation"], r["lock_id"], r["ours"]) for r in rows] == [
        (n, gen["name"], gen["lock_id"], True) for n in names
    ]
    table = cli("generations", "--container", profile)
    assert names[0] in table.stdout and gen["name"] in table.stdout

    # --container is a flag, the snapshot's name goes with --snapshot, in either order.
    newest = cli("rollback", "--container", "--json", profile)
    assert json.loads(newest.stdout)["container_snapshot"] == names[-1], newest.stderr
    named = cli("rollback", profile, "--snapshot", names[0], "--container", "--json")
    assert json.loads(named.stdout)["container_snapshot"] == names[0], named.stderr
    alone = cli("rollback", "--snapshot", names[0], profile)
    assert alone.returncode == 2 and "--snapshot goes with --container" in alone.stderr


def test_a_change_waiting_for_a_restart_blocks_run_until_apply_restart(
    lxc_profile: tuple[Path, int], fakepve: Any
) -> None:
    profile, vmid = lxc_profile
    assert cli("apply", "-y", profile).returncode == 0
    # features change only at a start: the running container holds them pending.
    text = profile.read_text()
    profile.write_text(
        text.replace('features = ["nesting=1"]', 'features = ["nesting=1", "fuse=1"]')
    )
    fixed = cli("apply", "-y", profile)
    assert fixed.returncode == 0, fixed.stderr
    assert "takes features at its next restart: `envlock apply --restart`" in fixed.stdout

    checked = cli("check", "--json", profile)
    assert checked.returncode == 1
    (item,) = json.loads(checked.stdout)["drift"]
    assert (item["kind"], item["subject"]) == ("container-restart", "features")
    assert item["detail"] == (
        "features nesting=1 → fuse=1,nesting=1 takes effect after a restart: "
        "`envlock apply --restart`"
    )
    refused = cli("run", profile, "--", "true")
    assert refused.returncode == 1 and "envlock apply --restart" in refused.stderr
    still = cli("apply", "-y", profile)  # without --restart: said, not done
    assert "takes effect after a restart" in still.stdout
    assert cli("check", profile).returncode == 1

    restarted = cli("apply", "-y", "--restart", profile)
    assert restarted.returncode == 0, restarted.stderr
    assert f"restarted container {vmid}: features took effect" in restarted.stdout
    assert cli("check", profile).returncode == 0
    assert cli("run", profile, "--", "true").returncode == 0


def interrupt_apply(profile: Path, marker: str) -> tuple[int, str]:
    """Start `envlock apply -y`, send it SIGINT when `marker` shows on its stderr (a
    progress line), and return its exit status and all of its stderr."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "envlock", "apply", "-y", str(profile)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=envlock_env(),
    )
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if marker in line:
            proc.send_signal(signal.SIGINT)
            break
    rest = proc.communicate(timeout=600)[1]
    assert any(marker in line for line in seen), "".join(seen) + rest
    return proc.returncode, "".join(seen) + rest


def wait_for_tasks(fakepve: Any) -> None:
    """Until no task of the fake node runs (each ends by itself: the test waits for state)."""
    while any(t["status"] == "running" for t in fakepve.tasklog):
        time.sleep(0.05)


def test_an_interrupted_apply_says_what_goes_on_and_a_rerun_converges(
    lxc_profile: tuple[Path, int], node_sshd: Node, fakepve: Any
) -> None:
    profile, vmid = lxc_profile
    assert cli("apply", "-y", profile).returncode == 0

    # 1. During the API phase: the snapshot task goes on on the node.
    pct(node_sshd, vmid, "rm", "/opt/train dir/train.py")
    fakepve.time_scale = 0.05
    # The task runs on while the interrupt lands and the note asks the target what it holds.
    fakepve.ct_secs["snapshot"] = 300
    code, stderr = interrupt_apply(profile, "waiting for task UPID:pve1:")
    assert code == 130, stderr
    assert "interrupted:" in stderr and "goes on on the node" in stderr
    snapshotting = [t for t in fakepve.tasklog if t["type"] == "vzsnapshot"]
    assert snapshotting and snapshotting[-1]["status"] == "running"
    wait_for_tasks(fakepve)
    fakepve.time_scale = 0.0
    rerun = cli("apply", "-y", profile)
    assert rerun.returncode == 0, rerun.stderr
    assert cli("check", profile).returncode == 0

    # 2. During the remote agent's build: it finishes, or leaves the root as it was,
    # under the root's lock; the next apply waits for it and converges.
    profile.write_text(profile.read_text().replace('"tinydep==1.0"', '"tinydep==0.9"'))
    assert cli("lock", profile).returncode == 0
    code, stderr = interrupt_apply(profile, "build generation")
    assert code == 130, stderr
    # What the container's root holds once the agent stopped, asked over a new connection
    # (tests/remote/test_interrupt_note.py checks each case against the root itself).
    assert "if one was left" not in stderr, stderr
    assert any(
        said in stderr
        for said in (
            "still at work under the root's lock",
            "no half-built generation was left",
            "is removed by the next `envlock apply`",
        )
    ), stderr
    rerun = cli("apply", "-y", profile)
    assert rerun.returncode == 0, rerun.stderr
    assert cli("check", profile).returncode == 0
    generations = json.loads(cli("generations", "--json", profile).stdout)["generations"]
    assert [g["complete"] for g in generations] == [True] * len(generations)


def ssh_options_with(node: Node, *extra: str) -> list[str]:
    lines = ssh_lines(node)
    options = json.loads(lines[-1].split("= ", 1)[1])
    return [*lines[:-1], f"ssh-options = {toml_list([*options, *extra])}"]


def test_a_hand_managed_container_on_an_older_pve(
    tmp_path: Path, wheelhouse: Path, node_sshd: Node, lxc_container: Any
) -> None:
    """No [container]: no API settings, no API calls (no fake API even runs here); and the
    node's pct is that of PVE 8.1, which has no `--keep-env`."""
    vmid = lxc_container(mounts=[(wheelhouse, str(wheelhouse))])
    target = [
        'type = "proxmox-lxc"',
        f"vmid = {vmid}",
        'root = "/opt/envroot"',
        'venv = "/opt/venv"',
        *ssh_options_with(node_sshd, "SetEnv=ENVLOCK_TEST_PVE_VERSION=8.1"),
    ]
    profile = write_profile(tmp_path / "p", wheelhouse, target)
    applied = cli("apply", "-y", profile)
    assert applied.returncode == 0, applied.stderr
    # Said once per command (not per round trip), naming the node and the minimum.
    assert applied.stderr.count("runs Proxmox VE older than 8.2") == 1, applied.stderr
    assert "warning: the node 127.0.0.1 runs Proxmox VE older than 8.2" in applied.stderr
    assert cli("check", profile).returncode == 0
    ran = cli("run", profile, "--", "env")
    assert ran.returncode == 0, ran.stderr
    names = {line.split("=", 1)[0] for line in ran.stdout.splitlines()}
    # The old pct passes the node's environment on; `env -i` still keeps it out.
    assert not names & {"ENVLOCK_TEST_PVE_VERSION", "SSH_CONNECTION", "SSH_CLIENT"}, names

    subprocess.run(["lxc-stop", "-k", "-n", str(vmid)], check=True)
    stopped = cli("check", profile)
    assert stopped.returncode == 3
    assert f"container {vmid} on 127.0.0.1 is not running" in stopped.stderr
    assert f"pct start {vmid}" in stopped.stderr
    assert "from [container]" not in stopped.stderr


def transport(node: Node, vmid: int, *options: str) -> Any:
    from envlock.targets.pct import PctTransport
    from envlock.targets.ssh import SshTransport

    lines = ssh_options_with(node, *options)
    ssh = SshTransport(
        "127.0.0.1",
        user="root",
        port=node.port,
        identity_file=str(node.identity_file),
        options=tuple(json.loads(lines[-1].split("= ", 1)[1])),
    )
    return PctTransport(ssh, vmid, "pve-test")


def test_keep_env_is_detected_once_per_connection(node_sshd: Node, lxc_container: Any) -> None:
    vmid = lxc_container()
    old = transport(node_sshd, vmid, "SetEnv=ENVLOCK_TEST_PVE_VERSION=8.1")
    assert old.run(["true"]).ok and old.keep_env is False
    assert "--keep-env" not in old.wrap(["true"], None)
    assert old.run(["sh", "-c", "echo $PATH"]).text().strip() == CONTAINER_PATH
    current = transport(node_sshd, vmid)
    assert current.run(["true"]).ok and current.keep_env is True
    assert current.wrap(["true"], None)[3:5] == ["--keep-env", "0"]


def test_container_errors_are_distinct(
    tmp_path: Path, wheelhouse: Path, node_sshd: Node, bare_node_sshd: Node, lxc_container: Any
) -> None:
    from envlock.targets.pct import (
        CommandMissing,
        ContainerMissing,
        ContainerNotRunning,
        NodeHasNoPct,
        PctFailed,
    )

    vmid = lxc_container()
    # Through the transport: each of pct's failures is an error of its own.
    with pytest.raises(CommandMissing, match="command not found in the container: no-such"):
        transport(node_sshd, vmid).run(["no-such-command-here"])
    with pytest.raises(ContainerMissing) as missing:
        transport(node_sshd, 9099).run(["true"])
    assert "from [container]" not in str(missing.value) + str(missing.value.hint)
    with pytest.raises(PctFailed) as usage:
        transport(node_sshd, 42).run(["true"])  # pct's own usage error: not a valid VMID
    assert "on the node pve-test" in str(usage.value)
    assert "vmid: invalid format" in str(usage.value)
    with pytest.raises(NodeHasNoPct, match="the node pve-test has no `pct`: is it a Proxmox VE"):
        transport(bare_node_sshd, vmid).run(["true"])
    subprocess.run(["lxc-stop", "-k", "-n", str(vmid)], check=True)
    with pytest.raises(ContainerNotRunning):
        transport(node_sshd, vmid).run(["true"])

    # Through the CLI: a host without pct is named as such, never as a missing command.
    target = [
        'type = "proxmox-lxc"',
        f"vmid = {vmid}",
        'root = "/opt/envroot"',
        *ssh_lines(bare_node_sshd),
    ]
    bare = cli("check", write_profile(tmp_path / "bare", wheelhouse, target))
    assert bare.returncode == 3
    assert "the node 127.0.0.1 has no `pct`: is it a Proxmox VE node?" in bare.stderr
    assert "command not found in the container" not in bare.stderr
    assert "agent (probe) failed" not in bare.stderr


@pytest.mark.parametrize(
    ("code", "stderr", "error", "words"),
    [
        (255, "container '201' not running!", "ContainerNotRunning", "is not running"),
        (255, "CT 201 not running", "ContainerNotRunning", "is not running"),
        (255, "VM 201 not running", "ContainerNotRunning", "is not running"),
        (
            1,
            "lxc-attach: 201: ../src/lxc/attach.c: lxc_attach: 1103 Failed to get init pid",
            "PctFailed",
            "Failed to get init pid",
        ),
        (
            255,
            "can't lock file '/run/lock/lxc/pve-config-201.lock' - got timeout",
            "PctFailed",
            "got timeout",
        ),
        (255, "Unknown option: foo\n400 unable to parse option", "PctFailed", "unknown option"),
    ],
)
def test_pct_s_own_words_with_the_node_named(
    code: int, stderr: str, error: str, words: str, node_sshd: Node
) -> None:
    """PVE's variants of its messages, as older and newer nodes word them (the transport's
    reading of a Result: no node needed beyond its name)."""
    from envlock.targets import pct as pct_module
    from envlock.targets.base import Result

    result = Result(("pct",), code, b"", stderr.encode())
    with pytest.raises(getattr(pct_module, error)) as info:
        transport(node_sshd, 201).raise_for_pct(result, ["true"])
    assert words.lower() in str(info.value).lower()
    if error == "PctFailed":
        assert "`pct exec 201` on the node pve-test failed" in str(info.value)
    # The command's own failure, once it ran and answered, passes through.
    answered = Result(("pct",), code, b'{"error": {"message": "x"}}\n', stderr.encode())
    transport(node_sshd, 201).raise_for_pct(answered, ["true"])
