"""The environment a command sees under `envlock run`. Pure: state and profile in, env out."""

from __future__ import annotations

import os
from collections.abc import Mapping

from envlock.profile import Profile
from envlock.reconcile.state import State

# Variables that would make the generation's interpreter look elsewhere.
SCRUBBED = ("PYTHONHOME", "PYTHONPATH", "CONDA_PREFIX", "__PYVENV_LAUNCHER__")


def generation_dir(profile: Profile, state: State) -> str:
    assert state.current is not None
    return os.path.join(profile.target.root, "generations", state.current)


def run_environment(profile: Profile, state: State, base: Mapping[str, str]) -> dict[str, str]:
    env = {k: v for k, v in base.items() if k not in SCRUBBED}
    gen = generation_dir(profile, state)
    env["VIRTUAL_ENV"] = gen
    env["PATH"] = os.pathsep.join([os.path.join(gen, "bin"), base.get("PATH", os.defpath)])
    if state.cache is not None:
        env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(state.cache.dir, "inductor")
        env["TRITON_CACHE_DIR"] = os.path.join(state.cache.dir, "triton")
    if not profile.target.remote:
        # envlock_megacache (save/load torch's mega-cache) is importable by the command;
        # the directory holds only stdlib modules (its sitecustomize chains to any other).
        env["PYTHONPATH"] = startup_dir()
    env.update(profile.env)
    env["ENVLOCK_PROFILE"] = str(profile.path)
    env["ENVLOCK_GENERATION"] = state.current or ""
    return env


def startup_dir() -> str:
    """envlock/startup: envlock_megacache and the sitecustomize that loads artifacts."""
    from importlib import resources

    return str(resources.files("envlock").joinpath("startup"))


def compile_artifacts_env(path: str) -> dict[str, str]:
    """Variables that make the command's Python load a mega-cache file at start-up."""
    return {"ENVLOCK_COMPILE_ARTIFACTS": path, "PYTHONPATH": startup_dir()}
