"""Snapshots: the environment of a run, written next to its checkpoint.

`envlock-snapshot.json` holds the whole lock, the observed state (packages, torch build,
GPUs), script hashes, the environment variables that matter, the compile cache, host,
command line, git state and the run's config — enough to say what differs between two runs
and to rebuild the environment exactly (`envlock apply PROFILE --from-snapshot DIR`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envlock import __version__
from envlock.atomic import write_atomic
from envlock.errors import UsageError
from envlock.lock import parse_lock
from envlock.state import State

if TYPE_CHECKING:
    from envlock.apply import Context

SNAPSHOT_FILE = "envlock-snapshot.json"
SCHEMA = 1
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
    """The variables a run sees that matter: the profile's [env] and CUDA/NCCL/TORCH/… ones."""
    keep = {k: v for k, v in environ.items() if ENV_PATTERN.match(k)}
    keep.update({k: environ.get(k, v) for k, v in profile_env.items()})
    return dict(sorted(keep.items()))


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
    torch = dict(state.torch or {})
    if not torch:
        return None
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
    profile, raw = ctx.profile, state.raw
    scripts = state.scripts or {}
    return {
        "schema": SCHEMA,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "envlock": __version__,
        "profile": {"name": profile.name, "path": str(profile.path), "sha256": profile.sha256},
        "lock": {"sha256": ctx.lock.sha256, "text": ctx.lock.text},
        "generation": state.current,
        "python": raw.get("python", {}).get("version"),
        "platform": {"machine": raw.get("machine"), "libc": raw.get("libc")},
        "packages": dict(sorted((state.packages or {}).items())),
        "torch": torch_facts(state),
        "hardware": state.hardware,
        "scripts": {"dest": scripts.get("dest"), "sha256": scripts.get("hashes", {})},
        "env": run_env(environ, profile.env),
        "cache": state.cache,
        "host": {
            "hostname": raw.get("hostname"),
            "container": raw.get("container"),
            "target": ctx.transport.name,
        },
        "command": list(command),
        "git": git_state(profile.scripts.source if profile.scripts else None),
        "config": plain(config) if config is not None else None,
    }


def take_snapshot(ctx: Context, *, command: list[str], config: Any = None) -> dict[str, Any]:
    """Gather (metadata only: no file hashing, no torch import) and build a snapshot.

    The environment recorded is the one `envlock run` gives a command: the current process's
    when it runs under `envlock run`, else what envlock run would export.
    """
    from envlock.apply import gather_state
    from envlock.runenv import run_environment

    state = gather_state(ctx, verify=False, warmth=True)
    environ: Mapping[str, str] = os.environ
    if state.current and not os.environ.get("ENVLOCK_GENERATION"):
        environ = run_environment(ctx.profile, state, os.environ)
    return build_snapshot(ctx, state, environ=environ, command=command, config=config)


def write_snapshot(directory: str | os.PathLike[str], data: dict[str, Any]) -> Path:
    """Write DIR/envlock-snapshot.json atomically; returns its path."""
    path = Path(directory) / SNAPSHOT_FILE
    write_atomic(path, (json.dumps(data, indent=1, sort_keys=False) + "\n").encode())
    return path


def load_snapshot(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A snapshot from its file or from the directory (checkpoint dir) holding it."""
    file = Path(path)
    if file.is_dir():
        file = file / SNAPSHOT_FILE
    try:
        data = json.loads(file.read_text())
    except FileNotFoundError:
        raise UsageError(
            f"{file}: no snapshot here", hint="write one with `envlock snapshot PROFILE DIR`"
        ) from None
    except ValueError as exc:
        raise UsageError(f"{file}: not a valid snapshot: {exc}") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise UsageError(f"{file}: unsupported snapshot schema {data.get('schema')!r}")
    return data


def snapshot_lock(data: dict[str, Any], origin: Path) -> Any:
    return parse_lock(origin, data["lock"]["text"])


def snapshot(
    directory: str | os.PathLike[str],
    profile: str | os.PathLike[str] | None = None,
    config: Any = None,
) -> Path:
    """Python API: record the environment (and the run's `config`) into `directory`.

    Under `envlock run` the profile is known from ENVLOCK_PROFILE. Cheap enough to call at
    every checkpoint save: one probe of package metadata, no file hashing, no torch import.
    """
    from envlock.apply import open_context

    profile = profile or os.environ.get("ENVLOCK_PROFILE")
    if not profile:
        raise UsageError(
            "no profile given and ENVLOCK_PROFILE is not set",
            hint="pass profile=… or run the script through `envlock run`",
        )
    ctx = open_context(profile, allow_stale=True)
    data = take_snapshot(ctx, command=list(sys.argv), config=config)
    return write_snapshot(directory, data)
