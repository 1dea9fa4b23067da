"""envlock's own cache on this machine, under the user's `~/.cache/envlock/<kind>/`.

What is kept there saves work, never decides it: each entry is named by the hash of what it
answers, written by the one atomic writer (0600, in directories made 0700), and read as
untrusted data — only while it and every directory above it are this user's (or root's) and
no one else may write them (ownership.untrusted), through the one gate
(untrusted.read_untrusted), as JSON; the caller checks the shape. Anything else is a miss.
Writing is best effort: a read-only home only costs the work next time. Entries are named by
hashes, so one nobody asks for again (an older envlock's, a lock long replaced) would stay
for good: a write removes its kind's entries written more than 30 days ago, once a day
at most (`prune`); one still in use is worked out again once and written afresh.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from typing import Any

from envlock.base.atomic import write_atomic
from envlock.base.ownership import untrusted
from envlock.base.untrusted import read_untrusted
from envlock.errors import EnvlockError


def cache_dir(kind: str) -> str | None:
    """`~/.cache/envlock/<kind>` (XDG_CACHE_HOME respected); None without an absolute one."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return os.path.join(base, "envlock", kind) if os.path.isabs(base) else None


def entry_path(kind: str, key: object) -> str | None:
    """Where the entry answering `key` (any JSON value) lives."""
    directory = cache_dir(kind)
    if directory is None:
        return None
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
    return os.path.join(directory, digest + ".json")


def read_entry(kind: str, key: object) -> Any:
    """The JSON kept for `key`, or None (a miss: absent, not this user's alone, unreadable)."""
    path = entry_path(kind, key)
    if path is None:
        return None
    try:
        if not os.path.exists(path) or untrusted(path) is not None:
            return None
        return json.loads(read_untrusted(path, "json"))
    except (OSError, ValueError, EnvlockError):
        return None


def write_entry(kind: str, key: object, data: object) -> None:
    """Keep `data` for `key`; silently nothing when the directory is not this user's."""
    path = entry_path(kind, key)
    if path is None:
        return
    with contextlib.suppress(OSError, EnvlockError):
        make_private_dirs(os.path.dirname(path))
        if untrusted(os.path.dirname(path)) is None:
            write_atomic(path, json.dumps(data).encode(), 0o600)
            prune(os.path.dirname(path))


PRUNED = ".pruned"  # its mtime: when the kind's directory was last pruned


def prune(kind_dir: str) -> None:
    """Remove the entries of `kind_dir` written more than STALE_DAYS ago (the agent's rule,
    agent/core.py), unless it was pruned in the last day (the marker is written first:
    writers at once prune once)."""
    marker = os.path.join(kind_dir, PRUNED)
    with contextlib.suppress(FileNotFoundError):
        if time.time() - os.lstat(marker).st_mtime < 86400:
            return
    write_atomic(marker, b"", 0o600)
    from envlock.agent.core import remove_stale  # stdlib only; loaded by a write alone

    remove_stale(kind_dir, lambda name: name.endswith(".json"))


def make_private_dirs(kind_dir: str) -> None:
    """`envlock/` and `envlock/<kind>/` made 0700 (makedirs' mode reaches only the last one;
    the target's agent-code cache shares `envlock/` and wants it private too); `~/.cache`
    itself is made as the user's tools make it."""
    envlock_dir = os.path.dirname(kind_dir)
    os.makedirs(os.path.dirname(envlock_dir), exist_ok=True)
    for directory in (envlock_dir, kind_dir):
        with contextlib.suppress(FileExistsError):
            os.mkdir(directory, 0o700)
