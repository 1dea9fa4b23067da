"""The snapshot document, built one way for every caller.

`envlock snapshot`, `envlock run --snapshot-into` and `envlock.snapshot()` in envlock's own
Python build it from a probe of the target; `envlock.snapshot()` inside a command started by
`envlock run` builds it in that process, from the same agent probe run in-process. Both go
through `document()` here, so the two kinds of snapshot cannot drift apart.

Stdlib only, Python 3.8+, no envlock imports outside the guard: the in-process API
(envlock/startup/envlock_api) runs this module in one namespace with what the guard imports
(agent/core.py, base/secrets.py, agent/datanames.py), the way
reconcile/agentcall.py ships the agent.
"""

from __future__ import annotations

import math
import numbers
import os
import re
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

if "__envlock_agent__" not in globals():  # in the repository; shipped, one namespace
    from envlock.agent.datanames import DATA_NAME
    from envlock.base.atomic import write_atomic
    from envlock.base.secrets import redact_argv, redact_config, redact_env, redact_text

SCHEMA = 1  # envlock.schema.DOCUMENTS["snapshot-file"] (this module is shipped alone)
SNAPSHOT_FILE = "envlock-snapshot.json"

# The variables of a run that change what it computes or how fast.
ENV_PATTERN = re.compile(
    r"^(CUDA_|NCCL_|TORCH|PYTORCH_|TRITON_|NVIDIA_|CUBLAS_|CUDNN_|OMP_"
    r"NUM_THREADS$|MKL_NUM_THREADS$|HF_|TOKENIZERS_)"
)
# How deep a config is followed before the rest is recorded as its repr (cycles end there).
MAX_CONFIG_DEPTH = 32
# A metric: a name a person would type, and a finite number; a snapshot holds few of them.
METRIC_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:/-]{0,63}")
MAX_METRICS = 256
# What a snapshot may spend fingerprinting its datasets, all together (a million files on a
# slow file system would otherwise hold up the checkpoint it is written beside).
DATA_SECONDS = 60.0


