"""Planning: a pure function of (expectation, state, drift) to ordered actions.

What each kind of drift asks of apply is declared in kinds.py (its `Repair`); each repair
apply carries out has exactly one planner here (`PLANNERS`), and every action kind a plan
may hold is declared once (`ACTION_KINDS`, each one an agent handler). A plan also carries
what it assumed about the root, so that the agent can refuse it under the root's lock when
another operation changed the root meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from envlock.base.drift_kinds import Drift, Repair, of_repair
from envlock.base.uvbin import uv_version
from envlock.errors import OperationError, UsageError
from envlock.reconcile.drift import Expectation
from envlock.reconcile.state import Generation, State

# Every action a plan may hold: each is one handler in the agent's apply (agent/apply.py
# ACTIONS; a test ties the two).
ACTION_KINDS = frozenset(
    (
        "adopt",  # agent/adopt.py: a real venv kept as generation 0 (`apply --adopt`)
        "install-uv",
        "cleanup",
        "build",
        "repair",
        "cache-dir",
        "switch",
        "hold",
        "scripts",
        "link-venv",
    )
)


@dataclass(frozen=True)
class Action:
    kind: str
    description: str
    args: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in ACTION_KINDS:
            raise ValueError(f"undeclared action kind {self.kind!r}")

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "description": self.description, **self.args}


@dataclass(frozen=True)
class Assumed:
    """What a plan was made from: the agent carries it out only if the root still is so."""

    current: str | None
    fingerprint: str  # the probe's fingerprint of the root (agent/core.py root_fingerprint)


@dataclass(frozen=True)
class Plan:
    actions: tuple[Action, ...]
    reason: str = ""
    assumed: Assumed | None = None
    # Made while another operation held the root's lock (what it wrote there): the plan is
    # made again once this one holds it, whenever the root changed meanwhile.
    provisional: str = ""

    @property
    def empty(self) -> bool:
        return not self.actions


@dataclass(frozen=True)
class Goal:
    """The generation apply ends on, and the build that makes it (None: it exists)."""

    name: str
    build: Action | None = None


@dataclass(frozen=True)
class Situation:
    """What every planner reads: the expectation, the state, the drift, and the goal."""

    expect: Expectation
    state: State
    drifts: list[Drift]
    goal: Goal

    @property
    def moving(self) -> bool:
        return self.goal.name != self.state.current


Planner = Callable[[Situation], list[Action]]


def make_plan(
    expect: Expectation, state: State, drifts: list[Drift], *, adopt: bool = False
) -> Plan:
    """`adopt`: a real venv at the venv path is kept as generation 0 first (`apply --adopt`)."""
    stale = of_repair(drifts, Repair.LOCK)
    if stale:
        raise UsageError(
            "the lock is stale: " + "; ".join(d.actual for d in stale),
            hint="run `envlock lock` first",
        )
    owned = of_repair(drifts, Repair.OWNER)
    if owned:
        raise OperationError(
            "refusing to apply: " + "; ".join(d.actual for d in owned),
            hint=owned[0].declared.fix,
        )
    adopting = adoption(expect, state) if adopt else []
    if not adopting:
        refuse_real_venv_dir(expect, state)
    seen = Situation(expect, state, drifts, destination(expect, state, drifts))
    # Adoption comes first: the generation built next is switched to from the adopted one
    # (so a rollback returns to it), and the venv path is a link before `link-venv` runs.
    actions = adopting + cleanup_strays(state)
    for planner in PLANNERS.values():
        actions += planner(seen)
    actions += plan_hold(seen)
    if adopting:  # adoption links the venv path itself, before the build
        actions = [a for a in actions if a.kind != "link-venv"]
    reason = ""
    active = state.current_generation
    if not actions and active is not None:
        reason = f"generation {active.number} matches lock {expect.lock.short_hash}"
    return Plan(tuple(actions), reason, Assumed(state.current, state.root_fingerprint))


# -- where apply ends -----------------------------------------------------------------------
def destination(expect: Expectation, state: State, drifts: list[Drift]) -> Goal:
    """The active generation when it can be repaired in place; else a complete generation
    of the lock; else a fresh build. A generation whose interpreter does not start and one
    with files outside any package changed are rebuilt: no sync restores them."""
    lock_hash = expect.lock.short_hash
    active = state.current_generation
    fresh = f"{state.next_number}-{lock_hash}"
    build = {"name": fresh, "number": state.next_number}
    broken = any(d.kind == "interpreter" for d in drifts)
    if active is not None and active.complete and active.lock_hash == lock_hash:
        if broken:
            why = "its interpreter does not start"
        elif unrepairable(drifts):
            why = "files outside any package changed"
        else:
            return Goal(active.name)
        return Goal(
            fresh,
            Action("build", f"rebuild lock {lock_hash} as generation {fresh} ({why})", build),
        )
    existing = state.complete_with_hash(lock_hash)
    if existing is not None:
        return Goal(existing.name)
    return Goal(
        fresh,
        Action(
            "build",
            f"build generation {fresh} from lock {lock_hash} "
            f"({len(expect.lock.packages)} packages)",
            build,
        ),
    )


def unrepairable(drifts: list[Drift]) -> bool:
    """A file that no package installed was changed or deleted."""
    return any(not d.dist for d in drifts if d.kind in ("file-modified", "file-missing"))


# -- one planner per repair ----------------------------------------------------------------
def plan_install_uv(seen: Situation) -> list[Action]:
    return [install_uv(seen.expect)] if of_repair(seen.drifts, Repair.INSTALL_UV) else []


def install_uv(expect: Expectation) -> Action:
    return Action(
        "install-uv",
        f"install uv {uv_version()} into {expect.root}/bin (pushed from here, hash-verified)",
        {"path": f"{expect.root}/bin/uv", "version": uv_version()},
    )


def plan_switch(seen: Situation) -> list[Action]:
    """Build or switch to the goal (whatever drift moved it: the table's SWITCH kinds, or a
    rebuild that a re-sync cannot do)."""
    if not seen.moving:
        return []
    goal, state = seen.goal, seen.state
    held = seen.expect.held
    if held:
        why = " (held, as a rollback is: `envlock apply` returns to the profile's lock)"
    elif state.hold:
        why = " (return to the profile's lock: a rollback holds the target)"
    else:
        why = ""
    return [
        *([goal.build] if goal.build is not None else []),
        Action(
            "cache-dir",
            "make sure the build's compile-cache dir exists (kept if it does)",
            {"generation": goal.name},
        ),
        Action(
            "switch",
            f"switch current to generation {goal.name}{why}",
            {"name": goal.name, "why": "snapshot" if held else "apply"},
        ),
    ]


def plan_resync(seen: Situation) -> list[Action]:
    if seen.moving:
        return []  # the goal is built or switched to: nothing of the active one to re-sync
    active = seen.state.current_generation
    repair = repair_action(active, seen.drifts) if active is not None else None
    return [repair] if repair is not None else []


def plan_cache_dir(seen: Situation) -> list[Action]:
    if seen.moving or not of_repair(seen.drifts, Repair.CACHE_DIR):
        return []  # a switch makes sure of the goal's cache dir itself
    return [
        Action(
            "cache-dir", "create the compile-cache dir of the build", {"generation": seen.goal.name}
        )
    ]


def plan_scripts(seen: Situation) -> list[Action]:
    expect = seen.expect
    first_time = seen.moving and seen.state.scripts is None
    if not of_repair(seen.drifts, Repair.SCRIPTS) and not (expect.scripts and first_time):
        return []
    return [
        Action(
            "scripts",
            f"deploy {len(expect.scripts)} pinned script(s)",
            {"files": sorted(expect.scripts)},
        )
    ]


def plan_link(seen: Situation) -> list[Action]:
    if not of_repair(seen.drifts, Repair.LINK):
        return []
    expect = seen.expect
    return [Action("link-venv", f"point {expect.venv} at {expect.root}/current")]


def outside_the_plan(seen: Situation) -> list[Action]:
    """Repairs apply does not plan for the agent: LOCK is refused before planning, REPORT
    is only reported, PROVISION is the container step of converge (the provisioner)."""
    return []


PLANNERS: dict[Repair, Planner] = {
    Repair.INSTALL_UV: plan_install_uv,
    Repair.SWITCH: plan_switch,
    Repair.RESYNC: plan_resync,
    Repair.CACHE_DIR: plan_cache_dir,
    Repair.SCRIPTS: plan_scripts,
    Repair.LINK: plan_link,
    Repair.PROVISION: outside_the_plan,
    Repair.LOCK: outside_the_plan,
    Repair.REPORT: outside_the_plan,
    Repair.OWNER: outside_the_plan,  # refused before planning: not ours to repair
}


# -- what no drift kind names: strays and the hold -------------------------------------------
def cleanup_strays(state: State) -> list[Action]:
    """Remove half-built generations; not while another operation holds the root's lock:
    one of them may be the build it is making (the plan is made again once it ends)."""
    stray = [g.name for g in state.generations if not g.complete and g.name != state.current]
    if state.busy:  # another operation holds the root: its build is no stray
        return []
    stray += state.removing  # removals a crash interrupted (agent/apply.py: renamed away first)
    if not stray:
        return []
    return [
        Action(
            "cleanup",
            f"remove {len(stray)} incomplete generation(s): " + ", ".join(stray),
            {"names": stray},
        )
    ]


def plan_hold(seen: Situation) -> list[Action]:
    """A converge ends a rollback's hold (a switch does that itself), and holds a snapshot's
    generation it stays on: `run` then judges it by its own lock, as after a rollback."""
    if seen.moving or seen.state.current is None:
        return []
    name, held = seen.state.current, seen.expect.held
    if seen.state.hold is not None and not held:
        return [
            Action(
                "hold",
                f"end the rollback's hold: generation {name} is the profile's lock",
                {"name": name, "held": False},
            )
        ]
    if seen.state.hold is None and held:
        return [
            Action(
                "hold",
                f"hold generation {name} (the snapshot's lock, until `envlock apply`)",
                {"name": name, "held": True},
            )
        ]
    return []


def refuse_real_venv_dir(expect: Expectation, state: State) -> None:
    kind = state.venv_link.kind if state.venv_link else None
    if kind == "directory":
        raise UsageError(
            f"{expect.venv} exists and is a real directory; envlock points this path at the "
            "active generation with a symlink and never deletes a user's files",
            hint="`envlock apply --adopt PROFILE` keeps the venv there as generation 0 (moved "
            f"under {expect.root}/generations/ unchanged, so a rollback returns to it), or "
            f"move it away (e.g. `mv {expect.venv} {expect.venv}.old`), or set [target] venv "
            "to another path",
        )
    if kind == "file":
        raise UsageError(
            f"{expect.venv} exists and is a real file; envlock points this path at the "
            "active generation with a symlink and never deletes a user's files",
            hint=f"move it away (e.g. `mv {expect.venv} {expect.venv}.old`) or set [target] "
            "venv to another path",
        )


# The number an adopted venv takes: before every generation envlock builds.
ADOPTED_NUMBER = 0


def adoption(expect: Expectation, state: State) -> list[Action]:
    """`apply --adopt`: a real venv at the venv path becomes generation 0 (nothing inside it
    changed); a venv path that does not exist is a plain apply; a link is envlock's already."""
    link = state.venv_link
    kind = link.kind if link else "absent"
    if kind == "symlink":
        raise UsageError(
            f"{expect.venv} is already managed by envlock (a link to {link.target if link else '?'}"
            "): there is nothing to adopt",
            hint="apply without --adopt; `envlock generations PROFILE` lists its generations",
        )
    if kind != "directory":
        refuse_real_venv_dir(expect, state)
        return []
    if link is not None and not link.venv:
        raise UsageError(
            f"{expect.venv} is a directory but not a venv (no pyvenv.cfg): envlock adopts "
            "only a venv",
            hint=f"move it away (e.g. `mv {expect.venv} {expect.venv}.old`) or set [target] "
            "venv to another path",
        )
    if any(g.number == ADOPTED_NUMBER for g in state.generations):
        raise UsageError(
            f"the root {expect.root} already has a generation {ADOPTED_NUMBER}: "
            f"{expect.venv} cannot be adopted as it",
            hint=f"move {expect.venv} away, or set [target] root to a new directory",
        )
    return [
        Action(
            "adopt",
            f"adopt {expect.venv} as generation {ADOPTED_NUMBER}: moved unchanged under "
            f"{expect.root}/generations/ (nothing inside changed, nothing deleted); "
            f"{expect.venv} becomes a link to {expect.root}/current",
            {"number": ADOPTED_NUMBER},
        )
    ]


def repair_action(active: Generation, drifts: list[Drift]) -> Action | None:
    """Re-sync the active generation to its lock: what changed is reinstalled, strays removed."""
    relevant = of_repair(drifts, Repair.RESYNC)
    if not relevant:
        return None
    changed = [d for d in relevant if d.kind in ("file-modified", "file-missing") and d.dist]
    reinstall = sorted({d.dist for d in changed})
    clean_cache = sorted({d.dist for d in changed if d.kind == "file-modified" and d.links > 1})
    remove = sorted(
        d.subject for d in relevant if d.kind in ("file-added", "pth-injection") and not d.dist
    )
    summary = ", ".join(sorted({d.kind for d in relevant}))
    return Action(
        "repair",
        f"re-sync generation {active.name} to its lock ({summary})",
        {"name": active.name, "reinstall": reinstall, "clean_cache": clean_cache, "remove": remove},
    )
