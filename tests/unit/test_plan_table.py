"""Plans come from the table: every repair kinds.py declares has one planner, every action a
plan may hold has an agent handler, and for every kind with a repair, the plan made from a
state that shows it repairs it. Pure, hand-written states (tests/unit/test_core.py's), fast.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from envlock.agent import apply as agent_apply
from envlock.base.drift_kinds import KIND, KINDS, Repair
from envlock.reconcile.drift import compute_drift
from envlock.reconcile.plan import ACTION_KINDS, PLANNERS, Action, Plan, make_plan
from envlock.reconcile.state import (
    CacheState,
    FilesReport,
    Generation,
    Hold,
    ScriptsState,
    State,
    TorchBuild,
    UvState,
    VenvLink,
)
from tests.unit.test_core import CASES, GEN, HASH, LOCK, ROOT, expect, state

# Repairs the agent's plan does not carry out: refused before planning (LOCK), reported
# only (REPORT), or the container step of converge (PROVISION, the provisioner's).
NOT_PLANNED = {Repair.LOCK, Repair.REPORT, Repair.PROVISION, Repair.OWNER}


def test_every_repair_has_exactly_one_planner() -> None:
    assert set(PLANNERS) == set(Repair)
    planned = {kind.repair for kind in KINDS} - NOT_PLANNED
    # Each planned repair's planner is its own function.
    assert len({PLANNERS[r] for r in planned}) == len(planned)


def test_every_action_kind_is_an_agent_handler_and_nothing_else_is() -> None:
    assert set(agent_apply.ACTIONS) == ACTION_KINDS
    with pytest.raises(ValueError, match="undeclared action kind"):
        Action("rebuild-everything", "no agent knows this")


def after(observed: State, plan: Plan) -> State:
    """The state the agent leaves after carrying out `plan` (each action's effect)."""
    built = TorchBuild("2.11.0+cu128", "cu128", "12.8", cuda_requires=("cu12",))
    healthy: dict[str, Any] = dict(
        in_generation=True,
        packages=LOCK.versions(),
        torch=built,
        files=FilesReport(checked=100),
        python_version="3.11.7",
        cache=CacheState(f"{ROOT}/cache/torch-x", exists=True, files=1),
    )
    for action in plan.actions:
        args = action.args
        if action.kind == "install-uv":
            observed = dataclasses.replace(observed, uv=UvState(True, True, args["version"]))
        elif action.kind == "cleanup":
            kept = tuple(g for g in observed.generations if g.name not in args["names"])
            observed = dataclasses.replace(observed, generations=kept)
        elif action.kind == "build":
            number, lock_hash = args["number"], args["name"].split("-", 1)[1]
            gen = Generation(number, args["name"], lock_hash, True)
            observed = dataclasses.replace(observed, generations=(*observed.generations, gen))
        elif action.kind == "repair":
            observed = dataclasses.replace(observed, **healthy)
        elif action.kind == "switch":
            observed = dataclasses.replace(observed, current=args["name"], hold=None, **healthy)
        elif action.kind == "cache-dir":
            observed = dataclasses.replace(observed, cache=healthy["cache"])
        elif action.kind == "scripts":
            hashes = dict(expect().scripts)
            observed = dataclasses.replace(observed, scripts=ScriptsState("/workspace", hashes))
        elif action.kind == "link-venv":
            observed = dataclasses.replace(
                observed, venv_link=VenvLink("symlink", f"{ROOT}/current")
            )
        elif action.kind == "hold":
            held = Hold(args["name"], None, "now") if args["held"] else None
            observed = dataclasses.replace(observed, hold=held)
    return observed


REPAIRED = [c for c in CASES if KIND[c[0]].repair not in NOT_PLANNED]


@pytest.mark.parametrize(
    ("kind", "expect_changes", "state_changes"),
    [c[:3] for c in REPAIRED],
    ids=[f"{c[0]}-{i}" for i, c in enumerate(REPAIRED)],
)
def test_the_plan_for_each_kind_repairs_it(
    kind: str, expect_changes: dict[str, Any], state_changes: dict[str, Any]
) -> None:
    wanted = expect(**expect_changes)
    observed = state(**state_changes)
    drifts = compute_drift(wanted, observed)
    assert kind in [d.kind for d in drifts]
    plan = make_plan(wanted, observed, drifts)
    assert not plan.empty, f"{kind}: {plan.reason}"
    left = [d.kind for d in compute_drift(wanted, after(observed, plan))]
    assert kind not in left, (kind, [a.kind for a in plan.actions], left)


def test_every_kind_the_plan_repairs_has_a_state_that_shows_it() -> None:
    planned = {k.name for k in KINDS if k.repair not in NOT_PLANNED}
    assert planned == {c[0] for c in REPAIRED}


def test_a_broken_interpreter_is_rebuilt_not_reported_as_nothing_to_do() -> None:
    observed = state(in_generation=False, packages=None, torch=None, files=None, cache=None)
    plan = make_plan(expect(), observed, compute_drift(expect(), observed))
    assert [a.kind for a in plan.actions] == ["build", "cache-dir", "switch"]
    assert plan.actions[0].args["name"] == f"2-{HASH}"
    assert "interpreter does not start" in plan.actions[0].description


def test_a_plan_carries_the_root_it_was_made_from() -> None:
    observed = state(root_fingerprint="f" * 20)
    plan = make_plan(expect(), observed, [])
    assert plan.assumed is not None
    assert (plan.assumed.current, plan.assumed.fingerprint) == (GEN, "f" * 20)


# -- holds end with the converge -------------------------------------------------------------


def test_a_converge_that_stays_on_the_profiles_lock_ends_the_hold() -> None:
    observed = state(hold=Hold(GEN, "2-000000000000", "t"))
    plan = make_plan(expect(), observed, compute_drift(expect(), observed))
    assert [(a.kind, a.args) for a in plan.actions] == [("hold", {"name": GEN, "held": False})]
    assert (
        compute_drift(expect(), after(observed, plan)) == [] and after(observed, plan).hold is None
    )


def test_a_snapshots_lock_is_held_whether_built_switched_to_or_already_active() -> None:
    other = Generation(2, "2-000000000000", "000000000000", True)
    moving = state(generations=(Generation(1, GEN, HASH, True), other), current=other.name)
    wanted = expect(held=True)
    plan = make_plan(wanted, moving, compute_drift(wanted, moving))
    switch = next(a for a in plan.actions if a.kind == "switch")
    assert switch.args == {"name": GEN, "why": "snapshot"}
    staying = make_plan(wanted, state(), [])
    assert [(a.kind, a.args) for a in staying.actions] == [("hold", {"name": GEN, "held": True})]
    assert make_plan(wanted, state(hold=Hold(GEN, None, "t")), []).empty
