"""State: what a target actually has, as the agent's probe reports it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from envlock.agentcall import call_agent
from envlock.profile import Profile
from envlock.targets import is_remote, target_uv
from envlock.targets.base import Transport
from envlock.uvbin import uv_version


@dataclass(frozen=True)
class Generation:
    number: int
    name: str
    lock_hash: str
    complete: bool
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class State:
    """A parsed probe answer. `packages` and below are None when no generation is active."""

    raw: dict[str, Any]
    generations: tuple[Generation, ...]
    current: str | None
    in_generation: bool
    venv_link: dict[str, Any] | None
    python_version: str
    packages: dict[str, str] | None
    torch: dict[str, Any] | None
    files: dict[str, Any] | None
    cache: dict[str, Any] | None
    scripts: dict[str, Any] | None
    hardware: dict[str, Any]
    uv: dict[str, Any] | None = None

    @property
    def current_generation(self) -> Generation | None:
        return next((g for g in self.generations if g.name == self.current), None)

    def complete_with_hash(self, lock_hash: str) -> Generation | None:
        matches = [g for g in self.generations if g.complete and g.lock_hash == lock_hash]
        return matches[-1] if matches else None

    @property
    def next_number(self) -> int:
        return max((g.number for g in self.generations), default=0) + 1


def parse_state(raw: dict[str, Any]) -> State:
    gens = tuple(
        Generation(g["number"], g["name"], g["lock_hash"], g["complete"], g.get("meta") or {})
        for g in raw.get("generations", [])
    )
    return State(
        raw=raw,
        generations=gens,
        current=raw.get("current"),
        in_generation=bool(raw.get("in_generation")),
        venv_link=raw.get("venv_link"),
        python_version=raw.get("python", {}).get("version", ""),
        packages=raw.get("packages"),
        torch=raw.get("torch"),
        files=raw.get("files"),
        cache=raw.get("cache"),
        scripts=raw.get("scripts"),
        hardware=raw.get("hardware") or {},
        uv=raw.get("uv"),
    )


def probe_request(
    profile: Profile,
    script_files: list[str],
    *,
    deep: bool = False,
    verify: bool = True,
    warmth: bool = False,
) -> dict:
    scripts = None
    if profile.scripts is not None:
        scripts = {"dest": profile.scripts.dest, "files": script_files}
    return {
        "root": profile.target.root,
        "venv": profile.target.venv,
        "cache_dir": profile.cache_dir,
        "scripts": scripts,
        "deep": deep,
        "verify": verify,
        "warmth": warmth,
        "uv": {"path": target_uv(profile), "version": uv_version()} if is_remote(profile) else None,
    }


def gather(
    transport: Transport,
    profile: Profile,
    script_files: list[str],
    *,
    deep: bool = False,
    verify: bool = True,
    warmth: bool = False,
) -> State:
    """One round trip: the agent, run by the environment's own interpreter, reports state."""
    raw = call_agent(
        transport,
        profile.target.root,
        "probe",
        probe_request(profile, script_files, deep=deep, verify=verify, warmth=warmth),
        env_python=True,
    )
    return parse_state(raw)
