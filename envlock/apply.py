"""Applying: gather, plan, act through the agent, then gather again and verify."""

from __future__ import annotations

import base64
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envlock.agentcall import call_agent
from envlock.drift import Drift, Expectation, compute_drift
from envlock.errors import OperationError
from envlock.lock import Lock, load_fresh_lock, read_lock, stale_reasons
from envlock.plan import Plan
from envlock.profile import Profile, load_profile
from envlock.state import State, gather
from envlock.targets import target_uv, transport_for
from envlock.targets.base import CommandFailed, Transport
from envlock.uvbin import uv_path, uv_sha256


@dataclass(frozen=True)
class Context:
    """A profile with its lock and the transport to its target."""

    profile: Profile
    lock: Lock
    transport: Transport
    stale: tuple[str, ...] = ()

    @property
    def scripts(self) -> dict[str, str]:
        pinned = self.lock.meta.get("scripts", {})
        return dict(pinned) if isinstance(pinned, dict) else {}

    @property
    def python_version(self) -> str:
        """The lock's Python (a snapshot's lock may pin another than the profile)."""
        return str(self.lock.meta.get("python-version") or self.profile.python_version)

    def expectation(self) -> Expectation:
        return Expectation(
            lock=self.lock,
            root=self.profile.target.root,
            venv=self.profile.target.venv,
            python_version=self.python_version,
            scripts=self.scripts,
            stale=self.stale,
        )


def open_context(profile_path: str | os.PathLike[str], *, allow_stale: bool = False) -> Context:
    """Load profile and lock; a stale lock is refused unless the caller reports it as drift."""
    profile = load_profile(profile_path)
    if allow_stale:
        lock = read_lock(profile.lock_path)
        stale = tuple(stale_reasons(profile, lock))
    else:
        lock, stale = load_fresh_lock(profile), ()
    return Context(profile, lock, transport_for(profile), stale)


def gather_state(
    ctx: Context, *, deep: bool = False, verify: bool = True, warmth: bool = False
) -> State:
    """One probe of the target: `verify` checks the files, `warmth` counts the build's
    compile cache (files, bytes) instead of only asking whether it holds any."""
    return gather(
        ctx.transport, ctx.profile, sorted(ctx.scripts), deep=deep, verify=verify, warmth=warmth
    )


def check(ctx: Context, *, deep: bool = False, warmth: bool = False) -> tuple[State, list[Drift]]:
    state = gather_state(ctx, deep=deep, warmth=warmth)
    return state, compute_drift(ctx.expectation(), state)


def apply_request(ctx: Context, plan: Plan, *, wait: bool = True) -> dict[str, Any]:
    profile = ctx.profile
    actions = [action.to_json() for action in plan.actions]
    for action in actions:
        if action["kind"] == "scripts":
            action["dest"] = profile.scripts.dest if profile.scripts else ""
            action["files"] = script_payload(profile, ctx.scripts)
    return {
        "root": profile.target.root,
        "venv": profile.target.venv,
        "uv": target_uv(profile),
        "python_version": ctx.python_version,
        "cache_dir": profile.cache_dir,
        "lock_text": ctx.lock.text,
        "lock_sha256": ctx.lock.sha256,
        "package_count": len(ctx.lock.packages),
        "offline": profile.dependencies.offline,
        "find_links": list(profile.dependencies.find_links),
        "wait": wait,
        "actions": actions,
    }


def script_payload(profile: Profile, pinned: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Script contents to deploy; each must still match the hash the lock pinned."""
    assert profile.scripts is not None
    payload = {}
    for rel, sha in pinned.items():
        path = profile.scripts.source / rel
        data = path.read_bytes()
        payload[rel] = {
            "data": base64.b64encode(data).decode(),
            "sha256": sha,
            "mode": path.stat().st_mode & 0o777,
        }
    return payload


def execute(
    ctx: Context,
    plan: Plan,
    *,
    wait: bool = True,
    on_progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Carry out a plan on the target (under the root's lock) and return the agent's answer."""
    if plan.empty:
        return {"done": []}
    request = apply_request(ctx, plan, wait=wait)
    for action in request["actions"]:
        if action["kind"] == "install-uv":
            upload_uv(ctx.transport, action, on_progress)
    return call_agent(
        ctx.transport,
        ctx.profile.target.root,
        "apply",
        request,
        on_progress=on_progress,
    )


def verify_after(
    ctx: Context, plan: Plan | None = None, *, ignore: tuple[str, ...] = ()
) -> list[Drift]:
    """Re-gather after acting; whatever drift remains means apply did not converge.

    A generation built by this very plan is not re-hashed: its manifest was just written
    from the files on disk. Packages, scripts and links are checked all the same, and a
    generation switched to or repaired is verified file by file.
    """
    built = plan is not None and any(a.kind == "build" for a in plan.actions)
    state = gather_state(ctx, verify=not built)
    drifts = compute_drift(ctx.expectation(), state)
    remaining = [d for d in drifts if d.kind not in ("cache-dir", *ignore)]
    if remaining:
        listed = "; ".join(f"{d.kind} {d.subject}" for d in remaining[:6])
        raise OperationError(
            f"apply finished but the target still drifts: {listed}",
            hint="run `envlock check -v` to see everything",
        )
    return drifts


def upload_uv(
    transport: Transport, action: dict[str, Any], on_progress: Callable[[str], None] | None
) -> None:
    """Stream envlock's uv binary to a temp file beside its final place; the agent then
    checks its sha256 and moves it into place."""
    final = action["path"]
    action["tmp"] = f"{final}.upload"
    action["sha256"] = uv_sha256()
    if on_progress:
        on_progress(f"uploading uv {action['version']} to {final}")
    with open(uv_path(), "rb") as handle:
        data = handle.read()
    script = 'mkdir -p "$1" && cat > "$2"'
    result = transport.run(
        ["sh", "-c", script, "sh", os.path.dirname(final), action["tmp"]], stdin=data
    )
    if not result.ok:
        raise CommandFailed(f"{transport.name}: uploading uv", result)


def context_from_snapshot(profile_path: str | os.PathLike[str], snapshot_dir: str) -> Context:
    """A context whose lock is the one a snapshot recorded (to rebuild that environment)."""
    from envlock.snapshots import load_snapshot, snapshot_lock

    profile = load_profile(profile_path)
    data = load_snapshot(snapshot_dir)
    lock = snapshot_lock(data, Path(snapshot_dir))
    return Context(profile, lock, transport_for(profile))


def snapshot_compatibility(ctx: Context, data: dict[str, Any], state: State) -> list[str]:
    """Why a snapshot's environment cannot be built on this target (empty when it can)."""
    problems = []
    taken_on = (data.get("platform") or {}).get("machine")
    here = state.raw.get("machine")
    if taken_on and here and taken_on != here:
        problems.append(f"the snapshot was taken on {taken_on}; this target is {here}")
    platform = str(ctx.lock.meta.get("python-platform", ""))
    if here and platform and not platform.startswith((here, "linux")):
        problems.append(f"the snapshot's lock is for {platform}; this target is {here}")
    return problems
