"""A fleet with a node nobody can reach: the members that answer are served, the ones that
cannot are named with what to do, and the exit status says so. The fleet across two healthy
nodes, and selection itself: test_fleet.py."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from envlock.schema import DOCUMENTS
from tests.remote.fixtures import Node
from tests.remote.test_fleet import UNREACHABLE, cli, fleet_target, members, relock
from tests.remote.test_remote import envlock_env, write_profile


def answered(profile: Path, reply: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`envlock apply PROFILE` at a terminal (a pty for stdin) whose user answers `reply`."""
    primary, secondary = pty.openpty()
    try:
        os.write(primary, f"{reply}\n".encode())  # read by the prompt, from the tty's buffer
        return subprocess.run(
            [sys.executable, "-m", "envlock", "apply", *args, str(profile)],
            stdin=secondary,
            capture_output=True,
            text=True,
            env=envlock_env(),
        )
    finally:
        os.close(primary)
        os.close(secondary)


def plan_lines(output: str, label: str) -> list[str]:
    return [
        line.removeprefix(f"{label}: ")
        for line in output.splitlines()
        if line.startswith(f"{label}: ")
    ]


def test_a_fleet_with_an_unreachable_node(
    tmp_path: Path,
    wheelhouse: Path,
    node_sshd: Node,
    lxc_container: Any,
    fakepve: Any,
    fakepve_url: str,
    fakepve_cafile: str,
) -> None:
    a, b, c = (lxc_container(mounts=[(wheelhouse, str(wheelhouse))]) for _ in range(3))
    fakepve.add_ct(a, node="pve1", status="running", config={"tags": "train"})
    fakepve.add_ct(b, node="pve1", status="running", config={"tags": "train"})
    fakepve.add_ct(c, node="pve2", status="running", config={"tags": "train"})
    for vmid in UNREACHABLE:
        fakepve.add_ct(vmid, node="pve3", status="running", config={"tags": "train"})
    hosts = 'pve1 = "127.0.0.1", pve2 = "localhost", pve3 = "127.0.0.2"'
    select = 'select = { tags = ["train"] }'
    target = fleet_target(node_sshd, tmp_path, fakepve_url, fakepve_cafile, select, hosts)
    profile = write_profile(tmp_path / "p", wheelhouse, target)
    refused_on = f"ssh root@127.0.0.2:{node_sshd.port}: connection refused"
    reachable = "pve1,pve2"

    # Without -y: every member's plan, prefixed by node/vmid, then one question.
    unasked = subprocess.run(
        [sys.executable, "-m", "envlock", "apply", str(profile)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=envlock_env(),
    )
    assert unasked.returncode == 2, unasked.stderr
    assert "refusing to act without confirmation: pass -y" in unasked.stderr
    for vmid in (a, b, c):
        label = f"pve{1 if vmid != c else 2}/{vmid}"
        lines = plan_lines(unasked.stdout, label)
        assert lines[0] == "to do: 6 action(s)", unasked.stdout
        assert lines[1].startswith("  1. install uv ")
        assert lines[2].startswith("  2. build generation 1-")
        assert any(line.startswith("  ") and "deploy" in line for line in lines[2:]), lines
    for vmid in UNREACHABLE:
        (line,) = plan_lines(unasked.stdout, f"pve3/{vmid}")
        assert line.startswith(f"failed: {refused_on}: ")
    declined = answered(profile, "n")
    assert declined.returncode == 1, declined.stderr
    assert "apply these plans to 3 container(s)? [y/N]" in declined.stderr
    assert "nothing changed" in declined.stderr
    assert plan_lines(declined.stdout, f"pve1/{a}") == plan_lines(unasked.stdout, f"pve1/{a}")
    untouched = members(cli("generations", "--json", "--on", reachable, profile))
    assert {v: m["generation"] for v, m in untouched.items()} == dict.fromkeys((a, b, c))

    # --fail-fast: after the first failure (pve3's first member) no other member starts.
    fast = cli("apply", "-y", "--fail-fast", "--jobs", "1", "--json", profile)
    assert fast.returncode == 3, fast.stderr
    found = members(fast)
    assert found[UNREACHABLE[0]]["result"] == "failed"
    for vmid in (UNREACHABLE[1], a, b, c):
        assert (found[vmid]["result"], found[vmid]["note"]) == (
            "not started",
            f"--fail-fast: pve3/{UNREACHABLE[0]} failed",
        )
    assert json.loads(fast.stdout)["schema"] == DOCUMENTS["fleet"]
    untouched = members(cli("generations", "--json", "--on", reachable, profile))
    assert {v: m["generation"] for v, m in untouched.items()} == dict.fromkeys((a, b, c))

    # Confirmed at the terminal: the unreachable node's members fail, the others apply; the
    # exit code is the worst member's.
    applied = answered(profile, "y", "--jobs", "3", "--json")
    assert applied.returncode == 3, applied.stderr
    assert plan_lines(applied.stderr, f"pve1/{b}")[0] == "to do: 6 action(s)"  # on stderr
    answer = json.loads(applied.stdout)
    assert (answer["schema"], answer["fleet"]["exit"]) == (DOCUMENTS["fleet"], 3)
    found = {m["vmid"]: m for m in answer["members"]}
    assert [found[v]["result"] for v in (a, b, c)] == ["applied"] * 3
    assert [found[v]["exit"] for v in (a, b, c)] == [0] * 3
    for vmid in UNREACHABLE:
        assert (found[vmid]["result"], found[vmid]["exit"]) == ("failed", 3)
        assert found[vmid]["note"].startswith(refused_on)
    first_lock = found[a]["generation_lock_id"]
    # Nothing left to do on the reachable members: no question asked.
    again = answered(profile, "n", "--on", reachable)
    assert again.returncode == 0, again.stderr
    assert "apply these plans" not in again.stderr
    assert plan_lines(again.stdout, f"pve1/{a}")[0].startswith("nothing to do: generation 1 ")

    # rollback and generations across the fleet, with and without --on.
    relock(profile, '"tinydep==1.0"', '"tinydep==0.9"')
    assert cli("apply", "-y", "--on", reachable, profile).returncode == 0
    rolled = cli("rollback", "--json", "--on", "pve1", profile)
    assert rolled.returncode == 0, rolled.stderr
    found = members(rolled)
    assert sorted(found) == [a, b]
    for vmid in (a, b):
        assert (found[vmid]["result"], found[vmid]["generation_number"]) == ("rolled back", 1)
        assert (found[vmid]["generation_lock_id"], found[vmid]["held"]) == (first_lock, True)
    listed = cli("generations", profile)
    assert listed.returncode == 3, listed.stderr  # the unreachable node's members
    new_lock = members(cli("generations", "--json", "--on", str(c), profile))[c][
        "generation_lock_id"
    ]
    assert listed.stdout.splitlines()[0] == (
        f"5 containers: 1 on lock {new_lock} (generation 2), "
        f"2 failed (pve3/{UNREACHABLE[0]}; pve3/{UNREACHABLE[1]}), "
        f"2 on lock {first_lock} (pve1/{a}, rolled back; pve1/{b}, rolled back)"
    )
    found = members(cli("generations", "--json", "--on", reachable, profile))
    assert [len(found[v]["generations"]) for v in (a, b, c)] == [2, 2, 2]
    assert [found[v]["current"].split("-")[0] for v in (a, b, c)] == ["1", "1", "2"]
    back = cli("rollback", "--to", "2", "--json", profile)
    assert back.returncode == 3, back.stderr
    found = members(back)
    assert [found[v]["result"] for v in (a, b, c)] == ["rolled back", "rolled back", "in sync"]
    assert found[c]["note"] == "generation 2 is already active"
    assert {found[v]["generation_lock_id"] for v in (a, b, c)} == {new_lock}
    assert not any(found[v]["held"] for v in (a, b, c))
    assert {found[v]["result"] for v in UNREACHABLE} == {"failed"}

    # Ctrl-C twice: the first stops the scheduling, the second stops waiting for the member
    # in flight (its agent waits for the root's lock, held here).
    relock(profile, '"tinydep==0.9"', '"tinydep==1.0"')
    lock_file = Path(f"/var/lib/lxc/{a}/rootfs/opt/envroot/.envlock.lock")
    with open(lock_file, "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        proc = subprocess.Popen(
            [sys.executable, "-m", "envlock", "apply", "-y", "--jobs", "1", "--on", reachable,
             str(profile)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=envlock_env(),
            start_new_session=True,
        )  # fmt: skip
        assert proc.stderr is not None
        said = ""
        for marker in (f"pve1/{a}: waiting for another envlock operation", "interrupted: no new"):
            for line in proc.stderr:
                said += line
                if marker in line:
                    os.killpg(proc.pid, signal.SIGINT)  # the terminal's Ctrl-C
                    break
        out, rest = proc.communicate(timeout=600)
        said += rest
    assert proc.returncode == 130, said
    assert f"interrupted again: not waiting for the members in flight (pve1/{a})" in said
    assert f"interrupted: pve1/{a} interrupted; not started: pve1/{b}, pve2/{c}" in said
    assert out.splitlines()[0] == (
        f"3 containers: 2 not started (pve1/{b}; pve2/{c}), 1 interrupted (pve1/{a})"
    )
    rows = {row.split()[0]: row for row in out.splitlines()[2:]}
    assert "interrupted: not waited for after a second Ctrl-C" in rows[str(a)]
    # The lock released, a new apply converges (after the orphaned agent, if it still runs).
    assert cli("apply", "-y", "--on", reachable, profile).returncode == 0
    final = members(cli("check", "--json", "--on", reachable, profile))
    assert {final[v]["exit"] for v in (a, b, c)} == {0}
