"""Whose a path is: what root's processes write into and load from must be root's.

The rule the agent's code cache follows (reconcile/agentcall.py, `mine`), for a target's root
and its compile-cache dir: the path and each of its existing parents are owned by the running
user or root and writable by no one else. A parent may be a sticky directory such as /tmp
(others cannot move or replace what is ours in it); the path itself may not, nor be a
symlink. A symlink among the parents is followed when the user or root owns it. A part that
does not exist yet is fine: it will be created inside a trusted parent, and checked again.

The agent keeps a twin of `untrusted` (envlock/agent/core.py; it cannot import envlock):
keep them in step, tests/trust/test_writes.py runs both on the same shapes.
"""

from __future__ import annotations

import os
import stat

MAX_LINKS = 40  # as the kernel's own limit on symlinks in one lookup


def untrusted(path: str, uid: int | None = None) -> str | None:
    """Why `path` is not this user's to trust, or None when it is."""
    uid = os.getuid() if uid is None else uid
    parts = [p for p in os.path.abspath(path).split("/") if p]
    current = "/"
    reason = judge(current, os.lstat(current), uid, last=not parts)
    hops = 0
    while parts and reason is None:
        name = parts.pop(0)
        if name == ".":
            continue
        if name == "..":
            current = os.path.dirname(current)
            continue
        here = os.path.join(current, name)
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            return None
        except OSError as exc:
            return f"{here} cannot be checked ({exc.strerror})"
        if stat.S_ISLNK(st.st_mode):
            hops += 1
            if not parts:
                return f"{here} is a symlink: name the directory itself"
            if st.st_uid not in (uid, 0):
                return f"{here} is a symlink owned by {owner_name(st.st_uid)}"
            if hops > MAX_LINKS:
                return f"{here}: too many levels of symlinks"
            target = os.readlink(here)
            current = "/" if target.startswith("/") else current
            parts = [p for p in target.split("/") if p] + parts
            continue
        reason = judge(here, st, uid, last=not parts)
        current = here
    return reason


def judge(path: str, st: os.stat_result, uid: int, last: bool) -> str | None:
    if st.st_uid not in (uid, 0):
        mine = "root" if uid == 0 else f"{owner_name(uid)} or root"
        return f"{path} is owned by {owner_name(st.st_uid)}, not by {mine}"
    sticky_dir = stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX
    if st.st_mode & 0o022 and (last or not sticky_dir):
        return f"{path} is writable by others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def owner_name(uid: int) -> str:
    import pwd

    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"
