"""The context of a command: a profile, its lock, the transport to its target, and the
container's provisioner when the profile declares one. Gathering state starts here."""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from envlock.base import started
from envlock.base.drift_kinds import Drift
from envlock.base.uvbin import uv_path, uv_version
from envlock.errors import OperationError
from envlock.lock.read import (
    Lock,
    load_fresh_lock,
    lock_policy,
    parse_lock,
    read_lock,
    stale_reasons,
)
from envlock.profile.read import Profile, load_profile
from envlock.reconcile.agentcall import call_agent
from envlock.targets.base import ContainerCheck, Provisioner, Transport

if TYPE_CHECKING:
    # Imported where used: a local probe's request is written (commands/ahead.py) before
    # the rules that judge its answer load, so they load while the probe works.
    from envlock.reconcile.drift import Expectation
    from envlock.reconcile.state import State


@dataclass(frozen=True)
class Context:
    """A profile with its lock and the transport to its target."""

    profile: Profile
    lock: Lock
    transport: Transport
    stale: tuple[str, ...] = ()
    # Judging an adopted generation a rollback holds: by its manifest, as no lock built it.
    adopted: bool = False

    @property
    def scripts(self) -> dict[str, str]:
        pinned = self.lock.meta.get("scripts", {})
        return dict(pinned) if isinstance(pinned, dict) else {}

    @property
    def python_version(self) -> str:
        """The lock's Python (a snapshot's lock may pin another than the profile)."""
        return str(self.lock.meta.get("python-version") or self.profile.python_version)

    @functools.cached_property
    def provisioner(self) -> Provisioner | None:
        """The container around the environment, when the profile declares one."""
        target, container = self.profile.target, self.profile.container
        if container is None or target.kind.provisioner is None:
            return None
        return target.kind.provisioner(target.settings, container)

    @property
    def uv(self) -> str:
        """The uv binary on the target: ours locally, the one pushed under <root>/bin remotely."""
        target = self.profile.target
        return f"{target.root}/bin/uv" if target.remote else uv_path()

    def expectation(self) -> Expectation:
        from envlock.reconcile.drift import Expectation

        return Expectation(
            lock=self.lock,
            root=self.profile.target.root,
            venv=self.profile.target.venv,
            python_version=self.python_version,
            scripts=self.scripts,
            stale=self.stale,
            devices=self.devices,
            gpu_count=getattr(self.profile, "gpu_count", None),
            adopted=self.adopted,
        )

    @property
    def devices(self) -> tuple[str, ...]:
        """The device nodes the container declares, without PVE's options (`,mode=…`)."""
        container = self.profile.container
        return tuple(d.split(",", 1)[0] for d in container.devices) if container else ()


def open_context(profile_path: str | os.PathLike[str], *, allow_stale: bool = False) -> Context:
    """Load profile and lock; a stale lock is refused unless the caller reports it as drift."""
    ahead = started.kept("context", (os.fspath(profile_path), allow_stale))
    if ahead is not None:  # read moments ago, while the CLI loaded (commands/ahead.py)
        return cast(Context, ahead)
    profile = load_profile(profile_path)
    if allow_stale:
        lock = read_lock(profile.lock_path, lock_policy(profile))
        stale = tuple(stale_reasons(profile, lock))
    else:
        lock, stale = load_fresh_lock(profile), ()
    return Context(profile, lock, profile.target.transport(), stale)


def is_fleet(ctx: Context) -> bool:
    """Whether the profile names a fleet of containers (fleet.py runs its members); here,
    so that a single target's command never loads the fleet's code."""
    return getattr(ctx.profile.target.settings, "fleet", None) is not None


@dataclass(frozen=True)
class Probe:
    """What a probe is asked to gather beyond what every probe reports: `deep` re-hashes
    every file, `verify` checks the files, `warmth` counts the build's compile cache (files,
    bytes) instead of only asking whether it holds any, `lock` returns the active
    generation's own lock, `startup` asks whether run's startup set is in place there."""

    deep: bool = False
    verify: bool = True
    warmth: bool = False
    lock: bool = False
    startup: str | None = None


# What a probe gathers unless asked for more (files verified, nothing else).
PLAIN = Probe()


@dataclass(frozen=True)
class ProbeRequest:
    """The probe's request, built once from a context and what is asked; `to_json` is what
    the agent receives on its stdin."""

    root: str
    venv: str
    cache_dir: str
    scripts: tuple[str, tuple[str, ...]] | None  # (where they are deployed, their names)
    devices: tuple[str, ...]
    uv: tuple[str, str] | None  # (path, version) of the uv pushed to a remote target
    asked: Probe = PLAIN

    @classmethod
    def of(cls, ctx: Context, asked: Probe = PLAIN) -> ProbeRequest:
        profile = ctx.profile
        scripts = None
        if profile.scripts is not None:
            scripts = (profile.scripts.dest, tuple(sorted(ctx.scripts)))
        uv = (ctx.uv, uv_version()) if profile.target.remote else None
        return cls(
            profile.target.root,
            profile.target.venv,
            profile.cache_dir,
            scripts,
            ctx.devices,
            uv,
            asked,
        )

    def to_json(self) -> dict[str, Any]:
        asked, scripts, uv = self.asked, self.scripts, self.uv
        return {
            "root": self.root,
            "venv": self.venv,
            "cache_dir": self.cache_dir,
            "scripts": {"dest": scripts[0], "files": list(scripts[1])} if scripts else None,
            "deep": asked.deep,
            "verify": asked.verify,
            "warmth": asked.warmth,
            "devices": list(self.devices),
            "active_lock": asked.lock,
            "uv": {"path": uv[0], "version": uv[1]} if uv else None,
            **({"startup": asked.startup} if asked.startup else {}),
        }


