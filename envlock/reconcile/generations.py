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


def plan_gc(
    state: State, keep: int, *, include_adopted: bool = False, named: tuple[str, ...] = ()
) -> Plan:
    """Remove all but the `keep` newest complete generations; never the active or the previous,
    and never one that no lock can rebuild (adopted, or its lock file gone) unless
    `include_adopted` or `named` (numbers or names) asks for it. The plan's reason says
    which such generations stay, and how to remove them."""
    doomed, spared = gc_choice(state, keep, include_adopted, chosen_names(state, named))
    kept_note = "\n".join(spared_note(g) for g in spared)
    if not doomed:
        nothing = f"nothing to remove ({len(state.generations)} generation(s) kept)"
        return Plan((), f"{nothing}\n{kept_note}" if kept_note else nothing)
    names = [g.name for g in doomed]
    lost = [g.name for g in doomed if g.irreplaceable]  # asked for by name or the flag
    listed = ", ".join(
        f"{g.name} ({g.irreplaceable})" if g.irreplaceable else g.name for g in doomed
    )
    return Plan(
        (
            Action(
                "cleanup",
                f"remove {len(doomed)} generation(s): {listed}",
                {"names": names, "irreplaceable": lost},
            ),
        ),
        kept_note,
    )


def gc_choice(
    state: State, keep: int, include_adopted: bool, named: set[str]
) -> tuple[list[Generation], list[Generation]]:
    """gc's generations to remove, newest first, and those it keeps only because no lock
    can rebuild them."""
    protected = {state.current}
    previous = previous_generation(state)
    if previous is not None:
        protected.add(previous.name)
    newest_first = sorted(state.generations, key=lambda g: g.number, reverse=True)
    kept = {g.name for g in [g for g in newest_first if g.complete][:keep]}
    candidates = [g for g in newest_first if g.name not in kept | protected]
    spared = [
        g for g in candidates if g.irreplaceable and not include_adopted and g.name not in named
    ]
    return [g for g in candidates if g not in spared], spared


def chosen_names(state: State, named: tuple[str, ...]) -> set[str]:
    """The generations `gc --include` names (a number or a full name), each one that exists."""
    chosen = set()
    for wanted in named:
        match = [g.name for g in state.generations if wanted in (g.name, str(g.number))]
        if not match:
            raise UsageError(
                f"gc --include {wanted}: no such generation", hint="see `envlock generations`"
            )
        chosen.update(match)
    return chosen


def spared_note(gen: Generation) -> str:
    """What gc says of a generation it keeps because no lock can rebuild it."""
    return (
        f"kept {gen.name}: {gen.irreplaceable}; to remove it anyway, pass "
        f"`--include {gen.number}` or `--include-adopted`"
    )
