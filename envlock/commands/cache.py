"""`envlock cache`: not built yet."""

from envlock.cli import not_built

command = not_built("cache", "Manage compile caches")
