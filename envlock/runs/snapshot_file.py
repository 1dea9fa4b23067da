"""envlock-snapshot.json: writing it atomically, reading it back (from the file or the
checkpoint directory holding it) and the lock it recorded."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from envlock.base.atomic import write_atomic, write_new
from envlock.base.secrets import redact_argv, redact_config, redact_env, redact_text
from envlock.base.untrusted import read_untrusted
from envlock.errors import EnvlockError, UsageError
from envlock.lock.policy import SHOWN, LockPolicy
from envlock.lock.read import Lock, parse_lock
from envlock.runs.snapshot_doc import SCHEMA, SNAPSHOT_FILE
from envlock.runs.snapshot_schema import validate_snapshot

# A snapshot downloaded from a tracker lies deeper than a checkpoint's: MLflow's whole-run
# download keeps it in <dst>/envlock/<checkpoint>/, a W&B artifacts folder in
# artifacts/<name>:v<N>/. So deep at most, and so many entries looked at at most.
TRACKER_DEPTH = 3
TRACKER_ENTRIES = 10_000


def snapshots_below(directory: Path) -> list[Path]:
    """The folders under `directory` (not itself) holding envlock-snapshot.json, at most
    TRACKER_DEPTH levels down (links not followed, a folder holding one not entered): a
    tracker's download. The walk ends after TRACKER_ENTRIES entries (a dataset is no run)."""
    found: list[Path] = []
    level, seen = [directory], 0
    for _ in range(TRACKER_DEPTH):
        deeper: list[Path] = []
        for folder in level:
            try:
                with os.scandir(folder) as entries:
                    children = [Path(e.path) for e in entries if e.is_dir(follow_symlinks=False)]
            except OSError:  # unreadable: nothing found there
                continue
            seen += len(children)
            if seen > TRACKER_ENTRIES:
                return found
            for child in children:
                (found if os.path.lexists(child / SNAPSHOT_FILE) else deeper).append(child)
        level = deeper
    return found


def write_snapshot(
    directory: str | os.PathLike[str],
    data: dict[str, Any],
    name: str = SNAPSHOT_FILE,
    *,
    replace: bool = True,
) -> Path:
    """Write DIR/envlock-snapshot.json (or another `name`) atomically; returns its path.
    Without `replace`, a snapshot already there is refused, not overwritten: it may be the
    one a run wrote of itself (its config, argv and rank are nowhere else)."""
    path = Path(directory) / name
    text = (json.dumps(data, indent=1, sort_keys=False) + "\n").encode()
    if replace:
        write_atomic(path, text)
        return path
    try:
        write_new(path, text)
    except FileExistsError:
        raise UsageError(
            f"{path}: a snapshot is already here{already_there(path)}",
            hint="pass --force to replace it, or write the snapshot into another directory",
        ) from None
    return path


def already_there(path: Path) -> str:
    """A few words on the snapshot found at `path` (its data is untrusted: only fields of a
    known shape are quoted)."""
    try:
        data = json.loads(read_untrusted(path, "snapshot"))
    except (EnvlockError, OSError, ValueError, RecursionError):
        return ""
    if not isinstance(data, dict):
        return ""
    said = []
    generation, created = data.get("generation"), data.get("created")
    if isinstance(generation, str) and re.fullmatch(r"\d+-[0-9a-f]{1,64}", generation):
        said.append(f"generation {generation}")
    if isinstance(created, str) and re.fullmatch(r"[0-9T:Z-]{1,32}", created):
        said.append(f"taken {created}")
    if isinstance(data.get("process"), dict):
        said.append("written inside the run by envlock.snapshot(), with its config and argv")
    return f" ({', '.join(said)})" if said else ""


def load_snapshot(path: str | os.PathLike[str], *, follow_links: bool = False) -> dict[str, Any]:
    """A snapshot from its file or from the directory (checkpoint dir) holding it, checked
    field by field (a snapshot is data from anywhere) and with its secrets redacted.

    It is read through the untrusted-bytes gate: a regular file, size-capped, and the one in a
    directory must lie inside it unless `follow_links`."""
    file, within = Path(path), None
    if file.is_dir():
        file, within = file / SNAPSHOT_FILE, file
    try:
        raw = read_untrusted(
            file, "snapshot", within=within, follow_links=follow_links, hint=_FOLLOW_HINT
        )
        data = json.loads(raw)
    except FileNotFoundError:
        raise UsageError(
            f"{file}: no snapshot here", hint="write one with `envlock snapshot PROFILE DIR`"
        ) from None
    except (ValueError, RecursionError) as exc:
        raise UsageError(f"{file}: not a valid snapshot: {exc}") from None
    schema = data.get("schema") if isinstance(data, dict) else None
    if isinstance(schema, int) and not isinstance(schema, bool) and schema != SCHEMA:
        raise UsageError(
            f"{file}: unsupported snapshot schema {schema}",
            hint=f"this envlock reads schema {SCHEMA}",
        )
    validate_snapshot(data, str(file))
    return without_secrets(data)


_FOLLOW_HINT = (
    "pass the snapshot file itself if you trust where it leads (envlock diff: --follow-links)"
)


def without_secrets(data: dict[str, Any]) -> dict[str, Any]:
    """A snapshot as it may be shown: one written before envlock redacted secrets (or by
    hand) holds them raw, so they are redacted again on every load."""
    data = dict(data)
    data["lock"] = dict(data["lock"], text=redact_text(data["lock"]["text"]))
    if isinstance(data.get("process"), dict) and isinstance(data["process"].get("argv"), list):
        argv = [str(a) for a in data["process"]["argv"]]
        data["process"] = dict(data["process"], argv=redact_argv(argv))
    if isinstance(data.get("env"), dict):
        data["env"] = redact_env(data["env"])
    if isinstance(data.get("command"), list):
        data["command"] = redact_argv([str(a) for a in data["command"]])
    if data.get("config") is not None:
        data["config"] = redact_config(data["config"])
    return data


def snapshot_lock(data: dict[str, Any], origin: Path, policy: LockPolicy = SHOWN) -> Lock:
    """The lock a snapshot recorded, read to be shown unless `policy` says how it installs."""
    return parse_lock(origin, data["lock"]["text"], policy, where="lock.text")
