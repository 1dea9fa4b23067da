"""Planning: a pure function of (expectation, state, drift) to ordered actions."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from envlock.drift import Drift, Expectation
from envlock.errors import UsageError
from envlock.state import Generation, State
from envlock.uvbin import uv_version

REPAIRABLE = {
    "torch-build",
    "cuda-libraries",
    "package-version",
    "package-missing",
    "package-extra",
    "file-modified",
    "file-missing",
    "file-added",
    "pth-injection",
}


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
    kinds = {d.kind for d in drifts}
    if "stale-lock" in kinds:
        raise UsageError(
            "the lock is stale: " + "; ".join(d.actual for d in drifts if d.kind == "stale-lock"),
            hint="run `envlock lock` first",
        )
    refuse_real_venv_dir(expect, state)
    actions: list[Action] = []
    if "uv" in kinds:
        actions.append(
            Action(
                "install-uv",
                f"install uv {uv_version()} into "
                f"{expect.root}/bin (pushed from here, hash-verified)",
                {"path": f"{expect.root}/bin/uv", "version": uv_version()},
            )
        )
    stray = [g.name for g in state.generations if not g.complete and g.name != state.current]
    if stray:
        actions.append(
            Action(
                "cleanup",
                f"remove {len(stray)} incomplete generation(s): " + ", ".join(stray),
                {"names": stray},
            )
        )
    lock_hash = expect.lock.short_hash
    active = state.current_generation
    target: Generation | str
    if (
        active is not None
        and active.complete
        and active.lock_hash == lock_hash
        and state.in_generation
    ):
        target = active
        if unrepairable(state):
            # A file no wheel installed (bin/activate, pyvenv.cfg) changed: sync cannot
            # restore it, so the lock is built again into a fresh generation.
            target = f"{state.next_number}-{lock_hash}"
            actions.append(
                Action(
                    "build",
                    f"rebuild lock {lock_hash} as generation {target} "
                    "(files outside any package changed)",
                    {"name": target, "number": state.next_number},
                )
            )
        else:
            repair = repair_action(active, state, drifts)
            if repair is not None:
                actions.append(repair)
    else:
        existing = state.complete_with_hash(lock_hash)
        if existing is not None:
            target = existing
        else:
            target = f"{state.next_number}-{lock_hash}"
            actions.append(
                Action(
                    "build",
                    f"build generation {target} from lock {lock_hash} "
                    f"({len(expect.lock.packages)} packages)",
                    {"name": target, "number": state.next_number},
                )
            )
    name = target if isinstance(target, str) else target.name
    if name != state.current:
        actions.append(
            Action("cache-dir", "create the compile-cache dir of the build", {"generation": name})
        )
        actions.append(
            Action("switch", f"switch current to generation {name}", {"name": name, "why": "apply"})
        )
    elif "cache-dir" in kinds:
        actions.append(
            Action("cache-dir", "create the compile-cache dir of the build", {"generation": name})
        )
    scripts = [d for d in drifts if d.kind in ("script-missing", "script-modified")]
    if scripts or (expect.scripts and name != state.current and state.scripts is None):
        actions.append(
            Action(
                "scripts",
                f"deploy {len(expect.scripts)} pinned script(s)",
                {"files": sorted(expect.scripts)},
            )
        )
    if "venv-link" in kinds:
        actions.append(Action("link-venv", f"point {expect.venv} at {expect.root}/current"))
    reason = ""
    if not actions and active is not None:
        reason = f"generation {active.number} matches lock {lock_hash}"
    return Plan(tuple(actions), reason)


def unrepairable(state: State) -> bool:
    files = state.files or {}
    return any(
        not item.get("dist") for item in files.get("modified", []) + files.get("missing", [])
    )


def refuse_real_venv_dir(expect: Expectation, state: State) -> None:
    kind = (state.venv_link or {}).get("kind")
    if kind in ("directory", "file"):
        raise UsageError(
            f"{expect.venv} exists and is a real {kind}; envlock points this path at the "
            "active generation with a symlink and never deletes a user's files",
            hint=f"move it away (e.g. `mv {expect.venv} {expect.venv}.old`) or set [target] "
            "venv to another path",
        )


def repair_action(active: Generation, state: State, drifts: list[Drift]) -> Action | None:
    """Re-sync the active generation to its lock: what changed is reinstalled, strays removed."""
    relevant = [d for d in drifts if d.kind in REPAIRABLE]
    if not relevant:
        return None
    files = state.files or {}
    reinstall = sorted(
        {
            item["dist"]
            for item in files.get("modified", []) + files.get("missing", [])
            if item.get("dist")
        }
    )
    clean_cache = sorted(
        {
            item["dist"]
            for item in files.get("modified", [])
            if item.get("dist") and item.get("links", 1) > 1
        }
    )
    remove = sorted(item["path"] for item in files.get("added", []) if not item.get("dist"))
    summary = ", ".join(sorted({d.kind for d in relevant}))
    return Action(
        "repair",
        f"re-sync generation {active.name} to its lock ({summary})",
        {"name": active.name, "reinstall": reinstall, "clean_cache": clean_cache, "remove": remove},
    )


def plan_rollback(state: State, to: int | None) -> Plan:
    """Switch current back to the previous generation (or number `to`)."""
    complete = [g for g in state.generations if g.complete]
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
                f"switch current back to generation {chosen.name}",
                {"name": chosen.name, "why": "rollback"},
            ),
        )
    )


def previous_generation(state: State) -> Generation | None:
    """The generation that was active before the current one, by the switch history."""
    complete = {g.name: g for g in state.generations if g.complete}
    for entry in reversed(state.raw.get("history", [])):
        if (
            entry.get("to") == state.current
            and entry.get("from") in complete
            and entry.get("from") != state.current
        ):
            return complete[entry["from"]]
    older = [
        g
        for g in complete.values()
        if g.name != state.current
        and (state.current_generation is None or g.number < state.current_generation.number)
    ]
    return max(older, key=lambda g: g.number) if older else None
