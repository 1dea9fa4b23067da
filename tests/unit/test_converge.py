"""converge, driven through a scripted transport: no uv, venv, ssh or container, seconds.

The probe and the agent's apply answer as scripted (tests/scripted.py: any command nobody
scripted raises), so each test pins what converge sends, in which order, and what it makes
of the answers: plan → execute → re-plan when the agent says the root moved → verify, the
bound on re-plans, a rollback's hold ended, and the container's snapshot taken by the
provisioner while the agent holds the root's lock. test_converge.py proves the same on real
roots; these reach every branch in well under a second.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from envlock.base.drift_kinds import Drift
from envlock.commands.apply import refuse_across_fleet
from envlock.converge.converge import REPLANS, converge, refuse_restart
from envlock.errors import OperationError, UsageError
from envlock.profile.read import load_profile
from envlock.reconcile.context import Context
from envlock.reconcile.drift import compute_drift
from envlock.reconcile.execute import NOTHING_DONE, ApplyAnswer, execute
from envlock.reconcile.plan import Plan
from envlock.reconcile.state import parse_state
from envlock.runs.snapshot import build_snapshot
from envlock.runs.snapshot_file import write_snapshot
from envlock.targets.base import ContainerCheck, Result
from tests.projects import torch_profile_text
from tests.scripted import (
    Call,
    Script,
    ScriptedTransport,
    Unscripted,
    answer,
    handshake,
    replied,
)
from tests.unit.test_core import GEN, HASH, LOCK

OTHER = "000000000abc"  # a rollback's generation on another lock
FINGERPRINT = "fp-1"
# What an empty root is planned: build generation 1, its cache dir, switch, link the venv.
FIRST_PLAN = ["build", "cache-dir", "switch", "link-venv"]


# The refusal names every type whose profile may declare its container (the target table).
RESTART_REFUSED = (
    r"^--restart needs a target that declares its container: proxmox-lxc with a "
    r"\[container\] table or docker with a \[docker\] table"
)


def in_sync(root: str, **changes: Any) -> dict[str, Any]:
    """The probe's answer for a root in sync with LOCK: generation 1 active."""
    raw: dict[str, Any] = {
        "generations": [{"number": 1, "name": GEN, "lock_hash": HASH, "complete": True}],
        "current": GEN,
        "in_generation": True,
        "venv_link": {"kind": "symlink", "target": f"{root}/current"},
        "python": {"version": "3.11.7"},
        "packages": dict(LOCK.versions()),
        "torch": {"version": "2.11.0+cu128", "local": "cu128", "cuda": "12.8"},
        "files": {"checked": 10},
        "cache": {"dir": f"{root}/cache/torch-x", "exists": True, "files": 1},
        "root_fingerprint": FINGERPRINT,
    }
    raw.update(changes)
    return raw


def empty_root(root: str) -> dict[str, Any]:
    """Nothing applied yet: no generation, no link."""
    return in_sync(
        root, generations=[], current=None, in_generation=False, venv_link={"kind": "absent"}
    )


def held(root: str) -> dict[str, Any]:
    """A rollback holds the root on generation 2 (another lock); generation 1 is LOCK's."""
    gens = [
        {"number": 1, "name": GEN, "lock_hash": HASH, "complete": True},
        {"number": 2, "name": f"2-{OTHER}", "lock_hash": OTHER, "complete": True},
    ]
    return in_sync(
        root,
        generations=gens,
        current=f"2-{OTHER}",
        hold={"generation": f"2-{OTHER}", "from": GEN, "time": "T"},
        root_fingerprint="fp-held",
    )


@dataclass
class Provisioner:
    """The container's provisioner (the real one asks the Proxmox API): records each call."""

    running: bool = True
    drifts: tuple[Drift, ...] = ()
    fail: Exception | None = None
    name: str | None = "envlock-snap"  # None: the profile asks for no snapshot
    calls: list[tuple[str, Any]] = field(default_factory=list)
    progress: list[Any] = field(default_factory=list)  # the on_progress each call was given

    def describe(self) -> str:
        return "container 101"

    def check(self) -> ContainerCheck:
        self.calls.append(("check", None))
        return ContainerCheck(True, self.running, self.drifts)

    def snapshot(self, *, generation: Any, lock: str, applying: str, on_progress: Any) -> str:
        self.calls.append(("snapshot", (generation, lock, applying)))
        self.progress.append(on_progress)
        if self.fail is not None:
            raise self.fail
        return self.name

    def provision(self, *, restart: bool, on_progress: Any) -> list[str]:
        self.calls.append(("provision", restart))
        self.progress.append(on_progress)
        self.running = True
        return ["container started"]