# -- the run's config as JSON data -----------------------------------------------------------
def plain(value: Any, depth: int = 0) -> Any:
    """A run config as JSON data: dicts and mappings (OmegaConf's DictConfig), lists and
    sequences, argparse.Namespace, dataclasses, and objects that export themselves
    (`model_dump()` of pydantic, `to_dict()`) become dicts with their class names kept;
    anything else unknown becomes its repr. No config library is imported."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if depth > MAX_CONFIG_DEPTH:
        return repr(value)
    # A Namespace or a dataclass exists only once its module was imported: asking
    # sys.modules spares a training process those imports on its first snapshot.
    argparse = sys.modules.get("argparse")
    if argparse is not None and isinstance(value, argparse.Namespace):
        return classed("argparse.Namespace", vars(value), depth)
    dataclasses = sys.modules.get("dataclasses")
    if dataclasses is not None and is_dataclass_instance(dataclasses, value):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return classed(type(value).__qualname__, fields, depth)
    if isinstance(value, Mapping):
        return {str(k): plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)):
        return [plain(v, depth + 1) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((plain(v, depth + 1) for v in value), key=repr)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    exported = self_exported(value)
    if isinstance(exported, Mapping):
        return classed(type(value).__qualname__, exported, depth)
    return repr(value)


def is_dataclass_instance(dataclasses: Any, value: Any) -> bool:
    return bool(dataclasses.is_dataclass(value)) and not isinstance(value, type)


def classed(name: str, fields: Mapping[str, Any], depth: int) -> dict[str, Any]:
    data = {"__class__": name}
    data.update({str(k): plain(v, depth + 1) for k, v in fields.items()})
    return data


def self_exported(value: Any) -> Any:
    """What an object says it holds: pydantic's model_dump(), a to_dict() (OmegaConf
    containers, many config classes); None when it has neither or they fail."""
    for method in ("model_dump", "to_dict"):
        export = getattr(value, method, None)
        if callable(export) and not isinstance(value, type):
            try:
                return export()
            except Exception:  # a config that cannot export itself is recorded as its repr
                return None
    return None


# -- what the run measured and read ------------------------------------------------------------
def checked_metrics(metrics: Any) -> dict[str, int | float]:
    """The numbers a script measured (tok/s, step, loss) as a snapshot records them: names
    of at most 64 characters, finite numbers (numpy's scalars too; not bools); ValueError
    naming the first that is not."""
    if metrics is None:
        return {}
    if not isinstance(metrics, Mapping):
        raise ValueError(f"metrics: expected a dict of name → number, found {type(metrics)}")
    if len(metrics) > MAX_METRICS:
        raise ValueError(f"metrics: at most {MAX_METRICS}, found {len(metrics)}")
    checked: dict[str, int | float] = {}
    for name, value in metrics.items():
        if not isinstance(name, str) or not METRIC_NAME.fullmatch(name):
            raise ValueError(
                f"metrics: {name!r} is not a metric name (a letter or _, then up to 63 "
                "letters, digits or _ . : / -)"
            )
        checked[name] = metric_value(name, value)
    return dict(sorted(checked.items()))


def metric_value(name: str, value: Any) -> int | float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"metrics: {name}: expected a number, found {type(value).__name__}")
    number = int(value) if isinstance(value, numbers.Integral) else float(value)
    if isinstance(number, int) and abs(number) >= 2**63:  # past what JSON readers keep exact
        digits = int(number.bit_length() * 0.30103) + 1  # never echoed: it may be huge
        raise ValueError(f"metrics: {name}: a number of about {digits:,} digits is out of range")
    if not math.isfinite(number):
        raise ValueError(f"metrics: {name}: expected a finite number, found {number}")
    return number


def checked_data(data: Any) -> dict[str, str]:
    """{name: path} of the datasets a script names (data=…); ValueError on a bad name."""
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ValueError(f"data: expected a dict of name → path, found {type(data).__name__}")
    checked = {}
    for name, path in data.items():
        if not isinstance(name, str) or not DATA_NAME.fullmatch(name):
            raise ValueError(
                f"data: {name!r} is not a dataset name (letters, digits, - and _, up to 64)"
            )
        if not isinstance(path, (str, os.PathLike)):
            raise ValueError(f"data: {name}: expected a path, found {type(path).__name__}")
        checked[name] = os.fspath(path)
    return checked


# -- what the process sees ---------------------------------------------------------------------
def run_env(environ: Mapping[str, str], profile_env: Any) -> dict[str, str]:
    """The variables a run sees that matter: the profile's [env] (names, or a mapping of
    defaults) and CUDA/NCCL/TORCH/… ones, secrets redacted."""
    keep = {k: v for k, v in environ.items() if ENV_PATTERN.match(k)}
    defaults: Mapping[str, str] = profile_env if isinstance(profile_env, Mapping) else {}
    for name in profile_env:
        if name in environ:
            keep[name] = environ[name]
        elif name in defaults:
            keep[name] = defaults[name]
    return redact_env(dict(sorted(keep.items())))


def git_state(directory: str | None) -> dict[str, Any] | None:
    """Commit and dirtiness of the repository holding the scripts, when there is one."""
    if directory is None or not os.path.isdir(directory):
        return None
    try:
        head = subprocess.run(
            ["git", "-C", directory, "rev-parse", "HEAD"], capture_output=True, text=True
        )
        if head.returncode != 0:
            return None
        status = subprocess.run(
            ["git", "-C", directory, "status", "--porcelain", "--", "."],
            capture_output=True,
            text=True,
        )
    except OSError:  # no git on this machine
        return None
    return {"commit": head.stdout.strip(), "dirty": bool(status.stdout.strip())}


def rank_of(environ: Mapping[str, str]) -> dict[str, Any]:
    """This process's place in a distributed run: torch.distributed's answer when the script
    already initialized it (never imported here), else RANK/LOCAL_RANK/WORLD_SIZE as
    torchrun, SLURM wrappers and DeepSpeed export them; a lone process is rank 0 of 1."""
    local = env_int(environ, "LOCAL_RANK")
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return {
                "rank": int(dist.get_rank()),
                "local_rank": local,
                "world_size": int(dist.get_world_size()),
                "from": "torch.distributed",
            }
    except Exception:  # a half-initialized process group: the environment still tells
        pass
    rank = env_int(environ, "RANK")
    return {
        "rank": rank if rank is not None else (local or 0),
        "local_rank": local,
        "world_size": env_int(environ, "WORLD_SIZE") or 1,
        "from": "environment" if rank is not None or local is not None else "default",
    }


def env_int(environ: Mapping[str, str], name: str) -> int | None:
    try:
        return int(environ[name])
    except (KeyError, ValueError):
        return None


# -- the document ------------------------------------------------------------------------------
def observed(probe: dict[str, Any]) -> dict[str, Any]:
    """The facts a probe of the running generation reports, as a snapshot records them.

    Read from the agent's answer as it comes (the agent's own format): the CLI hands in the
    answer it parsed into State, the in-process API the answer it got in-process."""
    packages = probe.get("packages") or {}
    torch = probe.get("torch")
    if torch is not None:
        torch = dict(torch)
        # cuDNN itself (nvidia-cudnn-cu12/-cu13, or unsuffixed), not nvidia-cudnn-frontend.
        torch["cudnn"] = next(
            (v for k, v in sorted(packages.items()) if re.match(r"nvidia-cudnn(-cu\d+)?$", k)),
            None,
        )
    scripts = probe.get("scripts") or {}
    return {
        "generation": probe.get("current"),
        "python": (probe.get("python") or {}).get("version") or None,
        "platform": {"machine": probe.get("machine"), "libc": probe.get("libc")},
        "packages": dict(sorted(packages.items())),
        "torch": torch,
        "hardware": probe.get("hardware") or {},
        "scripts": {"dest": scripts.get("dest"), "sha256": scripts.get("hashes") or {}},
        "cache": probe.get("cache"),
        "host": {"hostname": probe.get("hostname"), "container": probe.get("container")},
    }


def document(
    *,
    probe: dict[str, Any],
    profile: dict[str, Any],
    lock: dict[str, str],
    environ: Mapping[str, str],
    profile_env: Any,
    command: list[str],
    target: str,
    git: dict[str, Any] | None,
    config: Any = None,
    process: dict[str, Any] | None = None,
    envlock_version: str = "",
    datasets: dict[str, Any] | None = None,
    metrics: dict[str, int | float] | None = None,
) -> dict[str, Any]:
    """The snapshot document (pure): secrets redacted in env, command line, config and the
    lock's URLs (an index's credentials), by base/secrets.py's one rule. `datasets` are
    fingerprints already taken; `metrics` numbers already checked (checked_metrics)."""
    facts = observed(probe)
    host = dict(facts.pop("host"), target=target)
    data = {
        "schema": SCHEMA,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "envlock": envlock_version,
        "profile": profile,
        "lock": dict(lock, text=redact_text(lock["text"])),
    }
    data.update(facts)
    data.update(
        env=run_env(environ, profile_env),
        host=host,
        command=redact_argv([str(a) for a in command]),
        git=git,
        config=redact_config(plain(config)) if config is not None else None,
        datasets=dict(sorted((datasets or {}).items())),
        metrics=dict(metrics or {}),
    )
    if process is not None:
        data["process"] = dict(process, argv=redact_argv([str(a) for a in process["argv"]]))
    return data


def snapshot_name(rank: int | None = None) -> str:
    """envlock-snapshot.json, or envlock-snapshot.rank{N}.json for one rank of many."""
    return SNAPSHOT_FILE if rank is None else f"envlock-snapshot.rank{rank}.json"


def write_file(path: str, data: bytes) -> None:
    """Readers see the old file or the new one, never a part: write_atomic's exclusive temp
    file of a unique name (ranks writing at once never share one), mode set on its
    descriptor, fsync, rename; a link or device at `path` is refused."""
    write_atomic(path, data, 0o644)
