"""Benchmark `envlock check` across a fleet: 3 containers on 2 nodes, --jobs 3 vs --jobs 1.

    python -m pytest bench/bench_fleet.py -p tests.remote.fixtures -q -s

It needs what the remote tests need (root, lxc, debootstrap, sshd; `make test` installs them)
and builds the fleet of tests/remote/test_fleet.py: the fake Proxmox API lists three real LXC
containers behind the test `pct`, two on pve1 and one on pve2, and both node names reach the
test sshd on loopback (127.0.0.1 and localhost: two ways of connecting, so two ssh masters).
Measured, each as a median of fresh `envlock` processes, --jobs 1 and --jobs 3 interleaved:
  * check with cold masters (a fresh control directory): time, new ssh connections (sshd's
    log) per node, master sockets, ssh processes (round trips) per node
  * check with the masters warm (the next command within ControlPersist)
  * the ratio --jobs 3 / --jobs 1 of each
  * with warm masters, --jobs 3 beside each member checked alone (a profile of its own: one
    proxmox-lxc target, no API), in turn: the goal is <= 1.5x the slowest member alone;
    beside it the CPU time every process on the machine spent during the fleet's check
    (sshd, pct, the containers' agents, the fake API: all share this machine's cores)
Then one member is rolled back and the human summary of a check is kept as a transcript.
Results: bench/results/fleet.json and a table on stdout.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from tests.remote.fixtures import Node
from tests.remote.test_fleet import fleet_target
from tests.remote.test_remote import envlock_env, write_profile
from tests.wheelhouse import build_wheelhouse

RESULTS = Path(__file__).resolve().parent / "results" / "fleet.json"
RUNS = 5
NODES = {"127.0.0.1": "pve1", "localhost": "pve2"}  # ssh host -> Proxmox node


def ssh_shim(directory: Path) -> tuple[dict[str, str], Path]:
    """An `ssh` first on PATH that logs each invocation's host, then runs the real one."""
    directory.mkdir()
    log = directory / "hosts"
    real = shutil.which("ssh")
    shim = directory / "ssh"
    # The host is the argument before "--" (SshTransport.ssh_argv ends with HOST --); a
    # question to a master (`ssh -O check`) goes no further than its local socket.
    shim.write_text(
        "#!/bin/sh\n"
        'prev=""\n'
        'for a in "$@"; do\n'
        f'  [ "$a" = "-O" ] && exec {real} "$@"\n'
        '  [ "$a" = "--" ] && break\n'
        '  prev="$a"\n'
        "done\n"
        f'echo "$prev" >> "{log}"\n'
        f'exec {real} "$@"\n'
    )
    shim.chmod(0o755)
    env = envlock_env(PATH=f"{directory}:{os.environ['PATH']}")
    return env, log


def accepted(node: Node) -> int:
    return node.sshd_log.read_text(errors="replace").count("Accepted publickey")


def sockets(runtime: Path) -> list[Path]:
    found = runtime / f"envlock-ssh-{os.getuid()}"
    return [p for p in found.iterdir() if p.is_socket()] if found.is_dir() else []


def close_masters(runtime: Path) -> None:
    for socket in sockets(runtime):
        subprocess.run(
            ["ssh", "-o", f"ControlPath={socket}", "-O", "exit", "fleet-master"],
            capture_output=True,
            check=False,
        )
    shutil.rmtree(runtime, ignore_errors=True)


def measure(
    argv: list[str], env: dict[str, str], log: Path, node: Node, runtime: Path
) -> dict[str, Any]:
    log.write_text("")
    connections = accepted(node)
    started = time.perf_counter()
    done = subprocess.run(
        argv, env={**env, "XDG_RUNTIME_DIR": str(runtime)}, capture_output=True, text=True
    )
    elapsed = time.perf_counter() - started
    assert done.returncode == 0, done.stderr
    time.sleep(0.2)  # sshd writes its log line after the session
    hosts = Counter(log.read_text().split())
    return {
        "seconds": elapsed,
        "connections": accepted(node) - connections,
        "masters": len(sockets(runtime)),
        "round_trips": {NODES[h]: n for h, n in sorted(hosts.items())},
        "member_seconds": [m["seconds"] for m in json.loads(done.stdout)["members"]],
    }


def median(samples: list[dict[str, Any]], key: str) -> float:
    return statistics.median(s[key] for s in samples)