def context(tmp_path: Path, script: Script, provisioner: Provisioner | None = None) -> Context:
    """A local profile with LOCK, its commands answered by `script`; with `provisioner`,
    a target type whose container it provisions."""
    path = tmp_path / "unit.toml"
    path.write_text(torch_profile_text("unit", torch=None))
    profile = load_profile(path)
    if provisioner is not None:
        kind = dataclasses.replace(
            profile.target.kind, provisioner=lambda settings, container: provisioner
        )
        target = dataclasses.replace(profile.target, kind=kind)
        profile = dataclasses.replace(profile, target=target, container=SimpleNamespace(devices=()))
    return Context(profile, LOCK, ScriptedTransport(script))


def root_of(tmp_path: Path) -> str:
    return str(tmp_path / "root")


def probe(raw: dict[str, Any]) -> tuple[str, Any]:
    return ("probe", replied(raw))


def kinds(call: Call) -> list[str]:
    return [a["kind"] for a in call.request["actions"]]


def test_the_scripted_in_sync_answer_has_no_drift(tmp_path: Path) -> None:
    ctx = context(tmp_path, Script())
    assert compute_drift(ctx.expectation(), parse_state(in_sync(root_of(tmp_path)))) == []


def test_an_unscripted_command_raises() -> None:
    transport = ScriptedTransport(Script())
    with pytest.raises(Unscripted):
        transport.run(["true"])


def test_in_sync_probes_once_and_applies_nothing(tmp_path: Path) -> None:
    script = Script(probe(in_sync(root_of(tmp_path))))
    done = converge(context(tmp_path, script))
    assert script.done()
    assert (done.applied, done.snapshotted, done.current, done.replans) == (False, False, GEN, 0)
    assert done.plan.empty and done.plan.reason == f"generation 1 matches lock {HASH}"


def test_a_plan_is_executed_then_verified_without_rehashing_the_build(tmp_path: Path) -> None:
    root = root_of(tmp_path)

    def applied(call: Call) -> Result:
        call.say("envlock-progress: building generation 1")
        return answer(call, {"done": ["build"], "current": GEN})

    script = Script(probe(empty_root(root)), ("apply", applied), probe(in_sync(root)))
    ctx = context(tmp_path, script)
    said: list[str] = []
    done = converge(ctx, progress=said.append)
    assert script.done() and said == ["building generation 1"]
    first, apply, verify = ctx.transport.calls  # type: ignore[attr-defined]
    assert first.request["verify"] is True and first.root == root  # the environment's python
    assert first.request["deep"] is False and apply.request["wait"] is True  # the defaults
    request = apply.request
    assert kinds(apply) == FIRST_PLAN
    assert request["assumed"] == {"current": None, "fingerprint": FINGERPRINT}
    assert request["handshake"] is False and request["lock_sha256"] == LOCK.sha256
    assert request["root"] == root and request["lock_text"]  # a build carries the lock
    assert apply.root == ""  # apply never runs the environment's own interpreter
    # The generation just built is not re-hashed: its manifest was written from its files.
    assert verify.request["verify"] is False
    assert (done.applied, done.current, done.replans, done.snapshotted) == (True, GEN, 0, False)


def test_the_agent_s_replan_makes_converge_probe_and_plan_again(tmp_path: Path) -> None:
    root = root_of(tmp_path)
    moved = in_sync(root, root_fingerprint="fp-2")
    moved["files"] = {"checked": 10, "missing": [{"path": "numpy/x.py", "dist": "numpy"}]}
    script = Script(
        probe(empty_root(root)),
        ("apply", replied({"replan": True})),
        probe(moved),
        ("apply", replied({"done": ["repair"]})),
        probe(in_sync(root)),
    )
    ctx = context(tmp_path, script)
    said: list[str] = []
    done = converge(ctx, progress=said.append)
    assert script.done()
    calls = ctx.transport.calls  # type: ignore[attr-defined]
    # The second plan is made from the second probe: a repair of generation 1, not a build.
    assert kinds(calls[1]) == FIRST_PLAN
    assert calls[3].request["assumed"] == {"current": GEN, "fingerprint": "fp-2"}
    (repair,) = calls[3].request["actions"]
    assert repair["kind"] == "repair" and repair["reinstall"] == ["numpy"]
    assert calls[4].request["verify"] is True  # nothing built: verified file by file
    assert done.replans == 1 and done.applied and done.current == GEN
    assert said == ["another envlock operation changed the root meanwhile: planning again"]


