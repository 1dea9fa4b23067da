"""envlock: reproducible environments for GPU training containers."""

__version__ = "0.1.0"
