"""The fleet loop, driven through scripted nodes: no sshd, container or API, seconds.

Each member's transport is the real pct transport over a scripted node (tests/scripted.py:
any command nobody scripted raises), so pct's own failures (a stopped container) reach the
loop as they would from a real node. These pin the loop itself: at most `--jobs` members at
once, one connection check per node, every member's result in the summary whatever its
work raised, --fail-fast, and the exit code of the worst member. test_fleet.py proves the
whole over fakepve, sshd and real containers.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from envlock.converge.fleet import Fleet, MemberResult, run_fleet
from envlock.errors import OperationError, UsageError
from envlock.profile.read import load_profile
from envlock.proxmox.members import Member
from envlock.reconcile.context import Context
from envlock.targets.base import Result
from envlock.targets.pct import PctTransport
from tests.projects import torch_profile_text
from tests.scripted import Call, ScriptedTransport, Unscripted
from tests.unit.test_core import LOCK


@dataclass(frozen=True)
class Settings:
    """A fleet's [target] settings, narrowed to a member by `member` as the real ones are."""

    vmid: int = 0
    node: str = ""
    fleet: object = True

    def member(self, member: Member) -> Settings:
        assert member.vmid is not None
        return dataclasses.replace(self, vmid=member.vmid, node=member.node)


class ScriptedNode(ScriptedTransport):
    """A node reached as the ssh transport reaches one: its master connection is either up
    already (`warm`: a command before this one left it) or opened by a `true` on the node."""

    def __init__(self, handler: Any, name: str, warm: bool) -> None:
        super().__init__(handler, name=name)
        self.host = name  # what pct names the node by
        self.warm = warm

    def open_master(self) -> None:
        if not self.warm:
            self.run(["true"])


class Cluster:
    """Scripted nodes: `true` answers the connection check (unless the node is down), and
    `pct exec VMID … -- env -i K=V… argv` answers `argv` as container VMID would. The nodes
    in `warm` have their master connection up already."""

    def __init__(
        self,
        down: tuple[str, ...] = (),
        stopped: tuple[int, ...] = (),
        warm: tuple[str, ...] = (),
    ) -> None:
        self.down = down
        self.stopped = stopped
        self.warm = warm
        self.checks: dict[str, int] = {}
        self.nodes: dict[str, ScriptedNode] = {}
        self.lock = threading.Lock()

    def node(self, name: str) -> ScriptedNode:
        with self.lock:
            if name not in self.nodes:
                answer = lambda call: self.answer(name, call)  # noqa: E731
                self.nodes[name] = ScriptedNode(answer, name, name in self.warm)
            return self.nodes[name]

    def answer(self, name: str, call: Call) -> Result:
        argv = list(call.argv)
        if argv == ["true"]:
            with self.lock:
                self.checks[name] = self.checks.get(name, 0) + 1
            if name in self.down:
                raise OperationError(f"ssh {name}: connection refused")
            return Result(call.argv, 0, b"", b"")
        if argv[:2] != ["pct", "exec"]:
            raise Unscripted(f"{name}: {argv!r}")
        vmid = int(argv[2])
        inner = argv[argv.index("-i") + 1 :]
        while inner and "=" in inner[0]:
            inner.pop(0)
        if vmid in self.stopped:
            return Result(call.argv, 255, b"", f"container '{vmid}' not running!\n".encode())
        if inner == ["hostname"]:
            return Result(call.argv, 0, f"ct{vmid}\n".encode(), b"")
        raise Unscripted(f"{name}/{vmid}: {inner!r}")


def fleet_context(tmp_path: Path, cluster: Cluster) -> Context:
    path = tmp_path / "fleet.toml"
    path.write_text(torch_profile_text("fleet", torch=None))
    profile = load_profile(path)

    def transport(settings: Settings) -> PctTransport:
        return PctTransport(cluster.node(settings.node), settings.vmid, settings.node)  # type: ignore[arg-type]

    kind = dataclasses.replace(profile.target.kind, transport=transport)
    target = dataclasses.replace(profile.target, kind=kind, settings=Settings())
    profile = dataclasses.replace(profile, target=target)
    return Context(profile, LOCK, transport(Settings(node="pve1")))