def check_pair(
    check: list[str], env: dict[str, str], log: Path, node: Node
) -> tuple[dict[str, Any], dict[str, Any]]:
    """One check with cold masters, then one with the same masters warm."""
    runtime = Path(tempfile.mkdtemp(prefix="fleet-"))  # a socket path must stay short
    try:
        cold = measure(check, env, log, node, runtime)
        warm = measure(check, env, log, node, runtime)
    finally:
        close_masters(runtime)
    return cold, warm


def single_profiles(profile: Path, members: dict[int, str]) -> dict[int, Path]:
    """Each member as a profile of its own: the same environment on one proxmox-lxc target
    (vmid and node host, no API), the way a container is checked outside a fleet."""
    fleet_only = ("api-url", "api-user", "secret-env", "ca-file", "select", "hosts")
    singles = {}
    for vmid, host in members.items():
        lines: list[str] = []
        for line in profile.read_text().splitlines():
            if not line.startswith(fleet_only):
                lines.append(line)
            if line == 'type = "proxmox-lxc"':
                lines += [f"vmid = {vmid}", f'host = "{host}"']
        single = profile.with_name(f"single-{vmid}.toml")
        single.write_text("\n".join(lines) + "\n")
        singles[vmid] = single
    return singles


def busy_seconds() -> float:
    """CPU time the whole machine has spent busy (every process: sshd, pct, the containers'
    agents, the fake API), from /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def timed(argv: list[str], env: dict[str, str], cpu: list[float] | None = None) -> float:
    started, busy = time.perf_counter(), busy_seconds()
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    if cpu is not None:
        cpu.append(busy_seconds() - busy)
    return time.perf_counter() - started


def alone_and_together(
    envlock: list[str], profile: Path, singles: dict[int, Path], env: dict[str, str]
) -> dict[str, Any]:
    """Warm masters: the fleet's `check --jobs 3` and each member checked alone (its own
    profile), in turn; the goal compares the fleet with its slowest member alone."""
    runtime = Path(tempfile.mkdtemp(prefix="fleet-"))
    env = {**env, "XDG_RUNTIME_DIR": str(runtime)}
    fleet = [*envlock, "check", "--json", "--jobs", "3", str(profile)]
    alone = {vmid: [*envlock, "check", "--json", str(p)] for vmid, p in singles.items()}
    try:
        timed(fleet, env)  # opens both masters; each single reuses its node's
        for argv in alone.values():
            timed(argv, env)
        together: list[float] = []
        cpu: list[float] = []
        each: dict[int, list[float]] = {vmid: [] for vmid in alone}
        for _ in range(RUNS):
            together.append(timed(fleet, env, cpu))
            for vmid, argv in alone.items():
                each[vmid].append(timed(argv, env))
    finally:
        close_masters(runtime)
    medians = {vmid: statistics.median(times) for vmid, times in each.items()}
    slowest = max(medians.values())
    fleet_s = statistics.median(together)
    return {
        "fleet_jobs3_warm_s": fleet_s,
        "alone_warm_s": {str(vmid): t for vmid, t in medians.items()},
        "slowest_alone_warm_s": slowest,
        "ratio_fleet_vs_slowest_alone": fleet_s / slowest,
        # What the machine's CPUs alone allow: every process's CPU time over the cores.
        "fleet_jobs3_cpu_s": statistics.median(cpu),
        "cpus": os.cpu_count(),
        "fleet_jobs3_cpu_floor_s": statistics.median(cpu) / (os.cpu_count() or 1),
    }


def test_bench_fleet(
    tmp_path: Path,
    node_sshd: Node,
    lxc_container: Any,
    fakepve: Any,
    fakepve_url: str,
    fakepve_cafile: str,
) -> None:
    wheels = build_wheelhouse(tmp_path / "wheels")
    a, b, c = (lxc_container(mounts=[(wheels, str(wheels))]) for _ in range(3))
    for vmid, node in ((a, "pve1"), (b, "pve1"), (c, "pve2")):
        fakepve.add_ct(vmid, node=node, status="running", config={"tags": "train"})
    select = 'select = { tags = ["train"] }'
    target = fleet_target(node_sshd, tmp_path, fakepve_url, fakepve_cafile, select)
    base = tmp_path / "fleet"
    profile = write_profile(base, wheels, target).rename(base / "fleet.toml")
    env, log = ssh_shim(tmp_path / "shim")
    envlock = [sys.executable, "-m", "envlock"]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([*envlock, *args], env=env, capture_output=True, text=True, cwd=base)
        assert done.returncode == 0, done.stderr
        return done

    run("lock", "fleet.toml")
    run("apply", "-y", "--jobs", "3", "fleet.toml")
    samples: dict[int, dict[str, list[dict[str, Any]]]] = {
        jobs: {"cold": [], "warm": []} for jobs in (1, 3)
    }
    for _ in range(RUNS):
        for jobs in (1, 3):
            check = [*envlock, "check", "--json", "--jobs", str(jobs), str(profile)]
            cold, warm = check_pair(check, env, log, node_sshd)
            samples[jobs]["cold"].append(cold)
            samples[jobs]["warm"].append(warm)

    results: dict[str, Any] = {"runs": RUNS, "containers": 3, "nodes": len(NODES)}
    for jobs in (1, 3):
        for mode in ("cold", "warm"):
            got = samples[jobs][mode]
            results[f"check_{mode}_jobs{jobs}_s"] = median(got, "seconds")
            results[f"check_{mode}_jobs{jobs}_connections"] = median(got, "connections")
            results[f"check_{mode}_jobs{jobs}_member_s"] = statistics.median(
                s for sample in got for s in sample["member_seconds"]
            )
        colds = samples[jobs]["cold"]
        results[f"check_cold_jobs{jobs}_masters"] = median(colds, "masters")
        results[f"check_cold_jobs{jobs}_round_trips"] = {
            node: statistics.median(s["round_trips"].get(node, 0) for s in colds)
            for node in NODES.values()
        }
    singles = single_profiles(profile, {a: "127.0.0.1", b: "127.0.0.1", c: "localhost"})
    for single in singles.values():
        run("lock", single.name)
    results.update(alone_and_together(envlock, profile, singles, env))
    for mode in ("cold", "warm"):
        results[f"ratio_{mode}_jobs3_vs_jobs1"] = (
            results[f"check_{mode}_jobs3_s"] / results[f"check_{mode}_jobs1_s"]
        )
    for jobs in (1, 3):
        results[f"connections_per_node_jobs{jobs}"] = (
            results[f"check_cold_jobs{jobs}_connections"] / results["nodes"]
        )

    # The summary a user reads: one member rolled back to the previous lock.
    fleet_toml = profile.read_text()
    profile.write_text(fleet_toml.replace('"tinydep==1.0"', '"tinydep==0.9"'))
    run("lock", "fleet.toml")
    run("apply", "-y", "--jobs", "3", "fleet.toml")
    run("rollback", "--on", str(c), "fleet.toml")
    shown = ["check", "fleet.toml"]
    summary = run(*shown)
    results["transcript"] = (
        f"$ envlock {' '.join(shown)}\n{summary.stderr}{summary.stdout}".splitlines()
    )

    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nenvlock check across a fleet: 3 containers, 2 nodes (median of {RUNS})")
    for mode, words in (("cold", "cold masters"), ("warm", "warm masters")):
        print(
            f"  {words:12}: --jobs 1 {results[f'check_{mode}_jobs1_s']:.2f} s, "
            f"--jobs 3 {results[f'check_{mode}_jobs3_s']:.2f} s "
            f"(ratio {results[f'ratio_{mode}_jobs3_vs_jobs1']:.2f}); a member "
            f"{results[f'check_{mode}_jobs1_member_s']:.2f} s / "
            f"{results[f'check_{mode}_jobs3_member_s']:.2f} s"
        )
    for jobs in (1, 3):
        print(
            f"  --jobs {jobs}, cold: {results[f'check_cold_jobs{jobs}_connections']:.0f} "
            f"connection(s) for {results['nodes']} nodes "
            f"({results[f'connections_per_node_jobs{jobs}']:.1f} per node), "
            f"{results[f'check_cold_jobs{jobs}_masters']:.0f} master(s), round trips "
            f"{results[f'check_cold_jobs{jobs}_round_trips']}"
        )
    print(
        f"  warm masters: the fleet --jobs 3 {results['fleet_jobs3_warm_s']:.2f} s, its slowest "
        f"member checked alone {results['slowest_alone_warm_s']:.2f} s "
        f"({results['ratio_fleet_vs_slowest_alone']:.2f}x; goal <= 1.5x); the fleet's "
        f"processes used {results['fleet_jobs3_cpu_s']:.2f} CPU-s, "
        f"{results['fleet_jobs3_cpu_floor_s']:.2f} s on {results['cpus']} cores"
    )
    print("\n" + "\n".join(results["transcript"]))