def test_a_root_that_keeps_changing_stops_after_five_plans(tmp_path: Path) -> None:
    root = root_of(tmp_path)
    rounds = [(probe(empty_root(root)), ("apply", replied({"replan": True})))] * (REPLANS + 1)
    script = Script(*[step for pair in rounds for step in pair])
    with pytest.raises(OperationError, match=r"kept changing .*\(5 plans overtaken\)") as info:
        converge(context(tmp_path, script))
    assert script.done() and REPLANS + 1 == 5
    assert info.value.hint == "wait for the other envlock operations on this root, then apply again"


def test_drift_left_after_apply_is_an_error(tmp_path: Path) -> None:
    root = root_of(tmp_path)
    script = Script(
        probe(empty_root(root)),
        ("apply", replied({"current": GEN})),
        probe(empty_root(root)),
    )
    with pytest.raises(OperationError, match="apply finished but the target still drifts"):
        converge(context(tmp_path, script))
    assert script.done()


def test_converge_ends_a_rollback_s_hold_and_checks_the_generation_it_returns_to(
    tmp_path: Path,
) -> None:
    root = root_of(tmp_path)
    # Generation 1 drifted while it was inactive: after the switch it is repaired.
    drifted = in_sync(root, packages={**LOCK.versions(), "numpy": "2.0.0"})
    script = Script(
        probe(held(root)),
        ("apply", replied({"current": GEN})),
        probe(drifted),
        ("apply", replied({"current": GEN})),
        probe(in_sync(root)),
    )
    ctx = context(tmp_path, script)
    done = converge(ctx, deep=True)
    assert script.done()
    calls = ctx.transport.calls  # type: ignore[attr-defined]
    # The generation switched to is checked as deeply as asked, and repaired waiting.
    assert calls[2].request["deep"] is True and calls[3].request["wait"] is True
    switch = calls[1].request["actions"]
    assert [a["kind"] for a in switch] == ["cache-dir", "switch"]
    assert switch[1]["name"] == GEN and switch[1]["why"] == "apply"
    assert "return to the profile's lock" in switch[1]["description"]
    assert calls[1].request["assumed"] == {"current": f"2-{OTHER}", "fingerprint": "fp-held"}
    (repair,) = calls[3].request["actions"]
    assert repair["kind"] == "repair" and repair["name"] == GEN
    assert calls[3].request["assumed"] == {"current": GEN, "fingerprint": FINGERPRINT}
    assert calls[4].request["deep"] is True  # nothing built: verified as deeply as asked
    assert done.current == GEN and done.applied


def test_a_switch_to_a_generation_that_holds_needs_no_repair(tmp_path: Path) -> None:
    root = root_of(tmp_path)
    script = Script(
        probe(held(root)),
        ("apply", replied({"current": GEN})),
        probe(in_sync(root)),
        probe(in_sync(root)),
    )
    done = converge(context(tmp_path, script))
    assert script.done() and done.current == GEN


def test_the_container_snapshot_is_taken_under_the_lock_before_the_first_change(
    tmp_path: Path,
) -> None:
    root = root_of(tmp_path)
    box = Provisioner()
    script = Script(
        probe(held(root)),
        ("apply", handshake({"current": GEN})),
        probe(in_sync(root)),
        probe(in_sync(root)),
    )
    ctx = context(tmp_path, script, box)
    done = converge(ctx)
    assert script.done()
    # Named after the generation active in the container and its lock, applying LOCK's.
    assert box.calls == [("check", None), ("snapshot", (f"2-{OTHER}", OTHER, HASH))]
    assert done.snapshotted and done.report == ("snapshot envlock-snap",)


def test_a_first_apply_s_snapshot_names_no_generation_and_may_be_none(tmp_path: Path) -> None:
    root = root_of(tmp_path)
    box = Provisioner(name=None)
    script = Script(
        probe(empty_root(root)), ("apply", handshake({"current": GEN})), probe(in_sync(root))
    )
    said: list[str] = []
    done = converge(context(tmp_path, script, box), progress=said.append)
    assert script.done()
    assert box.calls == [("check", None), ("snapshot", ("none", "", HASH))]
    assert box.progress == [said.append]  # the snapshot reports through converge's progress
    assert not done.snapshotted and done.report == ()  # the profile asked for none


