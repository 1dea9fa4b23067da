"""Files put on PYTHONPATH of commands started by `envlock run` (stdlib only)."""
