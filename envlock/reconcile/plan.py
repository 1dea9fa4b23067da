"""Planning: a pure function of (expectation, state, drift) to ordered actions.

What each kind of drift asks of apply is declared in kinds.py; the plan reads the drift, and
the state only for what drift does not describe (the generations on the root).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from envlock.errors import OperationError, UsageError
from envlock.reconcile.drift import Expectation
from envlock.reconcile.kinds import Drift, Repair, of_repair
from envlock.reconcile.state import Generation, State
from envlock.uvbin import uv_version


@dataclass(frozen=True)
class Action:
    kind: str
    description: str
    args: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "description": self.description, **self.args}


@dataclass(frozen=True)
class Plan:
    actions: tuple[Action, ...]
    reason: str = ""

    @property
    def empty(self) -> bool:
        return not self.actions


def make_plan(expect: Expectation, state: State, drifts: list[Drift]) -> Plan:
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
    refuse_real_venv_dir(expect, state)
    actions: list[Action] = []
    if of_repair(drifts, Repair.INSTALL_UV):
        actions.append(install_uv(expect))
    stray = [g.name for g in state.generations if not g.complete and g.name != state.current]
    if stray:
        actions.append(
            Action(
                "cleanup",
                f"remove {len(stray)} incomplete generation(s): " + ", ".join(stray),
                {"names": stray},
            )
        )
    name, steps = generation_steps(expect, state, drifts)
    actions += steps
    if name != state.current:
        actions.append(
            Action(
                "cache-dir",
                "make sure the build's compile-cache dir exists (kept if it does)",
                {"generation": name},
            )
        )
        why = " (return to the profile's lock: a rollback holds the target)" if state.hold else ""
        actions.append(
            Action(
                "switch",
                f"switch current to generation {name}{why}",
                {"name": name, "why": "apply"},
            )
        )
    elif of_repair(drifts, Repair.CACHE_DIR):
        actions.append(
            Action("cache-dir", "create the compile-cache dir of the build", {"generation": name})
        )
    moving = name != state.current and state.scripts is None
    if of_repair(drifts, Repair.SCRIPTS) or (expect.scripts and moving):
        actions.append(
            Action(
                "scripts",
                f"deploy {len(expect.scripts)} pinned script(s)",
                {"files": sorted(expect.scripts)},
            )
        )
    if of_repair(drifts, Repair.LINK):
        actions.append(Action("link-venv", f"point {expect.venv} at {expect.root}/current"))
    reason = ""
    active = state.current_generation
    if not actions and active is not None:
        reason = f"generation {active.number} matches lock {expect.lock.short_hash}"
    return Plan(tuple(actions), reason)


def install_uv(expect: Expectation) -> Action:
    return Action(
        "install-uv",
        f"install uv {uv_version()} into {expect.root}/bin (pushed from here, hash-verified)",
        {"path": f"{expect.root}/bin/uv", "version": uv_version()},
    )


def generation_steps(
    expect: Expectation, state: State, drifts: list[Drift]
) -> tuple[str, list[Action]]:
    """The generation apply ends on, and what it takes to get there (build or repair)."""
    lock_hash = expect.lock.short_hash
    active = state.current_generation
    fresh = f"{state.next_number}-{lock_hash}"
    build = {"name": fresh, "number": state.next_number}
    if (
        active is not None
        and active.complete
        and active.lock_hash == lock_hash
        and state.in_generation
    ):
        if unrepairable(drifts):
            # A file no wheel installed (bin/activate, pyvenv.cfg) changed: sync cannot
            # restore it, so the lock is built again into a fresh generation.
            return fresh, [
                Action(
                    "build",
                    f"rebuild lock {lock_hash} as generation {fresh} "
                    "(files outside any package changed)",
                    build,
                )
            ]
        repair = repair_action(active, drifts)
        return active.name, [repair] if repair is not None else []
    existing = state.complete_with_hash(lock_hash)
    if existing is not None:
        return existing.name, []
    return fresh, [
        Action(
            "build",
            f"build generation {fresh} from lock {lock_hash} "
            f"({len(expect.lock.packages)} packages)",
            build,
        )
    ]


def unrepairable(drifts: list[Drift]) -> bool:
    """A file that no package installed was changed or deleted."""
    return any(not d.dist for d in drifts if d.kind in ("file-modified", "file-missing"))


def refuse_real_venv_dir(expect: Expectation, state: State) -> None:
    kind = state.venv_link.kind if state.venv_link else None
    if kind in ("directory", "file"):
        raise UsageError(
            f"{expect.venv} exists and is a real {kind}; envlock points this path at the "
            "active generation with a symlink and never deletes a user's files",
            hint=f"move it away (e.g. `mv {expect.venv} {expect.venv}.old`) or set [target] "
            "venv to another path",
        )


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


def plan_rollback(state: State, to: int | None) -> Plan:
    """Switch current back to the previous generation (or number `to`)."""
    complete = [g for g in state.generations if g.complete]
    if not complete:
        raise UsageError(
            "nothing applied yet: no generation to roll back to",
            hint="run `envlock apply` first",
        )
    if to is not None:
        chosen = next((g for g in complete if g.number == to), None)
        if chosen is None:
            raise UsageError(f"no complete generation {to}", hint="see `envlock generations`")
    else:
        chosen = previous_generation(state)
        if chosen is None:
            raise UsageError(
                "no previous generation to roll back to",
                hint="use `envlock rollback --resync` to restore the active "
                "generation from its lock",
            )
    if chosen.name == state.current:
        return Plan((), f"generation {chosen.number} is already active")
    return Plan(
        (
            Action(
                "switch",
                f"switch current to generation {chosen.name} (rollback)",
                {"name": chosen.name, "why": "rollback"},
            ),
        )
    )


def previous_generation(state: State) -> Generation | None:
    """The generation that was active before the current one, by the switch history."""
    complete = {g.name: g for g in state.generations if g.complete}
    for entry in reversed(state.history):
        if entry.to == state.current and entry.from_ in complete and entry.from_ != state.current:
            return complete[entry.from_]
    older = [
        g
        for g in complete.values()
        if g.name != state.current
        and (state.current_generation is None or g.number < state.current_generation.number)
    ]
    return max(older, key=lambda g: g.number) if older else None


def plan_gc(state: State, keep: int) -> Plan:
    """Remove all but the `keep` newest complete generations; never the active or the previous."""
    protected = {state.current}
    previous = previous_generation(state)
    if previous is not None:
        protected.add(previous.name)
    newest_first = sorted(state.generations, key=lambda g: g.number, reverse=True)
    kept = {g.name for g in [g for g in newest_first if g.complete][:keep]}
    doomed = [g.name for g in newest_first if g.name not in kept | protected]
    if not doomed:
        return Plan((), f"nothing to remove ({len(state.generations)} generation(s) kept)")
    return Plan(
        (
            Action(
                "cleanup",
                f"remove {len(doomed)} generation(s): {', '.join(doomed)}",
                {"names": doomed},
            ),
        )
    )