def test_a_failed_snapshot_aborts_the_apply_before_any_change(tmp_path: Path) -> None:
    root = root_of(tmp_path)
    box = Provisioner(fail=OperationError("the API refused the snapshot"))
    script = Script(probe(held(root)), ("apply", handshake({"current": GEN})))
    with pytest.raises(OperationError, match="the API refused the snapshot"):
        converge(context(tmp_path, script, box))
    assert script.done()


def test_nothing_to_do_takes_no_snapshot(tmp_path: Path) -> None:
    box = Provisioner()
    script = Script(probe(in_sync(root_of(tmp_path))))
    done = converge(context(tmp_path, script, box))
    assert box.calls == [("check", None)] and not done.snapshotted and not done.applied


def test_a_stopped_container_is_snapshotted_then_provisioned_before_the_probe(
    tmp_path: Path,
) -> None:
    root = root_of(tmp_path)
    box = Provisioner(running=False, drifts=(Drift("container", "101", "running", "stopped"),))
    seen: list[tuple[list[str], bool]] = []
    script = Script(probe(in_sync(root)))
    said: list[str] = []
    done = converge(
        context(tmp_path, script, box),
        gate=lambda steps, plan: seen.append(([d.kind for d in steps], plan is None)),
        progress=said.append,
    )
    assert script.done()
    # The generation is unknown while the container is stopped; one snapshot per apply.
    assert box.calls == [("check", None), ("snapshot", (None, "", HASH)), ("provision", False)]
    assert box.progress == [said.append, said.append]  # both report through converge's
    assert seen == [(["container"], True)]
    assert done.snapshotted and done.report == ("snapshot envlock-snap", "container started")
    assert not done.applied


def test_container_changes_are_made_after_a_snapshot_then_verified(tmp_path: Path) -> None:
    root = root_of(tmp_path)
    change = Drift("container-config", "memory", "4096", "2048")
    box = Provisioner(drifts=(change,))
    # The container's change is decided under the root's lock (an agent call with no
    # actions), where the container is checked again: another apply may have made it.
    locked = ("apply", handshake({"current": GEN}))
    script = Script(probe(in_sync(root)), locked, probe(in_sync(root)))
    done = converge(context(tmp_path, script, box))
    assert script.done()
    assert box.calls == [
        ("check", None),
        ("check", None),
        ("snapshot", (GEN, HASH, HASH)),
        ("provision", False),
    ]
    assert done.applied and done.snapshotted and done.current == GEN


def test_a_pending_restart_is_reported_unless_restart_is_asked(tmp_path: Path) -> None:
    root = root_of(tmp_path)
    pending = Drift("container-restart", "cores", "8", "4", "restart to apply cores 8")
    box = Provisioner(drifts=(pending,))
    done = converge(context(tmp_path, Script(probe(in_sync(root))), box))
    assert done.report == ("restart to apply cores 8",) and not done.applied
    box = Provisioner(drifts=(pending,))
    script = Script(probe(in_sync(root)), probe(in_sync(root)))
    done = converge(context(tmp_path, script, box), restart=True)
    assert ("provision", True) in box.calls
    # Asked to restart: the change is made, not reported as waiting for the next start.
    assert done.report == ("snapshot envlock-snap", "container started")


def test_restart_without_a_container_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=RESTART_REFUSED):
        converge(context(tmp_path, Script()), restart=True)


def test_the_gate_sees_the_plan_before_any_change_and_may_stop_it(tmp_path: Path) -> None:
    script = Script(probe(empty_root(root_of(tmp_path))))

    def stop(steps: list[Drift], plan: Any) -> None:
        assert steps == [] and [a.kind for a in plan.actions] == FIRST_PLAN
        raise UsageError("preview only")

    with pytest.raises(UsageError, match="preview only"):
        converge(context(tmp_path, script), gate=stop)
    assert script.done()  # no apply was sent


def test_no_wait_and_deep_reach_the_agent(tmp_path: Path) -> None:
    root = root_of(tmp_path)
    script = Script(
        probe(empty_root(root)), ("apply", replied({"current": GEN})), probe(in_sync(root))
    )
    ctx = context(tmp_path, script)
    converge(ctx, no_wait=True, deep=True)
    first, apply, verify = ctx.transport.calls  # type: ignore[attr-defined]
    assert first.request["deep"] is True and apply.request["wait"] is False
    assert verify.request["deep"] is False  # a fresh build is not deep-checked again
    assert json.loads(json.dumps(apply.request))["actions"][0]["number"] == 1


