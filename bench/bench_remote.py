"""Benchmark envlock on a proxmox-lxc target: ssh connections, round trips and time.

    python -m pytest bench/bench_remote.py -p tests.remote.fixtures -q -s

It needs what the remote tests need (root, lxc, debootstrap, sshd; `make test` installs them):
a real sshd on loopback as the Proxmox node, the test `pct`, a real LXC container, and the
fake Proxmox API. Measured, each as a median of fresh `envlock` processes:
  * check: ssh processes started (round trips) and new ssh connections (sshd's log), with
    the multiplexed master cold and warm; time vs a hand-written
    `ssh node pct exec VMID -- uv pip freeze` (one fresh connection, no multiplexing)
  * no-op apply (goal ≤ 1.5 s)
  * run -- python -c pass and check, warm master, each interleaved with its baseline: the
    hand-written `ssh node 'pct exec VMID --keep-env 0 -- /opt/venv/bin/python -c pass'`
    over the same warm master (goals: run exactly 1 round trip and ≤ 1.3×, check ≤ 1.2×)
Results: bench/results/remote.json and a table on stdout.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from envlock.profile.read import load_profile
from envlock.targets.ssh import close_master
from tests.projects import toml_list
from tests.remote.fixtures import Node
from tests.wheelhouse import build_wheelhouse

RESULTS = Path(__file__).resolve().parent / "results" / "remote.json"
SECRET_ENV = "ENVLOCK_BENCH_PVE_PASSWORD"
TEMPLATE = "debian-12-standard_12.7-1_amd64.tar.zst"
ROOT = "/opt/envlock-bench"
RUNS = 5


def write_profile(base: Path, wheels: Path, node: Node, vmid: int, url: str, ca: str) -> Path:
    options = [
        f"UserKnownHostsFile={node.known_hosts_file}",
        "GlobalKnownHostsFile=/dev/null",
        "StrictHostKeyChecking=yes",
    ]
    (base / "scripts").mkdir(parents=True)
    (base / "scripts" / "train.py").write_text("print('training')\n")
    profile = base / "bench.toml"
    profile.write_text(
        "\n".join(
            [
                "[profile]",
                'name = "bench"',
                "[target]",
                'type = "proxmox-lxc"',
                f'api-url = "{url}"',
                'node = "pve1"',
                f"vmid = {vmid}",
                f'secret-env = "{SECRET_ENV}"',
                f'ca-file = "{ca}"',
                f'root = "{ROOT}"',
                'venv = "/opt/venv"',
                'host = "127.0.0.1"',
                f"port = {node.port}",
                'user = "root"',
                f'identity-file = "{node.identity_file}"',
                f"ssh-options = {toml_list(options)}",
                "[container]",
                f'ostemplate = "local:vztmpl/{TEMPLATE}"',
                'rootfs = "local-lvm:8"',
                f'mounts = [{{ source = "{wheels}", path = "{wheels}" }}]',
                "[python]",
                'version = "3.11"',
                "[torch]",
                'version = "2.11.0"',
                'backend = "cu128"',
                "[dependencies]",
                'packages = ["trainutil", "tinydep==1.0"]',
                f"find-links = {toml_list([str(wheels)])}",
                "offline = true",
                "[scripts]",
                'source = "scripts"',
                'dest = "/opt/train"',
                'files = ["train.py"]',
                "",
            ]
        )
    )
    return profile


def ssh_shim(directory: Path) -> tuple[dict[str, str], Path]:
    """An `ssh` first on PATH that counts its invocations, then runs the real one."""
    directory.mkdir()
    log = directory / "count"
    real = subprocess.run(
        ["sh", "-c", "command -v ssh"], capture_output=True, text=True, check=True
    ).stdout.strip()
    shim = directory / "ssh"
    shim.write_text(f'#!/bin/sh\necho x >> "{log}"\nexec {real} "$@"\n')
    shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{directory}:{os.environ['PATH']}", SECRET_ENV: "secret"}
    return env, log


def accepted(node: Node) -> int:
    return node.sshd_log.read_text(errors="replace").count("Accepted publickey")


def measure(
    argv: list[str], env: dict[str, str], log: Path, node: Node, before: Any = None
) -> dict[str, float]:
    if before:
        before()
    log.write_text("")
    connections = accepted(node)
    started = time.perf_counter()
    # stdin no terminal, as a batch job's (a terminal's run keeps the launcher's path)
    done = subprocess.run(argv, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    elapsed = time.perf_counter() - started
    assert done.returncode == 0, done.stderr
    time.sleep(0.2)  # sshd writes its log line after the session
    return {
        "seconds": elapsed,
        "ssh_processes": len(log.read_text().split()),
        "connections": accepted(node) - connections,
    }


def interleaved(
    pairs: list[tuple[str, list[str]]], env: dict[str, str], log: Path, node: Node
) -> dict[str, list[dict[str, float]]]:
    """Each argv once per round, in turn, RUNS rounds after one warm-up round: a load that
    comes and goes weighs on all of them alike."""
    samples: dict[str, list[dict[str, float]]] = {name: [] for name, _ in pairs}
    for index in range(RUNS + 1):
        for name, argv in pairs:
            sample = measure(argv, env, log, node)
            if index:
                samples[name].append(sample)
    return samples


def median(samples: list[dict[str, float]], key: str) -> float:
    return statistics.median(s[key] for s in samples)


def test_bench_remote(
    tmp_path: Path,
    node_sshd: Node,
    lxc_container: Any,
    fakepve: Any,
    fakepve_url: str,
    fakepve_cafile: str,
) -> None:
    wheels = build_wheelhouse(tmp_path / "wheels")
    vmid = lxc_container(mounts=[(wheels, str(wheels))])
    fakepve.store_file("local", TEMPLATE, 1, "vztmpl")
    profile = write_profile(tmp_path / "p", wheels, node_sshd, vmid, fakepve_url, fakepve_cafile)
    env, log = ssh_shim(tmp_path / "shim")
    envlock = [sys.executable, "-m", "envlock"]
    for step in (["lock"], ["apply", "-y"]):
        done = subprocess.run(
            [*envlock, *step, str(profile)], env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
    transport = load_profile(profile).target.settings.ssh.transport()  # the profile's own master
    check = [*envlock, "check", str(profile)]
    cold = [
        measure(check, env, log, node_sshd, before=lambda: close_master(transport))
        for _ in range(RUNS)
    ]
    warm = [measure(check, env, log, node_sshd) for _ in range(RUNS)]
    noop = [
        measure([*envlock, "apply", "-y", str(profile)], env, log, node_sshd) for _ in range(RUNS)
    ]
    freeze = [
        *node_sshd.ssh_argv(
            "pct",
            "exec",
            str(vmid),
            "--",
            f"{ROOT}/bin/uv",
            "pip",
            "freeze",
            "--python",
            "/opt/venv/bin/python",
        )
    ]
    baseline = [measure(freeze, env, log, node_sshd) for _ in range(RUNS)]
    # The same warm master as envlock's: one session on it, pct exec, the venv's python.
    by_hand = [
        *transport.ssh_argv(),
        f"pct exec {vmid} --keep-env 0 -- /opt/venv/bin/python -c pass",
    ]
    run = [*envlock, "run", str(profile), "--", "python", "-c", "pass"]
    paired = interleaved(
        [("run", run), ("check", check), ("by_hand", by_hand)], env, log, node_sshd
    )
    results = {
        "runs": RUNS,
        "check_cold_s": median(cold, "seconds"),
        "check_cold_connections": median(cold, "connections"),
        "check_cold_round_trips": median(cold, "ssh_processes"),
        "check_warm_s": median(warm, "seconds"),
        "check_warm_connections": median(warm, "connections"),
        "check_warm_round_trips": median(warm, "ssh_processes"),
        "noop_apply_s": median(noop, "seconds"),
        "noop_apply_round_trips": median(noop, "ssh_processes"),
        "hand_written_freeze_s": median(baseline, "seconds"),
        "run_warm_s": median(paired["run"], "seconds"),
        "run_warm_round_trips": median(paired["run"], "ssh_processes"),
        "check_paired_s": median(paired["check"], "seconds"),
        "hand_written_python_s": median(paired["by_hand"], "seconds"),
    }
    results["ratio_run_vs_python"] = results["run_warm_s"] / results["hand_written_python_s"]
    results["ratio_check_vs_python"] = results["check_paired_s"] / results["hand_written_python_s"]
    results["ratio_check_cold_vs_freeze"] = (
        results["check_cold_s"] / results["hand_written_freeze_s"]
    )
    results["ratio_check_warm_vs_freeze"] = (
        results["check_warm_s"] / results["hand_written_freeze_s"]
    )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print("\nenvlock on a proxmox-lxc target (ssh → pct → LXC; API faked), median of", RUNS)
    print(
        f"  check, cold master : {results['check_cold_s']:.2f} s, "
        f"{results['check_cold_connections']:.0f} ssh connection(s), "
        f"{results['check_cold_round_trips']:.0f} round trip(s)"
    )
    print(
        f"  check, warm master : {results['check_warm_s']:.2f} s, "
        f"{results['check_warm_connections']:.0f} new connection(s), "
        f"{results['check_warm_round_trips']:.0f} round trip(s)"
    )
    print(
        f"  no-op apply        : {results['noop_apply_s']:.2f} s, "
        f"{results['noop_apply_round_trips']:.0f} round trip(s)"
    )
    print(
        f"  ssh … pct exec … uv pip freeze (hand-written): "
        f"{results['hand_written_freeze_s']:.2f} s → check is "
        f"{results['ratio_check_cold_vs_freeze']:.2f}x cold, "
        f"{results['ratio_check_warm_vs_freeze']:.2f}x warm"
    )
    print(
        f"  run -- python -c pass, warm master: {results['run_warm_s']:.3f} s, "
        f"{results['run_warm_round_trips']:.0f} round trip(s); "
        f"check {results['check_paired_s']:.3f} s; "
        "ssh … pct exec … python -c pass (hand-written, same master): "
        f"{results['hand_written_python_s']:.3f} s → run {results['ratio_run_vs_python']:.2f}x, "
        f"check {results['ratio_check_vs_python']:.2f}x"
    )
