"""Snapshots: the environment of a run, written next to its checkpoint.

`envlock-snapshot.json` holds the whole lock, the observed state (packages, torch build,
GPUs), script hashes, the environment variables that matter, the compile cache, host,
command line, git state and the run's config — enough to say what differs between two runs
and to rebuild the environment exactly (`envlock apply PROFILE --from-snapshot DIR`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from envlock import __version__
from envlock.base.inherited import given
from envlock.errors import UsageError
from envlock.lock.links import find_links_for
from envlock.lock.policy import snapshot_policy
from envlock.lock.schema import lock_data
from envlock.profile.read import load_profile
from envlock.profile.sources import DataSource, paths, requests
from envlock.reconcile.context import (
    Context,
    Probe,
    gather_state,
    open_context,
    own_context,
)
from envlock.reconcile.state import State
from envlock.runs.environment import run_environment
from envlock.runs.snapshot_doc import (
    DATA_SECONDS,
    checked_data,
    checked_metrics,
    document,
    git_state,
    rank_of,
    snapshot_name,
)
from envlock.runs.snapshot_file import load_snapshot, snapshot_lock, write_snapshot
from envlock.runs.snapshot_schema import check_sources


def build_snapshot(
    ctx: Context,
    state: State,
    *,
    environ: Mapping[str, str],
    command: list[str],
    config: Any = None,
    process: dict[str, Any] | None = None,
    data: Mapping[str, str] | None = None,
    metrics: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The snapshot document of a context's target in `state`: pure but for git and the
    fingerprints of the profile's [data] and of `data` (one agent call, time-bounded)."""
    profile = ctx.profile
    measured = checked_or_usage(checked_metrics, metrics)
    named = paths(checked_or_usage(checked_data, data))
    datasets = fingerprint_datasets(ctx, {**profile.data, **named})
    # The lock of the generation that actually runs (after a rollback, not the profile's).
    ran = own_context(ctx, state).lock
    source = profile.scripts.source if profile.scripts else None
    return document(
        # The probe's answer as the agent gave it: the in-process API records the same
        # facts from the same answer (snapshot_doc.observed), so both read it one way.
        probe=state.raw,
        profile={"name": profile.name, "path": str(profile.path), "sha256": profile.sha256},
        # As installed: wheels beside the profile by their absolute path, as the generation's
        # own copy records them (the snapshot lies elsewhere than the lock).
        lock={"sha256": ran.sha256, "text": ran.install_text()},
        environ=environ,
        profile_env=profile.env,
        command=command,
        target=ctx.transport.name,
        git=git_state(str(source) if source else None),
        config=config,
        process=process,
        envlock_version=__version__,
        datasets=datasets,
        metrics=measured,
    )


def checked_or_usage(check: Callable[[Any], dict[str, Any]], value: Any) -> dict[str, Any]:
    """snapshot_doc's checks (shared with the in-process API) raise ValueError; here a bad
    argument is a usage error, said without a traceback."""
    try:
        return check(value)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def fingerprint_datasets(ctx: Context, datasets: Mapping[str, DataSource]) -> dict[str, Any]:
    """Each dataset's fingerprint, taken on the target by the agent within DATA_SECONDS
    (a path not there is recorded as missing; one too big to walk in time as incomplete)."""
    if not datasets:
        return {}
    from envlock.reconcile.agentcall import call_agent  # only a snapshot with [data] pays

    request = {"datasets": requests(datasets), "deep": False, "seconds": DATA_SECONDS}
    answer = call_agent(ctx.transport, ctx.profile.target.root, "data", request)
    return dict(answer["datasets"])