def test_container_changes_after_a_pending_restart_line_keep_it_and_report_progress(
    tmp_path: Path,
) -> None:
    root = root_of(tmp_path)
    pending = Drift("container-restart", "cores", "8", "4", "restart to apply cores 8")
    change = Drift("container-config", "memory", "4096", "2048")
    box = Provisioner(drifts=(pending, change))
    locked = ("apply", handshake({"current": GEN}))
    script = Script(probe(in_sync(root)), locked, probe(in_sync(root)))
    said: list[str] = []
    done = converge(context(tmp_path, script, box), progress=said.append)
    assert done.report == ("restart to apply cores 8", "snapshot envlock-snap", "container started")
    assert box.progress == [said.append, said.append]


def test_a_replan_after_the_container_changed_still_verifies(tmp_path: Path) -> None:
    root = root_of(tmp_path)
    box = Provisioner(drifts=(Drift("container-config", "memory", "4096", "2048"),))
    moved = in_sync(root, packages={**LOCK.versions(), "numpy": "2.0.0"})
    script = Script(
        probe(moved),
        ("apply", replied({"replan": True})),
        probe(in_sync(root)),  # another apply repaired it meanwhile: nothing left to do
        ("apply", handshake({"current": GEN})),  # ... but the container: under the lock
        probe(in_sync(root)),  # ... changed, so verified all the same
    )
    done = converge(context(tmp_path, script, box))
    assert script.done() and done.applied and done.replans == 1 and done.current == GEN
    assert [c for c, _ in box.calls] == ["check", "check", "snapshot", "provision"]


def test_a_replan_that_finds_nothing_left_says_so(tmp_path: Path) -> None:
    root = root_of(tmp_path)
    moved = in_sync(root, packages={**LOCK.versions(), "numpy": "2.0.0"})
    script = Script(probe(moved), ("apply", replied({"replan": True})), probe(in_sync(root)))
    done = converge(context(tmp_path, script))
    assert script.done() and not done.applied and done.replans == 1


# -- apply --from-snapshot: the snapshot's lock, its platform, its scripts ----------------------
SCRIPTS = '[scripts]\nsource = "src"\ndest = "/w"\nfiles = ["*.py"]\n'


