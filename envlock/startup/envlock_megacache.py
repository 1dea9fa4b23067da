"""torch's mega-cache, saved with its build fingerprint and loaded only into a matching build.

A training script saves the artifacts it compiled and another node loads them before its
first compiled step (torch >= 2.7):

    import envlock_megacache                 # on PYTHONPATH under `envlock run`
    envlock_megacache.save("artifacts.bin")  # after the first compiled steps
    envlock_megacache.load("artifacts.bin")  # elsewhere, before the first compiled step

`envlock run --compile-artifacts FILE` loads FILE before the command starts. Where envlock is
installed, the same module is `envlock.startup.envlock_megacache`.
"""

from __future__ import annotations

import json
import os
import struct
import sys
from typing import Any

MAGIC = b"ENVLOCK-MEGACACHE\n"
# The most a mega-cache file may hold (read whole into the process that loads it).
MAX_ARCHIVE = 16 << 30
# The agent's core, whose write_atomic this module writes with: beside the start-up modules
# in the envlock package and in a root's copy of the set (envlock/runs/startup_set.py), and
# run from its file, as the in-process API runs it (this module cannot import envlock).
AGENT_CORE = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "agent", "core.py"
)


def fingerprint() -> dict[str, Any]:
    """What compiled code depends on: torch build, CUDA, triton, GPU architectures."""
    import torch

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    gpus: list[str] = []
    if torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            major, minor = torch.cuda.get_device_capability(index)
            gpus.append(f"sm{major}{minor}")
    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "triton": triton_version,
        "gpus": sorted(set(gpus)),
    }


def save(path: str) -> dict[str, Any]:
    """Write the artifacts compiled so far in this process to `path` (atomically)."""
    import torch

    artifacts = torch.compiler.save_cache_artifacts()
    if artifacts is None:
        raise RuntimeError(
            "torch compiled nothing yet in this process: save after the first compiled steps"
        )
    data, _info = artifacts
    header = json.dumps({"format": 1, "fingerprint": fingerprint()}).encode()
    # Exclusive temp file, mode on the descriptor: a link planted beside `path` (a shared
    # directory) is never written through.
    agent_core()["write_atomic"](path, MAGIC + struct.pack("<Q", len(header)) + header + data)
    return {"bytes": len(data), "fingerprint": json.loads(header)["fingerprint"]}


def agent_core() -> dict[str, Any]:
    """The names of agent/core.py, run in a namespace of their own (stdlib only)."""
    space: dict[str, Any] = {"__name__": "envlock_agent", "__envlock_agent__": True}
    # own: envlock's own agent core, beside this file
    with open(AGENT_CORE) as handle:
        exec(compile(handle.read(), AGENT_CORE, "exec"), space)
    return space


def read(path: str) -> tuple[dict[str, Any], bytes]:
    """The archive `envlock run --compile-artifacts` named (code, trusted as such: the
    docs' Security page), read through the agent's gate: a regular file, never blocked on."""
    core = agent_core()
    with core["open_untrusted"](path, MAX_ARCHIVE) as handle:
        blob = handle.read()
    if not blob.startswith(MAGIC) or len(blob) < len(MAGIC) + 8:
        raise ValueError(f"{path}: not an envlock mega-cache file")
    (size,) = struct.unpack("<Q", blob[len(MAGIC) : len(MAGIC) + 8])
    start = len(MAGIC) + 8
    return json.loads(blob[start : start + size]), blob[start + size :]


def load(path: str, *, strict: bool = True) -> dict[str, Any]:
    """Load artifacts saved by `save` into this process; refuses another build's."""
    import torch

    header, data = read(path)
    theirs, ours = header["fingerprint"], fingerprint()
    differing = [
        f"{k}: file has {theirs.get(k)}, this process has {ours.get(k)}"
        for k in sorted(set(theirs) | set(ours))
        if theirs.get(k) != ours.get(k)
    ]
    if differing and strict:
        raise ValueError(f"{path} was compiled for another build: " + "; ".join(differing))
    torch.compiler.load_cache_artifacts(data)
    return {"bytes": len(data), "fingerprint": theirs}


def load_from_environment() -> None:
    """Called at interpreter start-up (sitecustomize) under `envlock run --compile-artifacts`:
    the main process loads the file once; processes it starts inherit the flag and skip."""
    path = os.environ.get("ENVLOCK_COMPILE_ARTIFACTS")
    if not path or os.environ.get("ENVLOCK_COMPILE_ARTIFACTS_LOADED"):
        return
    os.environ["ENVLOCK_COMPILE_ARTIFACTS_LOADED"] = "1"
    try:
        info = load(path)
    except Exception as exc:  # the run goes on, cold, and says why
        sys.stderr.write(f"envlock: compile artifacts not loaded: {exc}\n")
        return
    sys.stderr.write(f"envlock: loaded {info['bytes']} bytes of compile artifacts from {path}\n")
