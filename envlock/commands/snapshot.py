"""`envlock snapshot`: not built yet."""

from envlock.cli import not_built

command = not_built("snapshot", "Write DIR/envlock-snapshot.json")
