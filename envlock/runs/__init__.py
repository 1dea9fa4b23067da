"""What happens around a run: its environment, snapshots, diffs and compile caches."""