def members(*spec: tuple[int, str, str]) -> list[Member]:
    return [Member(vmid, node, f"ct{vmid}", status) for vmid, node, status in spec]


def hostname(ctx: Context, progress: Any) -> MemberResult:
    """A member's work: ask the container its name, report it on the profile's lock."""
    name = ctx.transport.run(["hostname"]).text().strip()
    return MemberResult(0, "clean", generation=1, lock=LOCK.short_hash, note=name)


def test_at_most_jobs_members_run_at_once_and_each_node_is_checked_once(
    tmp_path: Path,
) -> None:
    cluster = Cluster()
    ctx = fleet_context(tmp_path, cluster)
    five = members(*[(101 + i, "pve1" if i < 3 else "pve2", "running") for i in range(5)])
    active, peak, started = [0], [0], [0]
    both = threading.Condition()

    def work(mctx: Context, progress: Any) -> MemberResult:
        with both:
            active[0] += 1
            started[0] += 1
            peak[0] = max(peak[0], active[0])
            both.notify_all()
            # Wait for a second member while any is left: with --jobs 2 one comes.
            both.wait_for(lambda: active[0] >= 2 or started[0] == len(five), timeout=5)
        time.sleep(0.01)
        with both:
            active[0] -= 1
        return hostname(mctx, progress)

    results, interrupted = Fleet(ctx, five, quiet=True).run(
        work, jobs=2, fail_fast=False, include_stopped=False
    )
    assert peak[0] == 2 and not interrupted
    assert [results[m].note for m in five] == [f"ct{m.vmid}" for m in five]
    assert all(r.result == "clean" and r.seconds > 0 for r in results.values())
    # One connection check per node, before its first member, shared by the others.
    assert cluster.checks == {"pve1": 1, "pve2": 1}


def test_a_node_whose_master_is_up_is_not_asked_again(tmp_path: Path) -> None:
    """The master a command before this one left running serves the members as it is: no
    `true` on that node (a session there costs ~0.13 s even over a warm master)."""
    cluster = Cluster(warm=("pve1",))
    ctx = fleet_context(tmp_path, cluster)
    three = members((101, "pve1", "running"), (102, "pve1", "running"), (103, "pve2", "running"))
    results, _ = Fleet(ctx, three, quiet=True).run(
        hostname, jobs=3, fail_fast=False, include_stopped=False
    )
    assert [results[m].note for m in three] == ["ct101", "ct102", "ct103"]
    assert cluster.checks == {"pve2": 1}
    sent = [c.argv for node in cluster.nodes.values() for c in node.calls]
    assert len(sent) == 4 and sent.count(("true",)) == 1  # a command per member, one opener


def test_every_failure_becomes_its_member_s_result(tmp_path: Path) -> None:
    cluster = Cluster(down=("pve3",), stopped=(104,))
    ctx = fleet_context(tmp_path, cluster)
    fleet = members(
        (101, "pve1", "running"),
        (102, "pve1", "running"),
        (103, "pve1", "stopped"),
        (104, "pve2", "running"),  # listed running, but pct finds it stopped
        (105, "pve3", "running"),
        (106, "pve3", "running"),
        (107, "pve2", "running"),
    )

    def work(mctx: Context, progress: Any) -> MemberResult:
        vmid = mctx.transport.vmid  # type: ignore[attr-defined]
        if vmid == 101:
            raise UsageError("the member's profile is refused")
        if vmid == 102:
            raise RuntimeError("a bug in one member's work")
        return hostname(mctx, progress)

    results, _ = Fleet(ctx, fleet, quiet=True).run(
        work, jobs=3, fail_fast=False, include_stopped=False
    )
    got = {m.vmid: (results[m].code, results[m].result, results[m].note) for m in fleet}
    assert got[101] == (2, "failed", "the member's profile is refused")
    assert got[102] == (3, "failed", "RuntimeError: a bug in one member's work")
    assert got[103] == (3, "stopped", "container 103 is stopped")
    assert got[104][:2] == (3, "stopped") and "container 104 on pve2 is not running" in got[104][2]
    assert got[105] == got[106] == (3, "failed", "ssh pve3: connection refused")
    assert got[107] == (0, "clean", "ct107")
    assert cluster.checks["pve3"] == 1  # a node that failed is not asked again
    assert "pve1" in cluster.checks  # 103 is never reached, the others on pve1 are


