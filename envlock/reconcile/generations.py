"""Plans over the generations on a root: a rollback's switch and gc's removals. Pure."""

from __future__ import annotations

from envlock.errors import UsageError
from envlock.reconcile.plan import Action, Plan
from envlock.reconcile.state import Generation, State


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
