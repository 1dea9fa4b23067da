"""envlock-snapshot.json: writing it atomically, reading it back (from the file or the
checkpoint directory holding it) and the lock it recorded."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from envlock.atomic import write_atomic
from envlock.errors import UsageError
from envlock.lock import Lock, parse_lock
from envlock.runs.secrets import redact_argv, redact_config, redact_env
from envlock.runs.snapshot_doc import SCHEMA, SNAPSHOT_FILE
from envlock.runs.snapshot_schema import validate_snapshot
from envlock.untrusted import read_untrusted


def write_snapshot(
    directory: str | os.PathLike[str], data: dict[str, Any], name: str = SNAPSHOT_FILE
) -> Path:
    """Write DIR/envlock-snapshot.json (or another `name`) atomically; returns its path."""
    path = Path(directory) / name
    write_atomic(path, (json.dumps(data, indent=1, sort_keys=False) + "\n").encode())
    return path


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
    if isinstance(data.get("env"), dict):
        data["env"] = redact_env(data["env"])
    if isinstance(data.get("command"), list):
        data["command"] = redact_argv([str(a) for a in data["command"]])
    if data.get("config") is not None:
        data["config"] = redact_config(data["config"])
    return data


def snapshot_lock(data: dict[str, Any], origin: Path) -> Lock:
    return parse_lock(origin, data["lock"]["text"])
