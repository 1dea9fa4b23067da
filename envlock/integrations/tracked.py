"""What a tracker records of a snapshot, decided once for MLflow and W&B alike.

`envlock-snapshot.json` (a file, or the directory holding one) is read and passed through
the one secret rule again (base/secrets.py: a snapshot from an older envlock, or edited by
hand, leaves with nothing a secret's name or a URL gives away); from it come the facts a
person filters runs by (lock hash, torch build, generation, profile, whether `envlock run`
verified it), each dataset's fingerprint, and the hyperparameters: the config envlock
recorded, flattened the way diff compares it (base/flat.py).

Stdlib only, Python 3.8: these modules run inside the training script, whose interpreter is
the environment's and where `envlock` may be the start-up set's stdlib-only copy (no
`envlock.base` there): the leaves are then loaded from beside this package.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import re
import stat
from typing import Any

SNAPSHOT_FILE = "envlock-snapshot.json"
# A real snapshot is a few hundred kB (base/limits.py allows diff 64 MiB).
MAX_SNAPSHOT_BYTES = 64 * 1024 * 1024
# Where a snapshot's artifact goes in a run: envlock/<the directory it was written in>/.
ARTIFACT_ROOT = "envlock"
# The artifact's type in W&B (its versions are the checkpoints' snapshots).
ARTIFACT_TYPE = "envlock-snapshot"
PREFIX = "envlock."
# What a cut value ends with (a tracker's bound on lengths); the whole is in the artifact.
CUT = "… (cut; whole in envlock-snapshot.json)"
# A dataset's fingerprint, as a tag: the fields that say what was read, not where or how long.
NOT_FINGERPRINT = ("path", "seconds", "unreadable_named")


def leaf(name: str) -> Any:
    """envlock.base.NAME: imported, or (under the start-up set's `envlock`, which has no
    `base`) run from the file beside this package, the way the API copy runs its modules."""
    try:
        return importlib.import_module("envlock.base." + name)
    except ImportError:
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        path = os.path.join(here, "base", name + ".py")
        spec = importlib.util.spec_from_file_location("envlock_base_" + name, path)
        if spec is None or spec.loader is None:
            raise
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module


secret_rule = leaf("secrets")
flat = leaf("flat")


class SnapshotUnreadable(ValueError):
    """The path names no snapshot a tracker can record."""


def snapshot_file(snapshot: Any) -> str:
    """The snapshot's file: `snapshot` itself, or envlock-snapshot.json in that directory."""
    path = os.fspath(snapshot)
    return os.path.join(path, SNAPSHOT_FILE) if os.path.isdir(path) else path


