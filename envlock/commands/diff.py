"""`envlock diff`: not built yet."""

from envlock.cli import not_built

command = not_built("diff", "Show what changed between two runs")
