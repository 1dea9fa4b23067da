"""Where a local target's paths are on this machine: the default root, and a path written in
a profile made absolute. Read by the profile reader and by commands/ahead.py, which starts a
local probe before the profile's code loads: stdlib only, and nothing else of envlock."""

from __future__ import annotations

import os
from pathlib import Path


def default_local_root(name: str) -> str:
    """A local profile's root when [target] root is not given (a remote target needs one)."""
    return f"~/.local/share/envlock/{name}"


def controller_path(value: str, profile: Path) -> Path:
    """A controller-side path as written in the profile at `profile`: `~` expanded, a
    relative path taken from the profile's directory."""
    expanded = Path(os.path.expanduser(value))
    full = expanded if expanded.is_absolute() else profile.parent.resolve() / expanded
    return Path(os.path.normpath(full))
