"""Fleets (issue #16): one proxmox-lxc profile across the containers a Proxmox cluster lists.

The cluster is fakepve (its /cluster/resources lists the containers, their nodes, tags and
pools); its two nodes, pve1 and pve2, are both the test sshd on loopback, reached as
127.0.0.1 and as localhost (two ssh connection settings, so two masters: one per node); the
containers are real LXC containers behind the test `pct`. A third node, pve3, is reached as
127.0.0.2, where no sshd listens: its members are unreachable.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from envlock.converge.fleet import MemberResult, fleet_headline
from envlock.proxmox.members import Member, parse_resources, restrict, select_members
from envlock.proxmox.settings import FleetSelect
from envlock.targets.ssh import SshTransport
from tests.json_shapes import conforms
from tests.projects import toml_list
from tests.remote.fixtures import Node
from tests.remote.test_remote import SECRET_ENV, envlock_env, pct, write_profile

STOPPED = 150  # listed by the cluster, stopped, and never reached
# Running, on a node whose host (127.0.0.2) has no sshd: the connection is refused.
UNREACHABLE = (120, 121)


# -- pure: selection and the fleet's answer ---------------------------------------------
RESOURCES = [
    {"type": "lxc", "vmid": 201, "node": "pve1", "name": "a", "status": "running",
     "tags": "train;gpu", "pool": "gpu"},
    {"type": "lxc", "vmid": 202, "node": "pve2", "name": "b", "status": "stopped", "tags": "train"},
    {"type": "lxc", "vmid": 203, "node": "pve2", "name": "eval-1", "status": "running"},
    {"type": "lxc", "vmid": 299, "node": "pve1", "name": "tpl", "template": 1, "tags": "train"},
    {"type": "qemu", "vmid": 300, "node": "pve1", "name": "vm", "tags": "train"},
]  # fmt: skip


def test_selection_reads_lxc_containers_by_list_tag_pool_node_and_name() -> None:
    members = parse_resources(RESOURCES)
    assert [m.vmid for m in members] == [201, 202, 203]  # no template, no VM

    def chosen(**select: Any) -> list[int]:
        return [m.vmid for m in select_members(FleetSelect(**select), members)]

    assert chosen(vmids=(203, 201)) == [201, 203]
    assert chosen(tags=("train",)) == [201, 202]
    assert chosen(tags=("train", "gpu")) == [201]
    assert chosen(pool="gpu") == [201]
    assert chosen(node="pve2") == [202, 203]
    assert chosen(name="eval-*") == [203]
    with pytest.raises(Exception, match="no container 404"):
        chosen(vmids=(201, 404))
    assert [m.vmid for m in restrict(members, ("203",))] == [203]
    assert [m.vmid for m in restrict(members, ("pve2",))] == [202, 203]
    assert [m.vmid for m in restrict(members, ("gpu,203",))] == [201, 203]
    with pytest.raises(Exception, match="matches no member"):
        restrict(members, ("pve9",))


def test_the_fleet_s_answer_names_the_members_that_differ() -> None:
    ctx = SimpleNamespace(lock=SimpleNamespace(short_hash="3691be6fb9cb"))

    def member(vmid: int, node: str) -> Member:
        return Member(vmid, node, f"ct{vmid}", "running")

    rows = [
        (member(200 + n, f"pve{n}"), MemberResult(0, "clean", 4, "3691be6fb9cb", drift=0))
        for n in range(1, 8)
    ]
    rows.append((member(203, "pve3"), MemberResult(0, "rolled back", 3, "47ef32e66bb7", True)))
    assert fleet_headline(ctx, rows) == (  # type: ignore[arg-type]
        "8 containers: 7 on lock 3691be6fb9cb (generation 4), "
        "1 on lock 47ef32e66bb7 (pve3/203, rolled back)"
    )
    assert fleet_headline(ctx, rows[:1]) == (  # type: ignore[arg-type]
        "1 container: 1 on lock 3691be6fb9cb (generation 4)"
    )


# -- the cluster ------------------------------------------------------------------------
def cli(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "envlock", *map(str, args)],
        capture_output=True,
        text=True,
        env={**envlock_env(), **(env or {})},
    )


def fleet_target(
    node: Node,
    tmp_path: Path,
    fakepve_url: str,
    cafile: str,
    select: str,
    hosts: str = 'pve1 = "127.0.0.1", pve2 = "localhost"',
) -> list[str]:
    """[target] of a fleet: both node names reach the test sshd (127.0.0.1, localhost)."""
    known_hosts = tmp_path / "known_hosts"
    entry = node.known_hosts_file.read_text().split(" ", 1)[1]
    known_hosts.write_text(f"[127.0.0.1]:{node.port} {entry}[localhost]:{node.port} {entry}")
    options = [
        f"UserKnownHostsFile={known_hosts}",
        "GlobalKnownHostsFile=/dev/null",
        "StrictHostKeyChecking=yes",
    ]
    return [
        'type = "proxmox-lxc"',
        f'api-url = "{fakepve_url}"',
        'api-user = "root@pam"',
        f'secret-env = "{SECRET_ENV}"',
        f'ca-file = "{cafile}"',
        select,
        f"hosts = {{ {hosts} }}",
        'root = "/opt/envroot"',
        'venv = "/opt/venv"',
        f"port = {node.port}",
        'user = "root"',
        f'identity-file = "{node.identity_file}"',
        f"ssh-options = {toml_list(options)}",
    ]


def members(result: subprocess.CompletedProcess[str]) -> dict[int, dict[str, Any]]:
    answer = json.loads(result.stdout)
    conforms("fleet", answer)  # every fleet document the tests read
    return {m["vmid"]: m for m in answer["members"]}


def most_at_once(log: Path) -> int:
    """How many `pct exec` ran at once, from the order of the test pct's start/end lines."""
    running = peak = 0
    for line in log.read_text().splitlines():
        running += 1 if line.startswith("start ") else -1
        peak = max(peak, running)
    return peak


