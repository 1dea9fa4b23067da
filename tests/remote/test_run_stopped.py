"""A container stopped while `envlock run` runs its command (a real LXC container behind
the loopback node's sshd and test `pct`): said as such (exit 3, what to do), never as a
container that was not running, and no stale `.pid` left in the root's run directory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.remote.fixtures import Node
from tests.remote.test_remote import envlock_env, pct, ssh_lines, write_profile

ROOT = "/opt/envroot"
ENVLOCK_RUN = [sys.executable, "-m", "envlock", "run"]


def start_run(*args: str | Path) -> subprocess.Popen[str]:
    """`envlock run … -- sh -c 'echo started; sleep 60'`, as a batch job starts it."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "envlock",
            "run",
            *map(str, args),
            "--",
            "sh",
            "-c",
            "echo started; exec sleep 60",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=envlock_env(),
    )


def stopped_under(proc: subprocess.Popen[str], vmid: int) -> tuple[int, str]:
    """Stop the container once the command said it started; the run's status and stderr."""
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline() == "started\n", proc.stderr.read()
    subprocess.run(["lxc-stop", "-k", "-n", str(vmid)], check=True, timeout=60)
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err


def restart(node: Node, vmid: int) -> None:
    subprocess.run(["lxc-start", "-n", str(vmid)], check=True, timeout=60)
    for _ in range(200):
        if pct(node, vmid, "true").returncode == 0:
            return
    raise AssertionError(f"container {vmid} did not come back")


def pid_files(node: Node, vmid: int) -> list[str]:
    listed = pct(node, vmid, "sh", "-c", f"ls {ROOT}/run 2>/dev/null || true")
    return [name for name in listed.stdout.split() if name.endswith(".pid")]


def test_a_container_stopped_during_a_run_is_said_and_leaves_no_stale_pid(
    tmp_path: Path, wheelhouse: Path, node_sshd: Node, lxc_container: Any
) -> None:
    vmid = lxc_container(mounts=[(wheelhouse, str(wheelhouse))])
    target = ['type = "proxmox-lxc"', f"vmid = {vmid}", f'root = "{ROOT}"', *ssh_lines(node_sshd)]
    profile = write_profile(tmp_path / "p", wheelhouse, target)
    applied = subprocess.run(
        [sys.executable, "-m", "envlock", "apply", "-y", str(profile)],
        capture_output=True,
        text=True,
        env=envlock_env(),
    )
    assert applied.returncode == 0, applied.stderr
    said = f"container {vmid} on 127.0.0.1 stopped while the command ran"

    # The one-call run (a batch job's: stdin no terminal).
    code, err = stopped_under(start_run(profile), vmid)
    assert code == 3, err
    assert said in err, err
    assert "is not running" not in err and f"pct start {vmid}" in err
    restart(node_sshd, vmid)

    # A run with --snapshot-into is the same one call (the snapshot written between the
    # agent's check and its start): said alike, and nothing of the run left in the root.
    code, err = stopped_under(start_run(profile, "--snapshot-into", tmp_path / "s1"), vmid)
    assert code == 3, err
    assert said in err and "is not running" not in err, err
    restart(node_sshd, vmid)
    assert pid_files(node_sshd, vmid) == []
