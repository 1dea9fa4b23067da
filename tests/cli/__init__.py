"""The CLI on a local target, driven as a user drives it: real uv, venvs and processes."""
