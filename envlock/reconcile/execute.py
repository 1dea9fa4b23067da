"""Executing a plan: the request the agent carries out, uv pushed first where needed, and
the verification afterwards (re-gathered, never trusted from before)."""

from __future__ import annotations

import base64
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from envlock.base.drift_kinds import Drift, Repair
from envlock.base.untrusted import read_named
from envlock.base.uvbin import uv_path, uv_sha256
from envlock.errors import OperationError
from envlock.lock.indexes import uv_index_env
from envlock.profile.read import Profile
from envlock.reconcile.agentcall import call_agent
from envlock.reconcile.context import Context, Probe, gather_state
from envlock.reconcile.drift import compute_drift
from envlock.reconcile.plan import Plan
from envlock.reconcile.state import State
from envlock.targets.base import CommandFailed, Transport


def apply_request(
    ctx: Context, plan: Plan, *, wait: bool = True, carry: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The agent's request; `carry`: what a build writes into the generation besides the
    lock (the in-process API: runs/environment.py api_payload), sent only with a build."""
    profile = ctx.profile
    actions = [action.to_json() for action in plan.actions]
    building = any(action["kind"] == "build" for action in actions)
    for action in actions:
        if action["kind"] == "scripts":
            action["dest"] = profile.scripts.dest if profile.scripts else ""
            action["files"] = script_payload(profile, ctx.scripts)
    return {
        "root": profile.target.root,
        "venv": profile.target.venv,
        "profile": str(profile.path),
        "uv": ctx.uv,
        "python_version": ctx.python_version,
        "cache_dir": profile.cache_dir,
        # Only a build writes the lock into a generation; working it out may hash the local
        # copies of wheels (the install cache), which a switch or a rollback must not pay.
        "lock_text": build_lock_text(ctx) if building else "",
        **(carry or {} if building else {}),
        "lock_sha256": ctx.lock.sha256,
        "package_count": len(ctx.lock.packages),
        "offline": profile.dependencies.offline,
        "python_downloads": profile.python_download,
        "find_links": list(profile.dependencies.find_links),
        # A private index's credentials for uv's downloads: in uv's environment, carried in
        # this request (on the agent's stdin), never on a command line.
        "uv_env": uv_index_env(profile),
        # What the install may do beyond unpacking wheels: the lock's policy decides.
        **install_limits(ctx),
        "wait": wait,
        "actions": actions,
        # What the plan assumed; the agent compares it under the root's lock (None: a
        # rollback's or gc's plan, carried out whatever the root became).
        "assumed": None
        if plan.assumed is None
        else {"current": plan.assumed.current, "fingerprint": plan.assumed.fingerprint},
    }


def build_lock_text(ctx: Context) -> str:
    """The lock as a build installs it (resolution's module: loaded by builds alone, never
    by a switch or a rollback)."""
    from envlock.lock.resolve import install_text_for

    return install_text_for(ctx.lock, ctx.profile)


def install_limits(ctx: Context) -> dict[str, Any]:
    """`build`: the packages uv may build from source (none: `--no-build`, so that even a
    lock that slipped past validation builds nothing); `binary_only`: every other locked
    package; `pth_allowed`: the packages that may install a top-level .pth (None: any)."""
    lock = ctx.lock
    pth = lock.policy.pth
    return {
        "build": sorted(lock.build),
        "binary_only": sorted(set(lock.packages) - lock.build),
        "pth_allowed": None if pth is None else sorted(pth),
    }


def script_payload(profile: Profile, pinned: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Script contents to deploy; each must still match the hash the lock pinned."""
    assert profile.scripts is not None
    payload = {}
    for rel, sha in pinned.items():
        path = profile.scripts.source / rel
        data = read_named(path, "script")
        payload[rel] = {
            "data": base64.b64encode(data).decode(),
            "sha256": sha,
            "mode": path.stat().st_mode & 0o777,
        }
    return payload


@dataclass(frozen=True)
class ApplyAnswer:
    """The agent's answer to an apply, read once (`parse`): nothing past it reads the JSON."""

    current: str | None = None  # the generation active afterwards (None: none, or not said)
    replan: bool = False  # the root changed since the plan was made: nothing was done
    freed: int = 0  # the bytes removed (gc)
    seconds: tuple[float, ...] | None = None  # each action's, as the target measured it

    @classmethod
    def parse(cls, raw: dict[str, Any]) -> ApplyAnswer:
        """A field left out reads as nothing said; a wrong-typed `freed` is refused, a
        wrong-typed `seconds` is not said (the switch's time goes unreported)."""
        current = raw.get("current")
        return cls(
            current=str(current) if current else None,
            replan=bool(raw.get("replan")),
            freed=_freed(raw.get("freed", 0)),
            seconds=_seconds(raw.get("seconds")),
        )


# An empty plan asks the agent nothing.
NOTHING_DONE = ApplyAnswer()


def _freed(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise OperationError(f"the envlock agent's apply answer: freed is {value!r}, not a number")
    return int(value)


def _seconds(value: Any) -> tuple[float, ...] | None:
    if not isinstance(value, list):
        return None
    if any(isinstance(v, bool) or not isinstance(v, int | float) for v in value):
        return None
    return tuple(float(v) for v in value)


def execute(
    ctx: Context,
    plan: Plan,
    *,
    wait: bool = True,
    on_progress: Callable[[str], None] | None = None,
    when_locked: Callable[[], object] | None = None,
    carry: dict[str, Any] | None = None,
) -> ApplyAnswer:
    """Carry out a plan on the target (under the root's lock) and return the agent's answer:
    `replan` when the root is no longer what the plan assumed. `when_locked` runs under the
    lock, before the first change, once the plan is known to hold (with an empty plan too:
    the container's change is decided under the root's lock)."""
    if plan.empty and when_locked is None:
        return NOTHING_DONE
    request = apply_request(ctx, plan, wait=wait, carry=carry)
    request["handshake"] = when_locked is not None
    for action in request["actions"]:
        if action["kind"] == "install-uv":
            upload_uv(ctx.transport, action, on_progress)
    raw = call_agent(
        ctx.transport,
        ctx.profile.target.root,
        "apply",
        request,
        on_progress=on_progress,
        when_locked=when_locked,
    )
    return ApplyAnswer.parse(raw)


def verify_after(
    ctx: Context,
    plan: Plan | None = None,
    *,
    ignore: tuple[str, ...] = (),
    deep: bool = False,
    asked: Probe | None = None,
    seen: Callable[[State], None] | None = None,
) -> list[Drift]:
    """Re-gather after acting; whatever drift remains means apply did not converge.

    A generation built by this very plan is not re-hashed: its manifest was just written
    from the files on disk. Packages, scripts and links are checked all the same, and a
    generation switched to or repaired is verified file by file. Drift apply does not
    repair (the compile-cache dir, what only reports: the GPU's driver) does not count.
    """
    built = plan is not None and any(a.kind == "build" for a in plan.actions)
    state = gather_state(ctx, asked or Probe(deep=deep and not built, verify=not built))
    drifts = compute_drift(ctx.expectation(), state)
    remaining = [
        d
        for d in drifts
        if d.declared.repair not in (Repair.CACHE_DIR, Repair.REPORT) and d.kind not in ignore
    ]
    if remaining:
        listed = "; ".join(f"{d.kind} {d.subject}" for d in remaining[:6])
        raise OperationError(
            f"apply finished but the target still drifts: {listed}",
            hint="run `envlock check -v` to see everything",
        )
    if seen is not None:
        seen(state)
    return drifts


def upload_uv(
    transport: Transport, action: dict[str, Any], on_progress: Callable[[str], None] | None
) -> None:
    """Stream envlock's uv binary to a temp file beside its final place; the agent then
    checks its sha256 and moves it into place."""
    final = action["path"]
    # A name of this upload's own: two applies at once (two processes finding no uv) each
    # upload theirs, and each agent checks and moves its own into place.
    action["tmp"] = f"{final}.upload-{secrets.token_hex(6)}"
    action["sha256"] = uv_sha256()
    if on_progress:
        on_progress(f"uploading uv {action['version']} to {final}")
    # own: envlock's uv binary
    with open(uv_path(), "rb") as handle:
        data = handle.read()
    # A new file, never through a link (noclobber: `>` creates it exclusively); the agent
    # then hashes and moves it through one descriptor.
    script = 'mkdir -p "$1" && rm -f -- "$2" && set -C && cat > "$2"'
    result = transport.run(
        ["sh", "-c", script, "sh", os.path.dirname(final), action["tmp"]], stdin=data
    )
    if not result.ok:
        raise CommandFailed(f"{transport.name}: uploading uv", result)