def accepted(node: Node) -> int:
    return node.sshd_log.read_text().count("Accepted publickey")


def sessions(node: Node) -> int:
    """Commands the node's sshd ran (one session each, over a new or a shared connection)."""
    return node.sshd_log.read_text().count("Starting session")


def relock(profile: Path, old: str, new: str) -> None:
    profile.write_text(profile.read_text().replace(old, new))
    assert cli("lock", profile).returncode == 0


def test_a_fleet_across_two_nodes(
    tmp_path: Path,
    wheelhouse: Path,
    node_sshd: Node,
    lxc_container: Any,
    fakepve: Any,
    fakepve_url: str,
    fakepve_cafile: str,
) -> None:
    a, b, c = (lxc_container(mounts=[(wheelhouse, str(wheelhouse))]) for _ in range(3))
    fakepve.add_ct(a, node="pve1", status="running", pool="gpu", config={"tags": "train"})
    fakepve.add_ct(b, node="pve1", status="running", config={"tags": "train"})
    fakepve.add_ct(c, node="pve2", status="running", pool="gpu", config={"tags": "train;eval"})
    fakepve.add_ct(STOPPED, node="pve2", status="stopped", config={"tags": "train"})
    select = 'select = { tags = ["train"] }'
    target = fleet_target(node_sshd, tmp_path, fakepve_url, fakepve_cafile, select)
    profile = write_profile(tmp_path / "p", wheelhouse, target)

    # Selection by tag, by pool, by list; `--on` narrows any of them.
    found = cli("generations", "--json", profile)
    assert sorted(members(found)) == sorted([a, b, c, STOPPED])
    assert members(found)[STOPPED]["result"] == "stopped"
    relock(profile, select, 'select = { pool = "gpu" }')
    assert sorted(members(cli("generations", "--json", profile))) == sorted([a, c])
    relock(profile, 'select = { pool = "gpu" }', f"vmids = [{b}, {c}]")
    assert sorted(members(cli("generations", "--json", profile))) == sorted([b, c])
    on = cli("generations", "--json", "--on", "pve2", profile)
    assert sorted(members(on)) == [c]
    relock(profile, f"vmids = [{b}, {c}]", select)

    # apply --jobs 1: one member at a time; the stopped one is reported, the others apply.
    log = node_sshd.pct_dir / "pct.log"
    log.write_text("")
    try:
        applied = cli("apply", "-y", "--jobs", "1", profile)
        assert applied.returncode == 3, applied.stderr  # the stopped member's
        assert most_at_once(log) == 1
        assert f"pve1/{a}: applied" in applied.stderr and f"pve2/{c}: applied" in applied.stderr
        assert f"pve2/{STOPPED}: stopped" in applied.stderr
        rows = applied.stdout.splitlines()
        assert rows[0].startswith("4 containers: 3 on lock ")
        assert rows[2].split()[:2] == [str(STOPPED), "pve2"]  # the one that differs first

        # A new lock, applied with --jobs 3: members run at once.
        relock(profile, '"tinydep==1.0"', '"tinydep==0.9"')
        log.write_text("")
        again = cli("apply", "-y", "--jobs", "3", "--json", profile)
        assert again.returncode == 3, again.stderr
        assert most_at_once(log) >= 2
    finally:
        log.unlink()
    result = members(again)
    assert {v: result[v]["result"] for v in (a, b, c)} == dict.fromkeys((a, b, c), "applied")
    assert {result[v]["generation_number"] for v in (a, b, c)} == {2}
    assert json.loads(again.stdout)["fleet"]["exit"] == 3
    new_lock = result[a]["generation_lock_id"]

    # One member rolled back: the fleet-wide check finds it; one ssh master per node.
    rolled = cli("rollback", "--on", str(c), profile)
    assert rolled.returncode == 0, rolled.stderr
    runtime = Path(tempfile.mkdtemp(prefix="fleet-"))  # a socket path must stay short
    before, ran = accepted(node_sshd), sessions(node_sshd)
    three = ("check", "--on", "pve1", "--on", str(c), profile)
    checked = cli(*three, env={"XDG_RUNTIME_DIR": str(runtime)})
    assert checked.returncode == 0, checked.stderr
    assert sessions(node_sshd) - ran == 3 + 2  # a command per member, an opener per node
    # The next command finds both masters up: no opener, a session per member, no connection.
    ran, again = sessions(node_sshd), accepted(node_sshd)
    assert cli(*three, env={"XDG_RUNTIME_DIR": str(runtime)}).returncode == 0
    assert (sessions(node_sshd) - ran, accepted(node_sshd) - again) == (3, 0)
    old_lock = members(cli("check", "--json", "--on", str(c), profile))[c]["generation_lock_id"]
    assert checked.stdout.splitlines()[0] == (
        f"3 containers: 2 on lock {new_lock} (generation 2), "
        f"1 on lock {old_lock} (pve2/{c}, rolled back)"
    )
    assert checked.stdout.splitlines()[2].split()[:2] == [str(c), "pve2"]
    assert accepted(node_sshd) - before == 2  # three containers, two nodes
    options = tuple(json.loads(target[-1].split("= ", 1)[1]))
    for host in ("127.0.0.1", "localhost"):  # each node's master, in this command's dir
        master = SshTransport(
            host,
            user="root",
            port=node_sshd.port,
            identity_file=str(node_sshd.identity_file),
            options=options,
        )
        name = master.control_path().rsplit("/", 1)[1]
        assert (runtime / f"envlock-ssh-{os.getuid()}" / name).is_socket()
    shutil.rmtree(runtime)  # the masters exit once idle (ControlPersist)

    # A mixed result: the worst member's exit code, each member's in --json.
    pct(node_sshd, a, "rm", "/opt/train dir/train.py")
    mixed = cli("check", "--json", profile)
    assert mixed.returncode == 3
    exits = {v: m["exit"] for v, m in members(mixed).items()}
    assert exits == {a: 1, b: 0, c: 0, STOPPED: 3}
    assert members(mixed)[c]["held"] is True
    drift_only = cli("check", "--on", "pve1", profile)
    assert drift_only.returncode == 1
    assert drift_only.stdout.splitlines()[2].split()[:2] == [str(a), "pve1"]

    # run needs exactly one member.
    refused = cli("run", profile, "--", "true")
    assert refused.returncode == 2 and "--on" in refused.stderr
    ran = cli("run", "--on", str(b), profile, "--", "python", "-c", "import trainutil")
    assert ran.returncode == 0, ran.stderr

    # Ctrl-C during a fleet apply: the member in flight finishes, the rest never start.
    relock(profile, '["trainutil", "tinydep==0.9"]', '["tinydep==1.0"]')  # a new build
    code, stdout, stderr = interrupt_fleet_apply(profile, f"pve1/{a}: creating venv")
    assert code == 130, stderr
    assert f"pve1/{a}: applied" in stderr
    assert (
        f"interrupted: pve2/{STOPPED} stopped; pve1/{a} applied; "
        f"not started: pve1/{b}, pve2/{c}; a rerun converges the rest"
    ) in stderr
    rows = {row.split()[0]: row for row in stdout.splitlines()[2:]}
    assert " applied: " in rows[str(a)] and " stopped: " in rows[str(STOPPED)]
    assert all(" not started: " in rows[str(v)] for v in (b, c))
    after = members(cli("generations", "--json", profile))
    assert after[a]["generation_lock_id"] != after[b]["generation_lock_id"]
    assert cli("apply", "-y", profile).returncode == 3  # the rest converge; 150 is stopped
    final = members(cli("check", "--json", profile))
    assert {final[v]["exit"] for v in (a, b, c)} == {0}

    # plan, snapshot and cache status run across members too.
    planned = cli("plan", "--json", profile)
    assert planned.returncode == 3  # the stopped member
    assert {v: m["result"] for v, m in members(planned).items() if v != STOPPED} == dict.fromkeys(
        (a, b, c), "nothing to do"
    )
    shots = tmp_path / "shots"
    shot = cli("snapshot", "--on", "pve1", profile, shots)
    assert shot.returncode == 0, shot.stderr
    for vmid in (a, b):
        recorded = json.loads((shots / str(vmid) / "envlock-snapshot.json").read_text())
        assert recorded["generation"] == final[vmid]["generation"]
    cached = cli("cache", "--json", "--on", str(c), profile, "status")
    assert cached.returncode == 0, cached.stderr
    assert sorted(members(cached)) == [c] and "dirs" in members(cached)[c]["cache"]
    one_only = cli("cache", profile, "save", str(tmp_path / "cache.tar.gz"))
    assert one_only.returncode == 2 and "--on" in one_only.stderr

    # gc acts on the one member --on picks (a has generations 1, 2 and 3 active).
    unpicked = cli("gc", profile)
    assert unpicked.returncode == 2 and "pick one with --on VMID" in unpicked.stderr
    would = cli("gc", "--keep", "1", "--dry-run", "--on", str(a), profile)
    assert would.returncode == 0, would.stderr
    assert "would remove 1 generation(s): 1-" in would.stdout
    removed = cli("gc", "-y", "--keep", "1", "--on", str(a), profile)
    assert removed.returncode == 0 and "removed 1-" in removed.stdout, removed.stderr
    left = members(cli("generations", "--json", "--on", str(a), profile))[a]["generations"]
    assert [g["number"] for g in left] == [2, 3]


