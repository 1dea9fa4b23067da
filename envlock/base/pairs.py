"""Files that change together (a profile and its lock): all of them or none, across a crash.

The intended contents of every file are recorded first, in one durable file beside the first
(`.NAME.envlock-pending.json`); then each file is written (atomically); then the record is
removed. A crash in between leaves the record behind, and the next command that reads the
profile (`finish_interrupted`, from envlock/profile/read.py) writes what is still missing
and says so: the pair is never left half-changed (a new profile with its old lock).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
from pathlib import Path
from typing import Any

from envlock.agent import core
from envlock.base.atomic import write_atomic
from envlock.base.untrusted import open_untrusted, read_named


def record_of(first: Path) -> Path:
    return first.with_name(f".{first.name}.envlock-pending.json")


def write_together(files: list[tuple[Path, bytes | None, int]], why: str) -> None:
    """Write each (path, bytes, mode) — bytes None: remove the file — as one change."""
    record = record_of(files[0][0])
    entries = [
        {
            "path": str(path),
            "data": None if data is None else base64.b64encode(data).decode(),
            "mode": mode,
        }
        for path, data, mode in files
    ]
    write_atomic(record, json.dumps({"why": why, "files": entries}).encode(), 0o600)
    finish(record, entries)


def finish(record: Path, entries: list[dict[str, Any]]) -> list[str]:
    """Make every file of `entries` what the record says; then drop the record. What it
    had to write (the names of the files a crash kept from being written)."""
    written = []
    for entry in entries:
        path = Path(str(entry["path"]))
        data = entry["data"]
        if data is None:
            if path.exists():
                path.unlink()
                core.fsync_dir(str(path.parent))
                written.append(path.name)
            continue
        after = base64.b64decode(str(data))
        if not path.exists() or read_named(path, "lock") != after:
            mode = entry["mode"]
            write_atomic(path, after, mode if isinstance(mode, int) else 0o644)
            written.append(path.name)
    with contextlib.suppress(FileNotFoundError):
        record.unlink()
    core.fsync_dir(str(record.parent))
    return written


def finish_interrupted(first: Path) -> str | None:
    """Complete the change a crash interrupted, if the record of one lies beside `first`;
    what to tell the user, or None (nothing was pending)."""
    record = record_of(first)
    if not record.exists():
        return None
    with open_untrusted(record, "lock") as handle:  # a lock and a profile: the lock's bound
        try:
            doc = json.loads(handle.read())
            entries = list(doc["files"])
        except (ValueError, KeyError, TypeError):
            doc, entries = {}, []
    if not entries or not all(os.path.dirname(str(e.get("path"))) for e in entries):
        record.unlink()  # torn before it was whole: nothing was written after it
        core.fsync_dir(str(record.parent))
        return None
    written = finish(record, entries)
    if not written:
        return None
    return (
        f"completed a change a crash interrupted ({doc.get('why') or 'a change'}): "
        f"wrote {', '.join(written)}, so that {first.name} and its lock match again"
    )