def snapshot_context(
    tmp_path: Path,
    script: Script,
    *,
    pinned: dict[str, str] | None = None,
    own_lock: bool = False,
    machine: str = "x86_64",
    platform: str | None = None,
) -> tuple[Context, str]:
    """The context `apply --from-snapshot` makes (the snapshot's lock, pinning `pinned`
    scripts, or the profile's own when `pinned` is None) and the snapshot's directory."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text("print('train')\n")
    (tmp_path / "src" / "data.py").write_text("print('data')\n")
    path = tmp_path / "unit.toml"
    path.write_text(torch_profile_text("unit", torch=None, extra=SCRIPTS))
    profile = load_profile(path)
    scripts = profile.script_hashes() if pinned is None else pinned
    meta = {**LOCK.meta, "scripts": scripts}
    if platform is not None:
        meta["python-platform"] = platform
    lock = dataclasses.replace(LOCK, meta=meta)
    ctx = Context(profile, lock, ScriptedTransport(script))
    if own_lock:
        profile.lock_path.write_text(LOCK.text)
    taken = parse_state(in_sync(root_of(tmp_path), machine=machine))
    folder = tmp_path / "checkpoint"
    folder.mkdir()
    write_snapshot(str(folder), build_snapshot(ctx, taken, environ={}, command=["train"]))
    return ctx, str(folder)


def deployed(root: str, hashes: dict[str, str]) -> dict[str, Any]:
    return in_sync(root, machine="x86_64", scripts={"dest": "/w", "hashes": hashes})


def test_a_snapshot_from_another_platform_is_refused_before_any_change(tmp_path: Path) -> None:
    script = Script(probe(empty_root(root_of(tmp_path)) | {"machine": "x86_64"}))
    ctx, folder = snapshot_context(tmp_path, script, machine="aarch64")
    with pytest.raises(UsageError) as info:
        converge(ctx, snapshot_dir=folder)
    assert info.value.message == (
        "cannot rebuild the snapshot's environment here: "
        "the snapshot was taken on aarch64; this target is x86_64"
    )
    assert info.value.hint == "apply it on a target of the same platform"
    assert script.done()  # probed, nothing applied


def test_every_reason_a_snapshot_cannot_be_rebuilt_is_said(tmp_path: Path) -> None:
    script = Script(probe(empty_root(root_of(tmp_path)) | {"machine": "x86_64"}))
    lock_platform = "aarch64-manylinux_2_28"
    ctx, folder = snapshot_context(tmp_path, script, machine="aarch64", platform=lock_platform)
    with pytest.raises(UsageError) as info:
        converge(ctx, snapshot_dir=folder)
    assert info.value.message == (
        "cannot rebuild the snapshot's environment here: "
        "the snapshot was taken on aarch64; this target is x86_64; "
        f"the snapshot's lock is for {lock_platform}; this target is x86_64"
    )


def test_a_snapshot_s_lock_is_held_unless_it_is_the_profile_s_own(tmp_path: Path) -> None:
    for own in (False, True):
        work = tmp_path / str(own)
        work.mkdir()
        root = root_of(work)
        hashes = {"data.py": "d", "train.py": "t"}
        script = Script(
            probe(empty_root(root) | {"machine": "x86_64"}),
            ("apply", replied({"current": GEN})),
            probe(deployed(root, hashes)),
        )
        ctx, folder = snapshot_context(work, script, own_lock=own)
        hashes.update(ctx.scripts)  # the scripts deployed are the pinned ones
        done = converge(ctx, snapshot_dir=folder)
        assert script.done() and done.applied and done.current == GEN
        apply = ctx.transport.calls[1]  # type: ignore[attr-defined]
        switch = next(a for a in apply.request["actions"] if a["kind"] == "switch")
        assert switch["why"] == ("apply" if own else "snapshot")
        assert ("(held, as a rollback is" in switch["description"]) is not own


def test_scripts_that_differ_from_the_snapshot_s_are_not_deployed_nor_verified(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = root_of(tmp_path)
    pinned = {"data.py": "d" * 64, "train.py": "t" * 64}
    script = Script(
        probe(empty_root(root) | {"machine": "x86_64"}),
        ("apply", replied({"current": GEN})),
        # One script deployed from another commit, one missing: the snapshot's are not here.
        probe(deployed(root, {"train.py": "e" * 64})),
    )
    ctx, folder = snapshot_context(tmp_path, script, pinned=pinned)
    done = converge(ctx, snapshot_dir=folder)
    assert script.done() and done.applied
    assert kinds(ctx.transport.calls[1]) == FIRST_PLAN  # type: ignore[attr-defined]
    assert [a.kind for a in done.plan.actions] == FIRST_PLAN
    assert (
        "the scripts here differ from the snapshot's pinned hashes: not deploying them "
        "(check out the commit the snapshot records)"
    ) in " ".join(capsys.readouterr().err.split())


def test_differing_scripts_go_unsaid_when_the_target_already_has_the_snapshot_s(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = root_of(tmp_path)
    pinned = {"data.py": "d" * 64, "train.py": "t" * 64}
    script = Script(
        probe(
            empty_root(root) | {"machine": "x86_64", "scripts": {"dest": "/w", "hashes": pinned}}
        ),
        ("apply", replied({"current": GEN})),
        probe(deployed(root, pinned)),
    )
    ctx, folder = snapshot_context(tmp_path, script, pinned=pinned)
    done = converge(ctx, snapshot_dir=folder)
    assert script.done() and [a.kind for a in done.plan.actions] == FIRST_PLAN
    assert "differ from the snapshot" not in capsys.readouterr().err  # nothing was left out


def test_the_snapshot_s_own_scripts_are_deployed_and_verified(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = root_of(tmp_path)
    script = Script(
        probe(empty_root(root) | {"machine": "x86_64"}),
        ("apply", replied({"current": GEN})),
        probe(deployed(root, {"train.py": "e" * 64})),  # not what was deployed: drift
    )
    ctx, folder = snapshot_context(tmp_path, script)
    with pytest.raises(OperationError, match="apply finished but the target still drifts"):
        converge(ctx, snapshot_dir=folder)
    apply = ctx.transport.calls[1]  # type: ignore[attr-defined]
    (scripts,) = [a for a in apply.request["actions"] if a["kind"] == "scripts"]
    assert sorted(scripts["files"]) == ["data.py", "train.py"] and scripts["dest"] == "/w"
    assert "differ from the snapshot" not in capsys.readouterr().err


# -- apply --adopt --------------------------------------------------------------------------------
def real_venv(root: str) -> dict[str, Any]:
    """A root with nothing applied and a real venv at the venv path."""
    return empty_root(root) | {"venv_link": {"kind": "directory", "venv": True}}


def test_adopt_keeps_a_real_venv_first_and_says_nothing_about_it(tmp_path: Path) -> None:
    root = root_of(tmp_path)
    script = Script(
        probe(real_venv(root)), ("apply", replied({"current": GEN})), probe(in_sync(root))
    )
    ctx = context(tmp_path, script)
    said: list[str] = []
    done = converge(ctx, adopt=True, progress=said.append)
    assert script.done() and done.applied and said == []
    assert kinds(ctx.transport.calls[1])[0] == "adopt"  # type: ignore[attr-defined]


def test_adopt_without_a_venv_there_is_a_plain_apply_and_says_so(tmp_path: Path) -> None:
    root = root_of(tmp_path)
    nothing = empty_root(root)
    del nothing["venv_link"]  # the probe said nothing about the path: nothing there
    script = Script(probe(nothing), ("apply", replied({"current": GEN})), probe(in_sync(root)))
    ctx = context(tmp_path, script)
    said: list[str] = []
    converge(ctx, adopt=True, progress=said.append)
    venv = ctx.profile.target.venv
    assert said == [f"{venv} does not exist: nothing to adopt, a plain apply"]
    assert kinds(ctx.transport.calls[1]) == FIRST_PLAN  # type: ignore[attr-defined]


def test_adopt_refuses_a_venv_path_envlock_already_manages(tmp_path: Path) -> None:
    script = Script(probe(empty_root(root_of(tmp_path)) | {"venv_link": {"kind": "symlink"}}))
    with pytest.raises(UsageError, match="is already managed by envlock"):
        converge(context(tmp_path, script), adopt=True)


def test_adopt_planned_again_only_while_the_venv_is_still_a_directory(tmp_path: Path) -> None:
    root = root_of(tmp_path)
    adopted_meanwhile = in_sync(root, root_fingerprint="fp-3")
    script = Script(
        probe(real_venv(root)),
        ("apply", replied({"replan": True})),
        probe(real_venv(root) | {"root_fingerprint": "fp-2"}),  # still a real venv
        ("apply", replied({"replan": True})),
        probe(adopted_meanwhile),  # another apply adopted it: a link now, nothing to do
    )
    ctx = context(tmp_path, script)
    said: list[str] = []
    done = converge(ctx, adopt=True, progress=said.append)
    assert script.done() and done.replans == 2 and not done.applied
    calls = ctx.transport.calls  # type: ignore[attr-defined]
    assert kinds(calls[1])[0] == "adopt" and kinds(calls[3])[0] == "adopt"
    assert "does not exist" not in " ".join(said)


# -- after a switch: the generation returned to is repaired, as asked ----------------------------
def test_the_repair_after_a_switch_reports_and_waits_as_asked(tmp_path: Path) -> None:
    root = root_of(tmp_path)
    drifted = in_sync(root, packages={**LOCK.versions(), "numpy": "2.0.0"})
    rebuilt = f"3-{HASH}"

    def repaired(call: Call) -> Result:
        call.say("envlock-progress: repairing generation 1")
        return answer(call, {"current": rebuilt})

    script = Script(
        probe(held(root)),
        ("apply", replied({"current": GEN})),
        probe(drifted),
        ("apply", repaired),
        probe(in_sync(root)),
    )
    ctx = context(tmp_path, script)
    said: list[str] = []
    done = converge(ctx, no_wait=True, progress=said.append)
    assert script.done() and said == ["repairing generation 1"]
    calls = ctx.transport.calls  # type: ignore[attr-defined]
    assert calls[3].request["wait"] is False
    assert done.current == rebuilt  # the repair's answer names the generation now active
    assert [a.kind for a in done.plan.actions] == ["cache-dir", "switch"]


def test_a_repair_that_names_no_generation_leaves_the_switched_one(tmp_path: Path) -> None:
    root = root_of(tmp_path)
    drifted = in_sync(root, packages={**LOCK.versions(), "numpy": "2.0.0"})
    script = Script(
        probe(held(root)),
        ("apply", replied({"current": GEN})),
        probe(drifted),
        ("apply", replied({})),
        probe(in_sync(root)),
    )
    done = converge(context(tmp_path, script))
    assert script.done() and done.current == GEN


# -- the agent's apply answer, read once (reconcile/execute.py) ------------------------------
def test_an_apply_answer_without_fields_says_nothing_was_asked_again() -> None:
    # The agent's "re-plan" answer carries no freed bytes or seconds; an empty plan asks
    # the agent nothing and reads as the same empty answer.
    assert ApplyAnswer.parse({}) == ApplyAnswer(None, False, 0, None) == NOTHING_DONE
    replan = ApplyAnswer.parse({"replan": True, "done": [], "current": GEN})
    assert (replan.replan, replan.current, replan.freed, replan.seconds) == (True, GEN, 0, None)


@pytest.mark.parametrize(
    ("raw", "current"),
    [(GEN, GEN), (None, None), ("", None), (0, None), (3, "3")],
)
def test_an_apply_answer_s_current_is_its_text_or_none(raw: Any, current: str | None) -> None:
    assert ApplyAnswer.parse({"current": raw}).current == current


@pytest.mark.parametrize(
    ("raw", "replan"), [(True, True), (1, True), (False, False), (None, False)]
)
def test_an_apply_answer_s_replan_is_its_truth(raw: Any, replan: bool) -> None:
    assert ApplyAnswer.parse({"replan": raw}).replan is replan


def test_an_apply_answer_s_freed_bytes_are_a_number_or_refused() -> None:
    assert ApplyAnswer.parse({"freed": 4096}).freed == 4096
    assert ApplyAnswer.parse({"freed": 2.0}).freed == 2
    for wrong in (None, "12", True, [1]):
        with pytest.raises(OperationError, match="freed is"):
            ApplyAnswer.parse({"freed": wrong})


@pytest.mark.parametrize(
    ("raw", "seconds"),
    [([0.25, 1], (0.25, 1.0)), ([], ()), (None, None), ("0.1", None), ([0.1, "x"], None)],
)
def test_an_apply_answer_s_seconds_are_numbers_or_not_said(raw: Any, seconds: Any) -> None:
    assert ApplyAnswer.parse({"seconds": raw}).seconds == seconds


def test_an_empty_plan_asks_the_agent_nothing(tmp_path: Path) -> None:
    ctx = context(tmp_path, Script())  # any command would raise Unscripted
    assert execute(ctx, Plan((), reason="in sync")) is NOTHING_DONE


def test_a_replan_answer_without_current_keeps_the_probed_generation(tmp_path: Path) -> None:
    root = root_of(tmp_path)
    moved = in_sync(root, files={"checked": 10, "missing": [{"path": "a.py", "dist": "numpy"}]})
    script = Script(
        probe(moved),
        ("apply", replied({"replan": True})),  # neither current nor done: re-planned
        probe(in_sync(root)),
    )
    done = converge(context(tmp_path, script))
    assert script.done() and (done.applied, done.current, done.replans) == (False, GEN, 1)


# -- the one --restart refusal -----------------------------------------------------------------
def test_restart_is_refused_without_a_container_for_one_target_and_a_fleet(
    tmp_path: Path,
) -> None:
    plain = context(tmp_path, Script())
    with pytest.raises(UsageError, match=RESTART_REFUSED):
        refuse_restart(plain, True)
    refuse_restart(plain, False)
    refuse_restart(context(tmp_path, Script(), Provisioner()), True)
    with pytest.raises(UsageError, match=RESTART_REFUSED):
        refuse_across_fleet(plain, adopt=False, snapshot_dir=None, restart=True)


def test_an_apply_that_waited_for_another_s_container_change_takes_no_snapshot(
    tmp_path: Path,
) -> None:
    """Two applies saw the same pending container change; the second waited for the root's
    lock while the first made it. Checked again under the lock, nothing is left: no snapshot,
    no change (taken outside the lock, each apply took its own snapshot)."""
    root = root_of(tmp_path)
    box = Provisioner(drifts=(Drift("container-config", "memory", "4096", "2048"),))
    script = Script(probe(in_sync(root)), ("apply", handshake({"current": GEN})))
    box_check = box.check

    def first_check_pending() -> ContainerCheck:
        found = box_check()
        box.drifts = ()  # by the next check, under the lock, the other apply made it
        return found

    box.check = first_check_pending  # type: ignore[method-assign]
    done = converge(context(tmp_path, script, box))
    assert script.done()
    assert [c for c, _ in box.calls] == ["check", "check"]
    assert not done.snapshotted and not done.applied