def interrupt_fleet_apply(profile: Path, marker: str) -> tuple[int, str, str]:
    """`envlock apply -y --jobs 1` in a process group of its own, sent SIGINT as a terminal
    sends Ctrl-C (to the whole foreground group, the member's ssh included) at the first
    progress line with `marker`; its exit code, stdout and stderr."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "envlock", "apply", "-y", "--jobs", "1", str(profile)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=envlock_env(),
        start_new_session=True,
    )
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if marker in line:
            os.killpg(proc.pid, signal.SIGINT)
            break
    out, rest = proc.communicate(timeout=600)
    return proc.returncode, out, "".join(seen) + rest


def test_fleet_profiles_refuse_one_container_s_values(
    tmp_path: Path, wheelhouse: Path, node_sshd: Node, fakepve: Any, fakepve_url: str,
    fakepve_cafile: str,
) -> None:  # fmt: skip
    target = fleet_target(node_sshd, tmp_path, fakepve_url, fakepve_cafile, "vmids = [201]")
    profile = write_profile(tmp_path / "p", wheelhouse, target)
    text = profile.read_text()

    profile.write_text(text.replace("vmids = [201]", "vmids = [201]\nvmid = 201"))
    refused = cli("check", profile)
    assert refused.returncode == 2 and "cannot name one container's vmid" in refused.stderr
    container = '[container]\nostemplate = "local:vztmpl/x.tar.zst"\nrootfs = "local-lvm:8"\n'
    profile.write_text(text + container + 'hostname = "train"\n')
    refused = cli("check", profile)
    assert refused.returncode == 2 and "a hostname is one container's" in refused.stderr
    profile.write_text(text.replace("vmids = [201]\n", "").replace("hosts = {", "hostz = {"))
    assert cli("check", profile).returncode == 2

    # A node `hosts` does not name: a clear error naming it, for that member only.
    fakepve.add_ct(201, node="pve3", status="running")
    profile.write_text(text)
    missing = cli("check", "--json", profile)
    assert missing.returncode == 2
    assert "hosts has no entry for the node pve3" in members(missing)[201]["note"]

    # With a [container], a stopped member is the API's to report: container drift (exit 1).
    fakepve.add_ct(202, node="pve1", status="stopped")
    profile.write_text(text.replace("vmids = [201]", "vmids = [202]") + container)
    assert cli("lock", profile).returncode == 0
    stopped = cli("check", "--json", profile)
    assert stopped.returncode == 1, stopped.stderr
    assert members(stopped)[202]["result"] == "drift"
    assert "container not running" in members(stopped)[202]["note"]
