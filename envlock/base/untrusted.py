"""The one gate for bytes from elsewhere: snapshots, locks, checkpoint members, JSON beside a
checkpoint and compile-cache archives are opened here and nowhere else.

A name is no promise about what it opens: a FIFO called envlock-snapshot.json blocks a plain
`open` forever, a link to /dev/zero never ends, a sparse file claims gigabytes it never wrote,
a link in a shared directory leads to root's own files. So the file is opened without blocking,
judged on the open descriptor (what was opened, not what the name pointed to a moment before):
a regular file, within its kind's size (MAX_BYTES in base/limits.py), and, when it is
read as a member of a directory, inside that directory unless the user asked to follow links.
The rule is written once, in the agent (envlock/agent/core.py: `open_untrusted`), which reads
a target's files with it; here it gets envlock's limits, wording and errors.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from envlock.agent import core
from envlock.base.limits import MAX_BYTES, MiB, Refused, budget, printable
from envlock.errors import OperationError, UsageError

FOLLOW_HINT = "pass --follow-links to read files outside the checkpoint's directory"


def open_untrusted(
    path: str | os.PathLike[str],
    kind: str,
    *,
    within: Path | None = None,
    follow_links: bool = False,
    hint: str = FOLLOW_HINT,
) -> BinaryIO:
    """`path` open for reading, once the descriptor shows a regular file of `kind`'s size and,
    with `within` and not `follow_links`, that it lies inside `within`."""
    inside = None if within is None or follow_links else os.fspath(within)
    try:
        handle: BinaryIO = core.open_untrusted(os.fspath(path), MAX_BYTES[kind], inside)
    except FileNotFoundError:
        raise  # for the caller to word ("no snapshot here", ...)
    except OSError as exc:  # a loop of links, a name too long, no permission
        where = printable(str(path), 500)
        raise OperationError(f"{where}: cannot read it ({exc.strerror or exc})") from None
    except core.UnsafeFile as exc:
        raise translated(exc, printable(str(path), 500), kind, str(within), hint) from None
    return handle


def translated(exc: core.UnsafeFile, where: str, kind: str, within: str, hint: str) -> Refused:
    """The agent's refusal in envlock's words and classes (`where`: the path, printable)."""
    if exc.why == "kind":
        return _refused(where, exc.detail)
    if exc.why == "outside":
        return Unsafe(
            f"{where} is a link out of {printable(within, 500)} (to {printable(exc.detail, 500)})",
            hint,
        )
    limit = MAX_BYTES[kind]
    return Refused(
        f"{where}: a {kind} of {exc.detail:,} bytes", _size(limit), hint=_size_hint(kind)
    )


def read_untrusted(
    path: str | os.PathLike[str],
    kind: str,
    *,
    within: Path | None = None,
    follow_links: bool = False,
    hint: str = FOLLOW_HINT,
) -> bytes:
    """All of `path` (see `open_untrusted`), charged to the command's budget of bytes."""
    with open_untrusted(path, kind, within=within, follow_links=follow_links, hint=hint) as f:
        return read_counted(f, MAX_BYTES[kind], kind, str(path))


def read_counted(f: BinaryIO, limit: int, kind: str, where: str) -> bytes:
    """At most `limit` bytes of `f` (a file that grew after its fstat is refused too),
    charged to the command's budget before they are read."""
    left = budget().left("bytes")
    data = f.read(min(limit, max(left, 0)) + 1)
    if len(data) > limit:
        raise Refused(
            f"{printable(where, 500)}: a {kind} of more than {limit:,} bytes",
            _size(limit),
            hint=_size_hint(kind),
        )
    budget().spend("bytes", len(data), printable(where, 500))
    return data


def refuse_sparse(handle: BinaryIO, where: str | os.PathLike[str], hint: str) -> None:
    """Unsafe when the file open on `handle` is sparse (the agent's `sparse`: holes over half
    of a size it never wrote): its claimed size is no measure of what reading its zeros
    would cost, so it is not read whole."""
    why = core.sparse(handle.fileno(), os.fstat(handle.fileno()))
    if why is not None:
        raise Unsafe(f"{printable(str(where), 500)} is {why}: its holes are not read", hint)


class Unsafe(Refused):
    """A file refused for what it is or where it leads, not for its size."""

    def __init__(self, message: str, hint: str) -> None:
        OperationError.__init__(self, f"refusing: {message}", hint=hint)
        self.what, self.limit = message, ""

    def at(self, where: str) -> Refused:
        return Unsafe(f"{where}: {self.what}", self.hint or "")


def _refused(where: str, what: str) -> Unsafe:
    return Unsafe(
        f"{where} is {what}, not a regular file",
        "envlock reads only regular files from elsewhere: replace it with the file it should be",
    )


def _size_hint(kind: str) -> str:
    return (
        f"no real {kind} comes near this size: the file is corrupt or built to exhaust time or "
        "memory (envlock's limits are listed on the docs' Security page)"
    )


def _size(limit: int) -> str:
    if limit >= 1024 * MiB and limit % (1024 * MiB) == 0:
        return f"{limit // (1024 * MiB):,} GiB"
    return f"{limit // MiB:,} MiB" if limit >= MiB else f"{limit:,} bytes"


# -- files the user names ------------------------------------------------------------------
# A profile, its lock, `snapshot --config FILE`, the scripts a profile pins, the wheels of its
# find-links, `run --compile-artifacts FILE`: named by the user, they pass the same gate (a
# FIFO given as the profile blocked a plain open forever, a device never ended). What the
# gate refuses there is the user's argument that is wrong: a usage error (exit 2) that names
# the file first, as a profile's errors do.
NAMED_HINT = "name the file itself: envlock reads only regular files, of a sane size"


class NamedRefused(UsageError):
    """A file the user named that the gate refuses: `where`, then `why`."""

    def __init__(self, where: str, why: str) -> None:
        super().__init__(f"{where}: {why}", hint=NAMED_HINT)
        self.where, self.why = where, why


@contextmanager
def open_named(path: str | os.PathLike[str], kind: str) -> Iterator[BinaryIO]:
    """A file the user named, open through the gate (the agent's `open_untrusted`: regular,
    within `kind`'s size, opened without blocking); NamedRefused otherwise.
    FileNotFoundError is the caller's to word."""
    where = printable(str(path), 500)
    try:
        handle: BinaryIO = core.open_untrusted(os.fspath(path), MAX_BYTES[kind])
    except FileNotFoundError:
        raise
    except OSError as exc:  # a loop of links, a name too long, no permission
        raise NamedRefused(where, f"cannot read it ({exc.strerror or exc})") from None
    except core.UnsafeFile as exc:
        raise NamedRefused(where, _named_why(exc, kind)) from None
    with handle:
        yield handle


def _named_why(exc: core.UnsafeFile, kind: str) -> str:
    if exc.why == "kind":
        return f"{exc.detail}, not a regular file"
    return f"a {kind} of {exc.detail:,} bytes exceeds {_size(MAX_BYTES[kind])}"


def read_named(path: str | os.PathLike[str], kind: str) -> bytes:
    """All of a file the user named (see `open_named`), bounded by `kind`'s size."""
    limit = MAX_BYTES[kind]
    with open_named(path, kind) as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:  # it grew past its size after the open
        raise NamedRefused(printable(str(path), 500), f"a {kind} exceeds {_size(limit)}")
    return data
