"""reconcile/context.py through the scripted transport: the probe's request, the container
and the probe asked at once, a rollback's hold judged by the held generation's own lock, and
opening a profile's context. Seconds.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from envlock.base import started
from envlock.base.drift_kinds import Drift
from envlock.base.uvbin import uv_path, uv_version
from envlock.errors import LockError, OperationError
from envlock.lock.read import parse_lock
from envlock.lock.resolve import envlock_table
from envlock.profile.read import load_profile
from envlock.reconcile.context import (
    PLAIN,
    Context,
    Probe,
    ProbeRequest,
    active_lock,
    check,
    check_all,
    gather_state,
    held_context,
    hold_notice,
    is_fleet,
    judge,
    open_context,
    own_context,
)
from envlock.reconcile.state import Hold
from tests.projects import torch_profile_text
from tests.scripted import Call, Script
from tests.unit.test_converge import OTHER, Provisioner, context, held, in_sync, probe, root_of
from tests.unit.test_core import GEN, HASH, LOCK, LOCK_TEXT, with_wheels

# The lock generation 2 was built from (another numpy): what a rollback holds the root on.
OTHER_LOCK_TEXT = with_wheels(LOCK_TEXT.replace('"2.1.0"', '"2.0.0"'))


def test_the_probe_request_says_what_to_gather(tmp_path: Path) -> None:
    ctx = context(tmp_path, Script())
    root = root_of(tmp_path)
    assert ProbeRequest.of(ctx).to_json() == {
        "root": root,
        "venv": str(tmp_path / "venv"),
        "cache_dir": ctx.profile.cache_dir,
        "scripts": None,
        "deep": False,
        "verify": True,
        "warmth": False,
        "devices": [],
        "active_lock": False,
        "uv": None,  # a local target runs envlock's own uv
    }
    asked = ProbeRequest.of(ctx, Probe(deep=True, verify=False, warmth=True, lock=True)).to_json()
    assert (asked["deep"], asked["verify"], asked["warmth"], asked["active_lock"]) == (
        True,
        False,
        True,
        True,
    )
    assert ctx.uv == uv_path() and ctx.python_version == "3.11" and ctx.scripts == {}


def test_a_remote_target_s_uv_and_a_container_s_devices(tmp_path: Path) -> None:
    ctx = context(tmp_path, Script())
    target = ctx.profile.target
    remote = dataclasses.replace(target, kind=dataclasses.replace(target.kind, remote=True))
    box = SimpleNamespace(devices=("/dev/nvidia0,mode=0666", "/dev/nvidiactl"))
    ctx = dataclasses.replace(
        ctx, profile=dataclasses.replace(ctx.profile, target=remote, container=box)
    )
    assert ctx.uv == f"{target.root}/bin/uv"
    assert ctx.devices == ("/dev/nvidia0", "/dev/nvidiactl")
    request = ProbeRequest.of(ctx).to_json()
    assert request["uv"] == {"path": f"{target.root}/bin/uv", "version": uv_version()}
    assert request["devices"] == ["/dev/nvidia0", "/dev/nvidiactl"]
    assert ctx.expectation().devices == ("/dev/nvidia0", "/dev/nvidiactl")


def test_a_hold_is_judged_by_the_held_generation_s_own_lock(tmp_path: Path) -> None:
    root = root_of(tmp_path)
    other = OTHER_LOCK_TEXT
    held_state = {
        **held(root),
        "active_lock": other,
        "packages": {**LOCK.versions(), "numpy": "2.0.0"},
    }
    # generation 2's name carries the other lock's hash, as a real root's would
    other_hash = parse_lock(Path("x.toml"), other).short_hash
    gen2 = f"2-{other_hash}"
    held_state.update(
        generations=[
            {"number": 1, "name": GEN, "lock_hash": HASH, "complete": True},
            {"number": 2, "name": gen2, "lock_hash": other_hash, "complete": True},
        ],
        current=gen2,
        hold={"generation": gen2, "from": GEN, "time": "T"},
    )
    ctx = context(tmp_path, Script(probe(held_state), probe(held_state)))
    state, drifts = check(ctx)  # judged by its own lock: in sync
    assert drifts == []
    assert judge(ctx, state) == []  # by default too
    judged = held_context(ctx, state)
    assert judged is not None and judged.lock.short_hash == other_hash and judged.stale == ()
    assert judged.lock.path == Path(root) / "current" / ".envlock" / "pylock.toml"
    notice = hold_notice(ctx, state)
    assert notice == (
        f"rolled back: generation 2 (lock {other_hash}) is active; the profile's lock is "
        f"{HASH} — `envlock apply` returns to it"
    )
    # hold=False: judged by the profile's lock, as apply plans.
    _, drifts = check(ctx, hold=False)
    assert [(d.kind, d.subject) for d in drifts] == [
        ("generation-lock", gen2),
        ("package-version", "numpy"),
    ]
    snapshot_hold = dataclasses.replace(state, hold=dataclasses.replace(state.hold, why="snapshot"))
    assert hold_notice(ctx, snapshot_hold).startswith("held (apply --from-snapshot)")  # type: ignore[union-attr]


def test_no_hold_or_the_profile_s_own_lock_needs_no_other_context(tmp_path: Path) -> None:
    root = root_of(tmp_path)
    ctx = context(tmp_path, Script(probe(in_sync(root))))
    state, _ = check(ctx)
    assert held_context(ctx, state) is None and hold_notice(ctx, state) is None
    assert active_lock(ctx, state) is None and own_context(ctx, state) is ctx
    same = dataclasses.replace(state, active_lock=LOCK.text)
    assert own_context(ctx, same) is ctx  # the same lock: no other context
    on_own = dataclasses.replace(same, hold=held_hold())
    assert held_context(ctx, on_own) is None and hold_notice(ctx, on_own) is None


def held_hold() -> Hold:
    return Hold(GEN, f"2-{OTHER}", "T")


def test_the_container_and_the_probe_are_asked_at_once(tmp_path: Path) -> None:
    root = root_of(tmp_path)
    change = Drift("container-config", "memory", "4096", "2048")
    box = Provisioner(drifts=(change,))
    loaded: list[str] = []
    ctx = context(tmp_path, Script(probe(in_sync(root, packages={}))), box)
    container, state, drifts = check_all(ctx, meanwhile=lambda: loaded.append("ui"))
    assert container is not None and container.running and state is not None
    assert drifts[0] == change and len(drifts) > 1  # the container's first
    assert loaded == ["ui"] and box.calls == [("check", None)]


def test_a_stopped_container_answers_for_the_probe_that_failed(tmp_path: Path) -> None:
    stopped = Drift("container", "101", "running", "stopped")

    def refused(call: Call) -> Any:
        raise OperationError("container 101 is not running")

    box = Provisioner(running=False, drifts=(stopped,))
    ctx = context(tmp_path, Script(("probe", refused)), box)
    assert check_all(ctx) == (box.check(), None, [stopped])
    # Stopped, yet the probe answered (a container stopped meanwhile): the container's word.
    box = Provisioner(running=False, drifts=(stopped,))
    ctx = context(tmp_path, Script(probe(in_sync(root_of(tmp_path)))), box)
    container, state, drifts = check_all(ctx)
    assert container is not None and not container.running
    assert state is None and drifts == [stopped]
    # Running, and the probe failed: that failure is the answer.
    ctx = context(tmp_path, Script(("probe", refused)), Provisioner())
    with pytest.raises(OperationError, match="not running"):
        check_all(ctx)


def test_without_a_container_check_all_is_check(tmp_path: Path) -> None:
    ctx = context(tmp_path, Script(probe(in_sync(root_of(tmp_path)))))
    assert check_all(ctx)[0] is None


def test_opening_a_context_refuses_a_stale_lock_unless_reported(tmp_path: Path) -> None:
    path = tmp_path / "unit.toml"
    path.write_text(torch_profile_text("unit", torch=None))
    profile = load_profile(path)
    body = with_wheels(LOCK_TEXT).split("[tool.envlock]")[0]
    profile.lock_path.write_text(body + envlock_table(profile))
    ctx = open_context(path)
    assert ctx.stale == () and ctx.lock.meta["profile"] == "unit"
    assert ctx.transport.name == "local" and ctx.provisioner is None
    path.write_text(path.read_text().replace('version = "3.11"', 'version = "3.12"'))
    with pytest.raises(LockError, match="stale lock"):
        open_context(path)
    reported = open_context(path, allow_stale=True)
    assert reported.stale == ("unit.toml: [python] version changed since the lock was written",)
    assert reported.expectation().stale == reported.stale


@pytest.mark.parametrize("box", [None, Provisioner()], ids=["plain", "container"])
def test_what_is_asked_reaches_the_probe_and_the_defaults_ask_little(
    tmp_path: Path, box: Provisioner | None
) -> None:
    root = root_of(tmp_path)
    script = Script(*[probe(in_sync(root))] * 4)
    ctx = context(tmp_path, script, box)
    check_all(ctx)
    check_all(ctx, Probe(deep=True, warmth=True, lock=True))
    check(ctx)
    gather_state(ctx)
    asked = [c.request for c in ctx.transport.calls]  # type: ignore[attr-defined]
    flags = [(r["deep"], r["warmth"], r["active_lock"], r["verify"]) for r in asked]
    assert flags == [
        (False, False, False, True),
        (True, True, True, True),
        (False, False, False, True),
        (False, False, False, True),
    ]


def test_the_expectation_and_request_carry_the_profile_s_venv_gpus_and_scripts(
    tmp_path: Path,
) -> None:
    ctx = context(tmp_path, Script())
    lock = dataclasses.replace(LOCK, meta={**LOCK.meta, "scripts": {"b.py": "1", "a.py": "2"}})
    profile = dataclasses.replace(ctx.profile, gpu_count=2, scripts=SimpleNamespace(dest="/w"))
    ctx = dataclasses.replace(ctx, profile=profile, lock=lock)
    expect = ctx.expectation()
    assert (expect.venv, expect.gpu_count, expect.root) == (
        str(tmp_path / "venv"),
        2,
        root_of(tmp_path),
    )
    assert expect.scripts == {"b.py": "1", "a.py": "2"}
    assert ProbeRequest.of(ctx).to_json()["scripts"] == {"dest": "/w", "files": ["a.py", "b.py"]}


def test_startup_and_meanwhile_reach_the_probe_through_every_path(tmp_path: Path) -> None:
    root = root_of(tmp_path)
    for box in (None, Provisioner()):
        ctx = context(tmp_path, Script(*[probe(in_sync(root))] * 4), box)
        ran: list[str] = []
        check_all(ctx, Probe(startup="s1"), meanwhile=functools.partial(ran.append, "ui"))
        check(ctx, Probe(startup="s2"))
        gather_state(ctx, Probe(startup="s3"))
        check_all(ctx)
        asked = [c.request for c in ctx.transport.calls]  # type: ignore[attr-defined]
        assert [r.get("startup", "-") for r in asked] == ["s1", "s2", "s3", "-"]
        assert ran == ["ui"]


def test_an_adopted_generation_held_is_judged_by_its_manifest(tmp_path: Path) -> None:
    root = root_of(tmp_path)
    raw = held(root)
    raw["generations"][1]["meta"] = {"adopted_from": "/opt/old-venv"}
    ctx = context(tmp_path, Script(probe(raw)))
    ctx = dataclasses.replace(ctx, stale=("unit.toml: changed",))
    state, _ = check(ctx)
    judged = held_context(ctx, state)
    assert judged is not None and judged.adopted is True and judged.stale == ()
    assert judged.lock is ctx.lock and judged.expectation().adopted is True
    assert ctx.expectation().adopted is False
    assert hold_notice(ctx, state) == (
        "rolled back: generation 2 (adopted from /opt/old-venv, judged by its manifest) is "
        f"active; the profile's lock is {HASH} — `envlock apply` returns to it"
    )


def test_another_lock_s_context_is_not_stale(tmp_path: Path) -> None:
    ctx = context(tmp_path, Script(probe(in_sync(root_of(tmp_path)))))
    ctx = dataclasses.replace(ctx, stale=("unit.toml: changed",))
    state, _ = check(ctx)
    other = own_context(ctx, dataclasses.replace(state, active_lock=OTHER_LOCK_TEXT))
    assert other is not ctx and other.stale == () and other.lock.short_hash != HASH


def test_a_fleet_is_told_by_its_target_s_settings(tmp_path: Path) -> None:
    ctx = context(tmp_path, Script())
    assert not is_fleet(ctx)
    target = dataclasses.replace(ctx.profile.target, settings=SimpleNamespace(fleet=["a"]))
    fleet = dataclasses.replace(ctx, profile=dataclasses.replace(ctx.profile, target=target))
    assert is_fleet(fleet)
    target = dataclasses.replace(target, settings=SimpleNamespace(fleet=None))
    assert not is_fleet(
        dataclasses.replace(fleet, profile=dataclasses.replace(ctx.profile, target=target))
    )


def test_a_context_read_ahead_is_taken_once(tmp_path: Path) -> None:
    ctx = context(tmp_path, Script())
    path = tmp_path / "nowhere.toml"  # never read: the context read ahead answers
    started.keep("context", (str(path), True), ctx)
    assert open_context(path, allow_stale=True) is ctx
    assert isinstance(ctx, Context)
    with pytest.raises(Exception, match="nowhere"):  # taken once: now the file is read
        open_context(path, allow_stale=True)


def test_a_probe_request_is_one_value_sent_as_built(tmp_path: Path) -> None:
    """What is asked travels as one value: the request gather_state sends is the one
    ProbeRequest.of builds (what commands/ahead.py starts a probe with ahead, to the byte)."""
    root = root_of(tmp_path)
    ctx = context(tmp_path, Script(probe(in_sync(root))))
    asked = Probe(deep=True, warmth=True, startup="s")
    request = ProbeRequest.of(ctx, asked)
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.asked = PLAIN  # type: ignore[misc]
    gather_state(ctx, asked)
    (sent,) = ctx.transport.calls  # type: ignore[attr-defined]
    assert json.dumps(sent.request) == json.dumps(request.to_json())
    assert (request.root, request.scripts, request.uv, request.devices) == (root, None, None, ())


def test_a_plain_probe_verifies_files_and_asks_nothing_more() -> None:
    assert PLAIN == Probe() == Probe(deep=False, verify=True, warmth=False, lock=False)
    assert PLAIN.startup is None


def test_startup_is_on_the_wire_only_when_asked(tmp_path: Path) -> None:
    ctx = context(tmp_path, Script())
    assert "startup" not in ProbeRequest.of(ctx).to_json()
    assert "startup" not in ProbeRequest.of(ctx, Probe(startup="")).to_json()
    assert ProbeRequest.of(ctx, Probe(startup="/r/s")).to_json()["startup"] == "/r/s"
