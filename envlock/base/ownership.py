"""Whose a path is: what root's processes write into and load from must be root's.

The rule the caches follow by descriptor (envlock/agent/programs/bootstrap.py, `private_dir`),
for a target's root and its compile-cache dir: the path and each of its
existing parents are owned by the running user or root and writable by no one else. A parent
may be a sticky directory such as /tmp (others cannot move or replace what is ours in it); the
path itself may not, nor be a symlink. A symlink among the parents is followed when the user or
root owns it. A part that does not exist yet is fine: it will be created inside a trusted
parent, and checked again.

Written once, in the agent (envlock/agent/core.py: `untrusted`), which judges the target's
paths with it; the controller judges its own with the same function.
"""

from envlock.agent.core import owner_name, untrusted

__all__ = ["owner_name", "untrusted"]
