"""Snapshots: the environment of a run, written next to its checkpoint.

`envlock-snapshot.json` holds the whole lock, the observed state (packages, torch build,
GPUs), script hashes, the environment variables that matter, the compile cache, host,
command line, git state and the run's config — enough to say what differs between two runs
and to rebuild the environment exactly (`envlock apply PROFILE --from-snapshot DIR`).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from envlock import __version__
from envlock.errors import UsageError
from envlock.lock import find_links_for
from envlock.profile import load_profile
from envlock.reconcile.context import Context, gather_state, open_context, own_context
from envlock.reconcile.state import State
from envlock.runs.environment import run_environment
from envlock.runs.secrets import redact_argv, redact_config, redact_env
from envlock.runs.snapshot_file import SCHEMA, load_snapshot, snapshot_lock, write_snapshot
from envlock.runs.snapshot_schema import check_sources, parse_lock_text

# The variables of a run that change what it computes or how fast.
ENV_PATTERN = re.compile(
    r"^(CUDA_|NCCL_|TORCH|PYTORCH_|TRITON_|NVIDIA_|CUBLAS_|CUDNN_|OMP_"
    r"NUM_THREADS$|MKL_NUM_THREADS$|HF_|TOKENIZERS_)"
)


def plain(value: Any) -> Any:
    """A run config as JSON data: dicts, argparse.Namespace and dataclasses become dicts
    (with their class names kept), anything else unknown becomes its repr."""
    if isinstance(value, argparse.Namespace):
        return {"__class__": "argparse.Namespace", **plain(vars(value))}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return {"__class__": type(value).__qualname__, **fields}
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def run_env(environ: Mapping[str, str], profile_env: Mapping[str, str]) -> dict[str, str]:
    """The variables a run sees that matter: the profile's [env] and CUDA/NCCL/TORCH/… ones,
    secrets redacted."""
    keep = {k: v for k, v in environ.items() if ENV_PATTERN.match(k)}
    keep.update({k: environ.get(k, v) for k, v in profile_env.items()})
    return redact_env(dict(sorted(keep.items())))


def git_state(directory: Path | None) -> dict[str, Any] | None:
    """Commit and dirtiness of the repository holding the scripts, when there is one."""
    if directory is None or not directory.is_dir():
        return None
    head = subprocess.run(
        ["git", "-C", str(directory), "rev-parse", "HEAD"], capture_output=True, text=True
    )
    if head.returncode != 0:
        return None
    status = subprocess.run(
        ["git", "-C", str(directory), "status", "--porcelain", "--", "."],
        capture_output=True,
        text=True,
    )
    return {"commit": head.stdout.strip(), "dirty": bool(status.stdout.strip())}


def torch_facts(state: State) -> dict[str, Any] | None:
    if state.torch is None:
        return None
    torch = state.torch.to_json()
    packages = state.packages or {}
    cudnn = next((v for k, v in packages.items() if k.startswith("nvidia-cudnn-")), None)
    torch["cudnn"] = cudnn
    return torch


def build_snapshot(
    ctx: Context,
    state: State,
    *,
    environ: Mapping[str, str],
    command: list[str],
    config: Any = None,
) -> dict[str, Any]:
    """The snapshot document of a context's target in `state` (pure)."""
    profile, host = ctx.profile, state.host
    ran = own_context(ctx, state).lock
    return {
        "schema": SCHEMA,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "envlock": __version__,
        "profile": {"name": profile.name, "path": str(profile.path), "sha256": profile.sha256},
        # The lock of the generation that actually runs (after a rollback, not the profile's).
        "lock": {"sha256": ran.sha256, "text": ran.text},
        "generation": state.current,
        "python": state.python_version or None,
        "platform": {"machine": host.machine, "libc": host.libc},
        "packages": dict(sorted((state.packages or {}).items())),
        "torch": torch_facts(state),
        "hardware": state.hardware,
        "scripts": {
            "dest": state.scripts.dest if state.scripts else None,
            "sha256": state.scripts.hashes if state.scripts else {},
        },
        "env": run_env(environ, profile.env),
        "cache": state.cache.to_json() if state.cache else None,
        "host": {
            "hostname": host.hostname,
            "container": host.container,
            "target": ctx.transport.name,
        },
        "command": redact_argv(list(command)),
        "git": git_state(profile.scripts.source if profile.scripts else None),
        "config": redact_config(plain(config)) if config is not None else None,
    }


def take_snapshot(ctx: Context, *, command: list[str], config: Any = None) -> dict[str, Any]:
    """Gather (metadata only: no file hashing, no torch import) and build a snapshot.

    The environment recorded is the one `envlock run` gives a command: the current process's
    when it runs under `envlock run`, else what envlock run would export.
    """
    state = gather_state(ctx, verify=False, warmth=True, lock=True)
    environ: Mapping[str, str] = os.environ
    if state.current and not os.environ.get("ENVLOCK_GENERATION"):
        environ = run_environment(ctx.profile, state, os.environ)
    return build_snapshot(ctx, state, environ=environ, command=command, config=config)


def snapshot(
    directory: str | os.PathLike[str],
    profile: str | os.PathLike[str] | None = None,
    config: Any = None,
) -> Path:
    """Python API: record the environment (and the run's `config`) into `directory`.

    Under `envlock run` the profile is known from ENVLOCK_PROFILE. Cheap enough to call at
    every checkpoint save: one probe of package metadata, no file hashing, no torch import.
    """
    profile = profile or os.environ.get("ENVLOCK_PROFILE")
    if not profile:
        raise UsageError(
            "no profile given and ENVLOCK_PROFILE is not set",
            hint="pass profile=… or run the script through `envlock run`",
        )
    ctx = open_context(profile, allow_stale=True)
    data = take_snapshot(ctx, command=list(sys.argv), config=config)
    return write_snapshot(directory, data)


# -- rebuilding a snapshot's environment ------------------------------------------------
def context_from_snapshot(
    profile_path: str | os.PathLike[str], snapshot_dir: str, *, force: bool = False
) -> Context:
    """A context whose lock is the one a snapshot recorded (to rebuild that environment).

    The snapshot is checked before anything of it is used: its lock's wheels must come from
    https:// or the profile's find-links, and it must be this profile's (unless `force`)."""
    profile = load_profile(profile_path)
    data = load_snapshot(snapshot_dir)
    origin = str(snapshot_dir)
    theirs = data["profile"]["name"]
    if theirs != profile.name and not force:
        raise UsageError(
            f"{origin}: the snapshot was made for profile {theirs!r}, not {profile.name!r}",
            hint="pass --force to rebuild its environment on this profile's target anyway",
        )
    check_sources(parse_lock_text(data["lock"]["text"], origin), find_links_for(profile), origin)
    lock = snapshot_lock(data, Path(snapshot_dir))
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
