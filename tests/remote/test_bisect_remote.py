"""`envlock bisect` on remote targets: probes are generations on the target, each run goes
through run's launcher there (its output read back for the metric). An ssh target on the
loopback sshd, and a proxmox-lxc one: a real LXC container behind sshd + `pct`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.json_shapes import conforms
from tests.remote.fixtures import Node
from tests.remote.test_remote import (  # noqa: F401 (lxc_profile is a fixture)
    envlock_env,
    lxc_profile,
    ssh_lines,
)
from tests.wheelhouse import build_wheel

# The command: tokens per second over slowpkg's work (2.0 sleeps), printed as a JSON line.
PROGRAM = (
    "import json, time, slowpkg; t = time.perf_counter(); slowpkg.work(); "
    "print(json.dumps({'tok_s': 1000 / (0.05 + time.perf_counter() - t)}))"
)


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "envlock", *map(str, args)],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env=envlock_env(),
    )


def ok(*args: str | Path) -> subprocess.CompletedProcess[str]:
    done = cli(*args)
    assert done.returncode == 0, done.stderr
    return done


def wheels(dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    build_wheel(dest, "slowpkg", "1.0", files={"slowpkg/__init__.py": "def work():\n    pass\n"})
    slow = "import time\n\ndef work():\n    time.sleep(0.1)\n"
    build_wheel(dest, "slowpkg", "2.0", files={"slowpkg/__init__.py": slow})
    build_wheel(dest, "pkga", "1.0")
    build_wheel(dest, "pkga", "1.1")
    return dest


def profile_text(target: list[str], links: list[str], packages: list[str], omp: str) -> str:
    return "\n".join(
        [
            '[profile]\nname = "remote"\n\n[target]',
            *target,
            '\n[python]\nversion = "3.11"\n\n[dependencies]',
            f"packages = {json.dumps(packages)}",
            f"find-links = {json.dumps(links)}",
            "offline = true\n",
            f'[env]\nOMP_NUM_THREADS = "{omp}"\n',
        ]
    )


def two_runs(profile: Path, target: list[str], links: list[str], base: Path) -> None:
    """GOOD: slowpkg 1.0, pkga 1.0, OMP 8; BAD: slowpkg 2.0, pkga 1.1, OMP 4."""
    for side, packages, omp in (
        ("good", ["slowpkg==1.0", "pkga==1.0"], "8"),
        ("bad", ["slowpkg==2.0", "pkga==1.1"], "4"),
    ):
        profile.write_text(profile_text(target, links, packages, omp))
        ok("lock", profile)
        ok("apply", "-y", profile)
        ok("snapshot", profile, base / side)


def bisected(profile: Path, base: Path) -> dict[str, Any]:
    before = json.loads(ok("generations", "--json", profile).stdout)
    done = cli(
        "bisect", "--json", profile, base / "good", base / "bad", "--metric", "tok_s",
        "--repeat", "1", "--", "python", "-c", PROGRAM,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    conforms("bisect", data)
    assert (data["status"], data["cause"]) == ("found", ["packages:slowpkg"])
    after = json.loads(ok("generations", "--json", profile).stdout)
    assert (after["generation"], after["hold"]) == (before["generation"], before["hold"])
    assert [g["name"] for g in after["generations"]] == [g["name"] for g in before["generations"]]
    return data


def test_bisect_on_an_ssh_target(tmp_path: Path, node_sshd: Node) -> None:
    links = [str(wheels(tmp_path / "wheels"))]
    target = [
        'type = "ssh"',
        f'root = "{tmp_path}/ssh root"',
        f'venv = "{tmp_path}/ssh venv"',
        *ssh_lines(node_sshd),
    ]
    profile = tmp_path / "p" / "remote.toml"
    profile.parent.mkdir()
    two_runs(profile, target, links, tmp_path)
    data = bisected(profile, tmp_path)
    assert len(data["differences"]) == 3  # slowpkg, pkga, OMP_NUM_THREADS
    # Each run went through the launcher on the target: nothing of it is left there.
    assert list((tmp_path / "ssh root" / "run").glob("bisect-*")) == []


def test_bisect_on_a_proxmox_lxc_container(
    lxc_profile: tuple[Path, int],  # noqa: F811 (test_remote's fixture)
    wheelhouse: Path,
    tmp_path: Path,
) -> None:
    """The container's own profile (its API is fakepve, its commands go ssh → pct →
    lxc-attach), with this test's wheels beside the suite's in the bind-mounted wheelhouse."""
    profile, _vmid = lxc_profile
    # Inside the bind-mounted wheelhouse (the container sees it at the same path), in a
    # directory of its own: the suite's flat wheelhouse stays as other tests know it.
    links = [str(wheels(wheelhouse / "bisect-remote"))]
    text = profile.read_text()
    target = text.split("[target]\n", 1)[1].split("\n\n", 1)[0].splitlines()
    container = "[container]" + text.split("[container]", 1)[1]
    for side, packages, omp in (
        ("good", ["slowpkg==1.0", "pkga==1.0"], "8"),
        ("bad", ["slowpkg==2.0", "pkga==1.1"], "4"),
    ):
        profile.write_text(profile_text(target, links, packages, omp) + "\n" + container)
        ok("lock", profile)
        ok("apply", "-y", profile)
        ok("snapshot", profile, tmp_path / side)
    bisected(profile, tmp_path)
