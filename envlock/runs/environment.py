"""The environment a command sees under `envlock run`: state and profile in, env out."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from envlock import __version__
from envlock.profile.read import Profile
from envlock.profile.sources import requests
from envlock.reconcile.context import Context, own_context
from envlock.reconcile.state import State
from envlock.runs.startup_set import package_dir, python_path, remote_dir, ship, startup_files

# Variables that would make the generation's interpreter look elsewhere.
SCRUBBED = ("PYTHONHOME", "PYTHONPATH", "CONDA_PREFIX", "__PYVENV_LAUNCHER__")


def generation_dir(profile: Profile, state: State) -> str:
    assert state.current is not None
    return os.path.join(profile.target.root, "generations", state.current)


def run_environment(
    profile: Profile,
    state: State,
    base: Mapping[str, str],
    *,
    scripts: Sequence[str] = (),
    target: str = "",
) -> dict[str, str]:
    """What the command gets: the generation first on PATH, its caches, the profile's [env],
    the startup set on PYTHONPATH, and what `envlock.snapshot()` in it needs to know."""
    env = {k: v for k, v in base.items() if k not in SCRUBBED}
    gen = generation_dir(profile, state)
    # A cache dir another user owns or may write is never exported: torch loads code from it.
    if state.cache is not None and state.trust.cache_dir is None:
        env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(state.cache.dir, "inductor")
        env["TRITON_CACHE_DIR"] = os.path.join(state.cache.dir, "triton")
    env.update(profile.env)
    # What makes `python` the generation's: set after [env], which may only add to it (the
    # profile validator refuses VIRTUAL_ENV and PYTHONHOME there).
    env["VIRTUAL_ENV"] = gen
    env["PATH"] = command_path(os.path.join(gen, "bin"), profile.env.get("PATH"), base)
    # envlock_megacache, the sitecustomize that loads compile artifacts and (unless the lock
    # installs a real one) the `envlock` of envlock.snapshot(): stdlib-only modules.
    where = remote_dir(profile.target.root) if profile.target.remote else package_dir()
    own = python_path(where, api="envlock" not in (state.packages or {}))
    env["PYTHONPATH"] = joined(own, profile.env.get("PYTHONPATH"))
    env["ENVLOCK_PROFILE"] = str(profile.path)
    env["ENVLOCK_GENERATION"] = state.current or ""
    env["ENVLOCK_ROOT"] = profile.target.root
    env["ENVLOCK_RUN_CONTEXT"] = json.dumps(run_context(profile, scripts, target), sort_keys=True)
    return env


def command_path(generation_bin: str, declared: str | None, base: Mapping[str, str]) -> str:
    """PATH for the command: the generation's bin first, whatever [env] says, so `python3`
    is the locked interpreter; an [env] PATH (often a CUDA bin) replaces the caller's after it.
    The remote launcher applies the same rule to the target's own PATH."""
    tail = declared if declared is not None else base.get("PATH", os.defpath)
    return joined(generation_bin, tail)


def joined(first: str, after: str | None) -> str:
    """`first`, then `after` when it says anything: envlock's entries are never replaced."""
    return os.pathsep.join([first, after]) if after else first


def run_context(profile: Profile, scripts: Sequence[str], target: str) -> dict[str, Any]:
    """What envlock.snapshot() inside the command cannot find out there: the profile (whose
    file may be on another machine), the cache dir, the pinned scripts, the [env] names,
    the [data] paths."""
    return {
        "envlock": __version__,
        "profile": {"name": profile.name, "path": str(profile.path), "sha256": profile.sha256},
        "cache_dir": profile.cache_dir,
        "scripts": None
        if profile.scripts is None
        else {
            "dest": profile.scripts.dest,
            "files": sorted(scripts),
            "source": str(profile.scripts.source),
        },
        "env": sorted(profile.env),
        "target": target,
        "data": requests(profile.data),  # fingerprinted once per process, in each snapshot
    }


def api_payload(ctx: Context) -> dict[str, Any]:
    """What a build carries into its generation (agent/apply.py write_api): the startup
    set's `envlock` API and envlock_megacache as text by path in the package (never
    sitecustomize: outside `envlock run` nothing loads at start-up) and the run context
    `envlock run` would give, as of this build. Nothing when the lock installs envlock."""
    if "envlock" in ctx.lock.packages:
        return {}
    files = {
        rel: data.decode()
        for rel, data in startup_files().items()
        if rel != "startup/sitecustomize.py"
    }
    context = run_context(ctx.profile, sorted(ctx.scripts), ctx.transport.name)
    files["context.json"] = json.dumps(context, sort_keys=True)
    return {"api_files": files}


def command_environment(
    ctx: Context, state: State, base: Mapping[str, str], *, carried: bool = False
) -> dict[str, str]:
    """run_environment for the context's command; on a remote target the startup set is
    installed in the root first (once per envlock version), unless the caller carries it
    in its own call (`carried`: runs/one_call.py)."""
    running = own_context(ctx, state)  # the active generation's own lock pins its scripts
    target = ctx.profile.target
    if target.remote and not carried:
        ship(ctx.transport, target.root)
    return run_environment(
        ctx.profile, state, base, scripts=sorted(running.scripts), target=ctx.transport.name
    )


def compile_artifacts_env(path: str) -> dict[str, str]:
    """Variables that make the command's Python load a mega-cache file at start-up (its
    sitecustomize is on PYTHONPATH already)."""
    return {"ENVLOCK_COMPILE_ARTIFACTS": path}