def test_a_stopped_member_is_reached_when_stopped_ones_are_included(tmp_path: Path) -> None:
    ctx = fleet_context(tmp_path, Cluster())
    (stopped,) = members((103, "pve1", "stopped"))
    results, _ = Fleet(ctx, [stopped], quiet=True).run(
        hostname, jobs=1, fail_fast=False, include_stopped=True
    )
    assert results[stopped].result == "clean"


def test_fail_fast_starts_no_member_after_a_failure(tmp_path: Path) -> None:
    ctx = fleet_context(tmp_path, Cluster())
    fleet = members(*[(101 + i, "pve1", "running") for i in range(4)])
    ran: list[int] = []

    def work(mctx: Context, progress: Any) -> MemberResult:
        vmid = mctx.transport.vmid  # type: ignore[attr-defined]
        ran.append(vmid)
        if vmid == 102:
            raise OperationError("the apply failed")
        return hostname(mctx, progress)

    results, interrupted = Fleet(ctx, fleet, quiet=True).run(
        work, jobs=1, fail_fast=True, include_stopped=False
    )
    assert ran == [101, 102] and not interrupted
    assert [results[m].result for m in fleet] == ["clean", "failed", "not started", "not started"]
    assert results[fleet[2]].note == "--fail-fast: pve1/102 failed"
    # A drift (exit 1) is no failure: --fail-fast goes on.
    ran.clear()
    drifting = [MemberResult(1, "drift", drift=2), MemberResult(1, "drift", drift=1)]
    results, _ = Fleet(ctx, fleet[:2], quiet=True).run(
        lambda mctx, progress: drifting.pop(), jobs=1, fail_fast=True, include_stopped=False
    )
    assert [r.result for r in results.values()] == ["drift", "drift"]


def test_jobs_below_one_is_a_usage_error(tmp_path: Path) -> None:
    ctx = fleet_context(tmp_path, Cluster())
    with pytest.raises(UsageError, match="--jobs expects at least 1, found 0"):
        Fleet(ctx, members((101, "pve1", "running")), quiet=True).run(
            hostname, jobs=0, fail_fast=False, include_stopped=False
        )


def test_the_summary_lists_the_members_that_differ_first_and_exits_with_the_worst(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ctx = fleet_context(tmp_path, Cluster(stopped=(103,)))
    fleet = members((101, "pve1", "running"), (102, "pve1", "running"), (103, "pve2", "running"))

    def work(mctx: Context, progress: Any) -> MemberResult:
        if mctx.transport.vmid == 101:  # type: ignore[attr-defined]
            return MemberResult(1, "drift", generation=1, lock=LOCK.short_hash, drift=2)
        return hostname(mctx, progress)

    with pytest.raises(SystemExit) as exited:
        run_fleet(ctx, work, on=(), jobs=2, as_json=True, command="check", members=fleet)
    assert exited.value.code == 3  # the worst member's: the stopped one
    document = json.loads(capsys.readouterr().out)
    rows = [(m["vmid"], m["result"], m["exit"]) for m in document["members"]]
    assert rows == [(101, "drift", 1), (103, "stopped", 3), (102, "clean", 0)]
    assert document["fleet"] == {
        "profile": "fleet",
        "lock_id": LOCK.short_hash,
        "members": 3,
        "summary": document["fleet"]["summary"],
        "exit": 3,
        "interrupted": False,
    }
    summary = document["fleet"]["summary"]
    assert summary.startswith("3 containers: 2 on lock ") and "1 stopped (pve2/103)" in summary
    assert document["members"][0]["drift_count"] == 2 and document["members"][2]["note"] == "ct102"
