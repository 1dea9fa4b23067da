"""envlock's own cache on this machine, under the user's `~/.cache/envlock/<kind>/`.

What is kept there saves work, never decides it: each entry is named by the hash of what it
answers, and read as untrusted data, as JSON; the caller checks the shape. A directory
checked by name can be swapped before it is opened, so the kind's directory is walked to
from `/` by descriptor (agent/programs/bootstrap.py's `private_dir`: each directory opened
relative to the one before, never through a link, this user's or root's and writable by no
one else), and the entry is read (`read_private`: a regular file of this user's, judged on
its descriptor, size-capped), written (the agent's `write_at`, 0600, in directories made
0700) and pruned relative to that descriptor. Anything else is a miss.
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

from envlock.agent.core import remove_stale, write_at
from envlock.agent.programs.bootstrap import private_dir, read_private
from envlock.base.limits import MAX_BYTES


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
    fd = private_dir(os.path.dirname(path))
    if fd is None:
        return None
    try:
        data = read_private(fd, os.path.basename(path), MAX_BYTES["json"])
        return None if data is None else json.loads(data)
    except ValueError:
        return None
    finally:
        os.close(fd)


def write_entry(kind: str, key: object, data: object) -> None:
    """Keep `data` for `key`; silently nothing when the directory is not this user's."""
    path = entry_path(kind, key)
    if path is None:
        return
    # ~/.cache, envlock/ and <kind>/ may be made here (0700: the target's agent-code cache
    # shares envlock/ and wants it private too).
    fd = private_dir(os.path.dirname(path), made=3)
    if fd is None:
        return
    with contextlib.suppress(OSError):
        try:
            write_at(fd, os.path.basename(path), json.dumps(data).encode(), 0o600)
            prune(fd)
        finally:
            os.close(fd)


PRUNED = ".pruned"  # its mtime: when the kind's directory was last pruned


def prune(kind_fd: int) -> None:
    """Remove the entries of the kind's directory (a descriptor) written more than
    STALE_DAYS ago (the agent's rule, agent/core.py), unless it was pruned in the last day
    (the marker is written first: writers at once prune once)."""
    with contextlib.suppress(FileNotFoundError):
        if time.time() - os.lstat(PRUNED, dir_fd=kind_fd).st_mtime < 86400:
            return
    write_at(kind_fd, PRUNED, b"", 0o600)
    remove_stale(kind_fd, lambda name: name.endswith(".json"))
