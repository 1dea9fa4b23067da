"""Atomic file writes, by descriptor: the one way the controller writes a file.

The rule is the agent's (envlock/agent/core.py: `write_atomic`, `write_new`), stdlib-only so
that targets and the start-up set run the very same code: a temp file created exclusively
beside its destination, never through a link, its mode set on the open descriptor, only the
rename by name; a destination that is not a regular file (a link, a FIFO, a device node) is
never replaced. Here it gets envlock's types and errors: a destination that is not a regular
file is a NotRegularFile (exit 2), a temp file replaced meanwhile an OperationError (exit 3).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from envlock.agent import core
from envlock.errors import OperationError, UsageError


class NotRegularFile(UsageError):
    """The destination exists and is not a regular file: it is not ours to replace (exit 2)."""


@contextlib.contextmanager
def envlock_errors() -> Iterator[None]:
    """The agent's refusals as envlock's errors (OSError stays the caller's)."""
    try:
        yield
    except core.AgentError as exc:
        error = NotRegularFile if exc.kind == "not-regular" else OperationError
        raise error(str(exc)) from None


def write_atomic(path: str | os.PathLike[str], data: bytes, mode: int = 0o644) -> None:
    """Replace `path` with `data` so readers see the old or the new file, never a part."""
    with envlock_errors():
        core.write_atomic(os.fspath(path), data, mode)


def write_new(path: str | os.PathLike[str], data: bytes, mode: int = 0o644) -> None:
    """Like write_atomic, but never replaces a file: FileExistsError when `path` exists."""
    with envlock_errors():
        core.write_new(os.fspath(path), data, mode)


def refuse_non_regular(path: str) -> None:
    """NotRegularFile when `path` exists and is not a regular file."""
    with envlock_errors():
        core.refuse_non_regular(path)