def take_snapshot(
    ctx: Context,
    *,
    command: list[str],
    config: Any = None,
    metrics: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Gather (metadata only: no file hashing, no torch import) and build a snapshot."""
    state = gather_state(ctx, Probe(verify=False, warmth=True, lock=True))
    if state.current_generation is None:
        raise UsageError(
            "nothing applied yet: there is no environment to record",
            hint=f"run `envlock apply {ctx.profile.path}` first",
        )
    return snapshot_of(ctx, state, command=command, config=config, metrics=metrics)


def snapshot_of(ctx: Context, state: State, **what: Any) -> dict[str, Any]:
    """The environment recorded is the one `envlock run` gives a command: the current
    process's when it runs under `envlock run`, else what envlock run would export."""
    environ: Mapping[str, str] = given()
    if state.current and not environ.get("ENVLOCK_GENERATION"):
        environ = run_environment(ctx.profile, state, environ)
    return build_snapshot(ctx, state, environ=environ, **what)


def snapshot(
    directory: str | os.PathLike[str],
    profile: str | os.PathLike[str] | None = None,
    config: Any = None,
    *,
    all_ranks: bool = False,
    data: Mapping[str, str | os.PathLike[str]] | None = None,
    metrics: Mapping[str, Any] | None = None,
) -> Path | None:
    """Python API: record the environment (and the run's `config`) into `directory`.

    `data`: {name: path} of datasets the run read, fingerprinted with the profile's [data]
    (a name in both: this path); `metrics`: {name: number} the run measured (tok/s, step).

    Under `envlock run` the profile is known from ENVLOCK_PROFILE. Cheap enough to call at
    every checkpoint save: one probe of package metadata, no file hashing, no torch import.
    In a distributed run only global rank 0 writes (None elsewhere), unless `all_ranks`:
    then each rank writes envlock-snapshot.rank{N}.json.
    """
    profile = profile or os.environ.get("ENVLOCK_PROFILE")
    if not profile:
        raise UsageError(
            "no profile given and ENVLOCK_PROFILE is not set",
            hint="pass profile=… or run the script through `envlock run`",
        )
    checked_or_usage(checked_metrics, metrics)  # said on every rank, not only rank 0's
    checked_or_usage(checked_data, data)
    place = rank_of(os.environ)
    if place["rank"] != 0 and not all_ranks:
        return None
    ctx = open_context(profile, allow_stale=True)
    state = gather_state(ctx, Probe(verify=False, warmth=True, lock=True))
    process = dict(place, argv=list(sys.argv))
    doc = snapshot_of(
        ctx,
        state,
        command=list(sys.argv),
        config=config,
        process=process,
        data=api_paths(ctx, data),
        metrics=metrics,
    )
    name = snapshot_name(place["rank"] if all_ranks else None)
    return write_snapshot(directory, doc, name)


def api_paths(ctx: Context, data: Any) -> dict[str, str]:
    """data=…'s paths as the agent reads them: on a local target, relative to this process's
    working directory (the script's), as the script opened them."""
    checked = checked_or_usage(checked_data, data)
    if ctx.profile.target.remote:
        return checked
    return {name: os.path.abspath(path) for name, path in checked.items()}


# -- rebuilding a snapshot's environment ------------------------------------------------
def context_from_snapshot(
    profile_path: str | os.PathLike[str],
    snapshot_dir: str,
    *,
    force: bool = False,
    allow_pth: tuple[str, ...] = (),
) -> Context:
    """A context whose lock is the one a snapshot recorded (to rebuild that environment).

    The snapshot is checked before anything of it is used: its lock builds nothing from
    source (whatever its profile allowed), its wheels come from https:// or the profile's
    find-links, it installs a .pth only from the packages in `allow_pth` (the agent checks
    that after installing, before the generation can run), and it must be this profile's
    (unless `force`)."""
    profile = load_profile(profile_path)
    data = load_snapshot(snapshot_dir)
    origin = str(snapshot_dir)
    theirs = data["profile"]["name"]
    if theirs != profile.name and not force:
        raise UsageError(
            f"{origin}: the snapshot was made for profile {theirs!r}, not {profile.name!r}",
            hint="pass --force to rebuild its environment on this profile's target anyway",
        )
    policy = snapshot_policy(allow_pth)
    lock_doc, _ = lock_data(data["lock"]["text"], origin, policy, "lock.text")
    check_sources(lock_doc, find_links_for(profile), origin)
    lock = snapshot_lock(data, Path(snapshot_dir), policy)
    return Context(profile, lock, profile.target.transport())


def snapshot_compatibility(ctx: Context, data: dict[str, Any], state: State) -> list[str]:
    """Why a snapshot's environment cannot be built on this target (empty when it can)."""
    problems = []
    taken_on = (data.get("platform") or {}).get("machine")
    here = state.host.machine
    if taken_on and here and taken_on != here:
        problems.append(f"the snapshot was taken on {taken_on}; this target is {here}")
    platform = str(ctx.lock.meta.get("python-platform", ""))
    if here and platform and not platform.startswith((here, "linux")):
        problems.append(f"the snapshot's lock is for {platform}; this target is {here}")
    return problems
