"""Bisect's change set: what differs between a GOOD and a BAD run that envlock can
reproduce, as the units a probe applies on GOOD. Pure: the versions, environment variables,
cache warmth and uv's dependency edges come in, `Difference`s and a probe's `Recipe` go out.

One difference is one thing a probe moves whole:
- packages, each with the new dependencies it pulls in (and the old ones it drops), and a
  torch build with its CUDA libraries and triton as one change;
- an `[env]` variable (GOOD's value or BAD's, unset where a side has none);
- the compile cache's warmth (the build's cache directory as it is, or an empty one);
- a dataset or a config value the user mapped (`--data NAME=A,B`, `--config KEY`), given to
  the command as an environment variable.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from envlock.base.cuda import is_cuda_library

PACKAGES, ENV, CACHE, DATA, CONFIG = "packages", "env", "cache", "data", "config"
# Packages of one torch build: moved together, never torch without the libraries it needs.
TORCH_BUILD = ("torch", "triton", "pytorch-triton")


@dataclass(frozen=True)
class Move:
    """One package of a difference: its version on each side (None: absent there)."""

    name: str
    good: str | None
    bad: str | None

    def text(self) -> str:
        if self.good is None:
            return f"{self.name} {self.bad} (added)"
        if self.bad is None:
            return f"{self.name} {self.good} (removed)"
        return f"{self.name} {self.good} → {self.bad}"


@dataclass(frozen=True)
class Difference:
    """One change a probe applies on GOOD, whole."""

    key: str  # stable: "packages:slowpkg", "env:OMP_NUM_THREADS", "cache", "data:NAME"
    kind: str
    label: str
    moves: tuple[Move, ...] = ()  # packages
    variable: str = ""  # env, data, config: the variable the command sees
    good: str | None = None  # env, data, config: the value; cache: "warm" or "cold"
    bad: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "kind": self.kind,
            "label": self.label,
            "packages": [{"name": m.name, "good": m.good, "bad": m.bad} for m in self.moves],
            "variable": self.variable or None,
            "good": self.good,
            "bad": self.bad,
        }


def in_torch_build(name: str) -> bool:
    return name in TORCH_BUILD or is_cuda_library(name)


# -- packages ----------------------------------------------------------------------------
def package_differences(
    good: Mapping[str, str],
    bad: Mapping[str, str],
    needs_good: Mapping[str, Iterable[str]] | None = None,
    needs_bad: Mapping[str, Iterable[str]] | None = None,
) -> list[Difference]:
    """The package moves between two locks as units. `needs_X[name]`: the packages that
    require `name` on side X (uv's `# via`): a package added on BAD moves with the moved
    packages that pull it in, one removed moves with those that no longer need it."""
    moved = sorted(n for n in {*good, *bad} if good.get(n) != bad.get(n))
    units = Units(moved)
    build = [n for n in moved if in_torch_build(n)]
    for name in build[1:]:
        units.join(build[0], name)
    for name in moved:
        side = needs_bad if name not in good else needs_good if name not in bad else None
        for parent in (side or {}).get(name, ()):
            if parent in units.parent:
                units.join(parent, name)
    return [package_unit(names, good, bad) for names in units.groups()]


class Units:
    """Union-find over package names: each group moves as one difference."""

    def __init__(self, names: list[str]) -> None:
        self.parent = {n: n for n in names}

    def find(self, name: str) -> str:
        while self.parent[name] != name:
            name = self.parent[name]
        return name

    def join(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)

    def groups(self) -> list[list[str]]:
        found: dict[str, list[str]] = {}
        for name in self.parent:
            found.setdefault(self.find(name), []).append(name)
        return sorted(found.values(), key=lambda names: names[0])


def package_unit(names: list[str], good: Mapping[str, str], bad: Mapping[str, str]) -> Difference:
    """The difference that moves `names`, labelled by its head package (torch for a torch
    build; else the first that exists on both sides, or the first)."""
    moves = tuple(Move(n, good.get(n), bad.get(n)) for n in sorted(names))
    torch = next((m for m in moves if m.name == "torch"), None)
    both = [m for m in moves if m.good is not None and m.bad is not None]
    head = torch or (both[0] if both else moves[0])
    rest = [m for m in moves if m is not head]
    label = ("torch build " + head.text().removeprefix("torch ")) if torch else head.text()
    if torch and rest:
        label += f" (with {len(rest)} of its libraries)"
    elif rest:
        label += " with " + ", ".join(m.text() for m in rest)
    return Difference(f"{PACKAGES}:{head.name}", PACKAGES, label, moves)


def merged(differences: list[Difference], keys: Iterable[str]) -> list[Difference]:
    """`differences` with those of `keys` moved as one unit (in the first one's place)."""
    wanted = set(keys)
    chosen = [d for d in differences if d.key in wanted]
    if len(chosen) < 2:
        return differences
    good = {m.name: m.good for d in chosen for m in d.moves if m.good is not None}
    bad = {m.name: m.bad for d in chosen for m in d.moves if m.bad is not None}
    names = [m.name for d in chosen for m in d.moves]
    unit = package_unit(names, good, bad)
    out: list[Difference] = []
    for d in differences:
        if d.key not in wanted:
            out.append(d)
        elif d is chosen[0]:
            out.append(unit)
    return out


def neighbours(
    unit: Difference,
    differences: list[Difference],
    needs_good: Mapping[str, Iterable[str]],
    needs_bad: Mapping[str, Iterable[str]],
) -> list[str]:
    """The keys of the other package differences `unit` is tied to by a requirement on
    either side (it needs them, or they need it): what it moves with when it cannot move
    alone."""
    mine = {m.name for m in unit.moves}
    tied: set[str] = set()
    for needs in (needs_good, needs_bad):
        for name, parents in needs.items():
            parents = set(parents)
            if name in mine:
                tied |= parents
            elif parents & mine:
                tied.add(name)
    return [
        d.key
        for d in differences
        if d.kind == PACKAGES and d is not unit and tied & {m.name for m in d.moves}
    ]


# -- variables and the cache ---------------------------------------------------------------
def env_differences(good: Mapping[str, str], bad: Mapping[str, str]) -> list[Difference]:
    """Each environment variable whose value differs (unset on one side included)."""
    return [
        variable_difference(ENV, name, name, good.get(name), bad.get(name))
        for name in sorted({*good, *bad})
        if good.get(name) != bad.get(name)
    ]


def variable_difference(
    kind: str, name: str, variable: str, good: str | None, bad: str | None
) -> Difference:
    label = f"{name}: {unset_or(good)} → {unset_or(bad)}"
    if kind != ENV:
        label = f"{kind} {label}"
    return Difference(f"{kind}:{name}", kind, label, variable=variable, good=good, bad=bad)


def unset_or(value: str | None) -> str:
    return "(unset)" if value is None else value


def cache_difference(good_warm: bool | None, bad_warm: bool | None) -> list[Difference]:
    """The compile cache's warmth, when both sides recorded it and it differs."""
    if good_warm is None or bad_warm is None or good_warm == bad_warm:
        return []
    word = {True: "warm", False: "cold"}
    good, bad = word[good_warm], word[bad_warm]
    return [Difference(CACHE, CACHE, f"compile cache {good} → {bad}", good=good, bad=bad)]


def config_variable(key: str) -> str:
    """`--config KEY`'s variable: KEY upper-cased, each character outside [A-Z0-9_] an
    underscore (`model.lr` → MODEL_LR)."""
    return re.sub(r"[^A-Z0-9_]", "_", key.upper())


# -- a probe -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Recipe:
    """What a probe is: the packages taken from BAD (the rest GOOD's), the variables the
    command gets (None: unset), and whether the compile cache is an empty one."""

    bad_packages: frozenset[str]
    env: tuple[tuple[str, str | None], ...]
    cold_cache: bool


def recipe(differences: list[Difference], chosen: frozenset[int]) -> Recipe:
    """GOOD with the differences numbered in `chosen` applied."""
    packages: set[str] = set()
    env: dict[str, str | None] = {}
    cold = False
    for number, d in enumerate(differences):
        applied = number in chosen
        if d.kind == PACKAGES:
            packages |= {m.name for m in d.moves} if applied else set()
        elif d.kind == CACHE:
            cold = (d.bad if applied else d.good) == "cold"
        else:
            env[d.variable] = d.bad if applied else d.good
    return Recipe(frozenset(packages), tuple(sorted(env.items())), cold)


def pins(
    good: Mapping[str, str], bad: Mapping[str, str], from_bad: frozenset[str]
) -> dict[str, str]:
    """name → version of a probe's packages: GOOD's, with those of `from_bad` as BAD has
    them (absent there: removed)."""
    found = {n: v for n, v in good.items() if n not in from_bad}
    found.update({n: bad[n] for n in from_bad if n in bad})
    return dict(sorted(found.items()))