def read_snapshot(path: str) -> dict[str, Any]:
    """The document of the snapshot file at `path`: a regular file (judged by its open
    descriptor: a FIFO never blocks the training script), JSON, an envlock snapshot."""
    try:
        # named: the snapshot file the caller names; judged on its descriptor below
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise SnapshotUnreadable(
            f"{path}: cannot read the snapshot: {exc.strerror}; pass the "
            "envlock-snapshot.json that envlock.snapshot() returned, or the directory holding it"
        ) from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise SnapshotUnreadable(f"{path}: not a regular file")
        if info.st_size > MAX_SNAPSHOT_BYTES:
            raise SnapshotUnreadable(
                f"{path}: {info.st_size} bytes, more than a snapshot holds ({MAX_SNAPSHOT_BYTES})"
            )
        raw = handle.read(MAX_SNAPSHOT_BYTES + 1)
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise SnapshotUnreadable(f"{path}: not a snapshot (not JSON: {exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("lock"), dict):
        raise SnapshotUnreadable(
            f"{path}: not an envlock snapshot (no lock recorded); write one with "
            "envlock.snapshot(DIR) or `envlock snapshot PROFILE DIR`"
        )
    return doc


def redacted(doc: dict[str, Any]) -> dict[str, Any]:
    """The document with the secret rule applied again where a snapshot records strings a
    secret could be in (as runs/snapshot_doc.py applies it when writing one)."""
    out = dict(doc)
    out["lock"] = dict(doc["lock"])
    if isinstance(doc["lock"].get("text"), str):
        out["lock"]["text"] = secret_rule.redact_text(doc["lock"]["text"])
    if isinstance(doc.get("env"), dict):
        out["env"] = secret_rule.redact_env(doc["env"])
    if isinstance(doc.get("command"), list):
        out["command"] = secret_rule.redact_argv([str(a) for a in doc["command"]])
    if isinstance(doc.get("process"), dict) and isinstance(doc["process"].get("argv"), list):
        argv = [str(a) for a in doc["process"]["argv"]]
        out["process"] = dict(doc["process"], argv=secret_rule.redact_argv(argv))
    for name in ("config", "git", "host", "profile", "datasets"):
        if name in doc:
            out[name] = secret_rule.redact_config(doc[name])
    return out


def facts(doc: dict[str, Any], as_text: bool = True) -> dict[str, Any]:
    """{envlock.lock_sha256, envlock.torch, …: value}: what runs are filtered by, as text
    (MLflow's tags) or as recorded (W&B's summary keeps `verified` a boolean)."""
    torch = table(doc, "torch")
    profile = table(doc, "profile")
    found = {
        "lock_sha256": doc["lock"].get("sha256"),
        "torch": torch.get("version"),
        "torch_cuda": torch.get("cuda"),
        "torch_hip": torch.get("hip"),
        "generation": doc.get("generation"),
        "profile": profile.get("name"),
        "verified": doc.get("verified"),
        "python": doc.get("python"),
        "envlock": doc.get("envlock"),
    }
    return {PREFIX + k: text(v) if as_text else v for k, v in found.items() if v not in (None, "")}


def table(doc: dict[str, Any], key: str) -> dict[str, Any]:
    """doc[key] when it is a table (a snapshot leaves out what it did not record)."""
    value = doc.get(key)
    return value if isinstance(value, dict) else {}


def fingerprints(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """{name: fingerprint} of the datasets the snapshot read (without where or how long)."""
    datasets = table(doc, "datasets")
    return {
        str(name): {k: v for k, v in sorted(found.items()) if k not in NOT_FINGERPRINT}
        for name, found in sorted(datasets.items())
        if isinstance(found, dict)
    }


def hyperparameters(doc: dict[str, Any]) -> dict[str, Any]:
    """The run's config as flat `a.b.c` keys (as diff compares it); none recorded: {}."""
    config = doc.get("config")
    if config is None:
        return {}
    flattened = flat.flatten(config)
    if "" in flattened:  # a config that is no dict (a list, a number): one value
        flattened["config"] = flattened.pop("")
    return {k: secret_rule.redact_value(k, v) for k, v in flattened.items()}


def nested(config: Any) -> Any:
    """The config as nested data without envlock's class names (W&B nests config itself)."""
    if isinstance(config, dict):
        return {str(k): nested(v) for k, v in config.items() if k != flat.CLASS_KEY}
    if isinstance(config, list):
        return [nested(v) for v in config]
    return config


def text(value: Any) -> str:
    """A value as a tracker's text: strings as they are, numbers and booleans as Python
    writes them (as MLflow does), lists and dicts as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, (list, dict)):
        return json.dumps(value, sort_keys=True, default=repr)
    return str(value)


def bounded(value: str, limit: int) -> str:
    """`value`, or its beginning and CUT when it is longer than `limit` characters."""
    return value if len(value) <= limit else value[: limit - len(CUT)] + CUT


def artifact_dir(path: str) -> str:
    """envlock/<name of the directory the snapshot lies in>: one folder per checkpoint."""
    name = os.path.basename(os.path.dirname(os.path.abspath(path)))
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "snapshot"
    return ARTIFACT_ROOT + "/" + name


def source_file(path: str, read: dict[str, Any], doc: dict[str, Any], scratch: str) -> str:
    """The file to upload: the snapshot itself, or (when the secret rule changed something
    in it) its redacted copy of the same name written into `scratch`."""
    if doc == read:
        return path
    copy = os.path.join(scratch, os.path.basename(path))
    # A new file in the caller's private temporary directory: exclusive, never through a link.
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(copy, flags, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(doc, indent=1) + "\n")
    return copy