def gather_state(
    ctx: Context, asked: Probe = PLAIN, *, meanwhile: Callable[[], object] | None = None
) -> State:
    """One round trip: the agent, run by the environment's own interpreter, reports what
    `asked` says; `meanwhile` runs while the target works."""
    raw = call_agent(
        ctx.transport,
        ctx.profile.target.root,
        "probe",
        ProbeRequest.of(ctx, asked).to_json(),
        env_python=True,
        meanwhile=meanwhile,
    )
    from envlock.reconcile.state import parse_state

    return parse_state(raw)


def check(
    ctx: Context,
    asked: Probe = PLAIN,
    *,
    hold: bool = True,
    meanwhile: Callable[[], object] | None = None,
) -> tuple[State, list[Drift]]:
    """Gather and compute drift (see `judge`)."""
    state = gather_state(ctx, asked, meanwhile=meanwhile)
    return state, judge(ctx, state, hold=hold)


def judge(ctx: Context, state: State, *, hold: bool = True) -> list[Drift]:
    """The drift of a gathered state. While a rollback holds the root, the active generation
    is judged against its own lock (`hold=False`: against the profile's, as apply plans)."""
    judged = held_context(ctx, state) if hold else None
    from envlock.reconcile.drift import compute_drift

    return compute_drift((judged or ctx).expectation(), state)


def own_context(ctx: Context, state: State) -> Context:
    """The context of the active generation with its own lock (as it was built); `ctx`
    itself when the probe did not return that lock."""
    lock = active_lock(ctx, state)
    if lock is None or lock.short_hash == ctx.lock.short_hash:
        return ctx
    return dataclasses.replace(ctx, lock=lock, stale=())


def held_context(ctx: Context, state: State) -> Context | None:
    """The context of the generation a rollback holds the root on, with that generation's
    own lock — None when nothing is held or the held lock is the profile's anyway."""
    if state.hold is None:
        return None
    gen = state.current_generation
    if gen is not None and gen.adopted_from:
        return dataclasses.replace(ctx, adopted=True, stale=())
    held = own_context(ctx, state)
    return held if held is not ctx else None


def active_lock(ctx: Context, state: State) -> Lock | None:
    """The active generation's own lock (as it was built), when the probe returned it."""
    if state.active_lock is None:
        return None
    where = Path(ctx.profile.target.root) / "current" / ".envlock" / "pylock.toml"
    return parse_lock(where, state.active_lock, lock_policy(ctx.profile))


def hold_notice(ctx: Context, state: State) -> str | None:
    """What to tell a user while a rollback holds the root (None when nothing is held)."""
    held = held_context(ctx, state)
    gen = state.current_generation
    if held is None or gen is None or state.hold is None:
        return None
    how = "held (apply --from-snapshot)" if state.hold.why == "snapshot" else "rolled back"
    if held.adopted:
        return (
            f"{how}: generation {gen.number} (adopted from {gen.adopted_from}, judged by its "
            f"manifest) is active; the profile's lock is {ctx.lock.short_hash} — "
            "`envlock apply` returns to it"
        )
    return (
        f"{how}: generation {gen.number} (lock {held.lock.short_hash}) is active; "
        f"the profile's lock is {ctx.lock.short_hash} — `envlock apply` returns to it"
    )


def check_all(
    ctx: Context, asked: Probe = PLAIN, *, meanwhile: Callable[[], object] | None = None
) -> tuple[ContainerCheck | None, State | None, list[Drift]]:
    """The container's drift (its provisioner asks the API) and the probe inside it, asked at
    once: each is a round trip and neither needs the other. The state is None when the
    container does not run (the probe's failure is then the expected one); the drift is the
    container's first, then the environment's."""
    provisioner = ctx.provisioner
    if provisioner is None:
        state, drifts = check(ctx, asked, meanwhile=meanwhile)
        return None, state, drifts
    found: list[ContainerCheck] = []

    def ask_api() -> None:
        found.append(provisioner.check())
        if meanwhile is not None:
            meanwhile()

    try:
        state, drifts = check(ctx, asked, meanwhile=ask_api)
    except OperationError:
        if found and not found[0].running:
            return found[0], None, list(found[0].drifts)
        raise
    container = found[0]
    if not container.running:
        return container, None, list(container.drifts)
    return container, state, [*container.drifts, *drifts]


def check_container(ctx: Context) -> ContainerCheck | None:
    """The container's drift, through its provisioner (None when there is no container)."""
    return ctx.provisioner.check() if ctx.provisioner is not None else None
