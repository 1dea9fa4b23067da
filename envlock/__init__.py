"""envlock: reproducible environments for GPU training containers."""

from typing import Any

__version__ = "0.1.0"
__all__ = ["__version__", "snapshot"]


def __getattr__(name: str) -> Any:
    # Imported on first use, so the CLI's start-up stays small.
    if name == "snapshot":
        from envlock.runs.snapshot import snapshot

        return snapshot
    raise AttributeError(f"module 'envlock' has no attribute {name!r}")
