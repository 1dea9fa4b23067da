"""One error base with subclasses that map onto the CLI exit codes of DESIGN.md."""

from __future__ import annotations

import re

EXIT_DRIFT = 1
EXIT_USAGE = 2
EXIT_FAILED = 3
EXIT_INTERRUPTED = 130  # Ctrl-C or SIGTERM, as a shell reports it

# The click context's meta key where a command says what an interrupt leaves behind.
INTERRUPTED = "envlock.interrupted"


class EnvlockError(Exception):
    """A failure a user can act on: printed without a traceback (unless -v)."""

    exit_code = EXIT_FAILED

    def __init__(
        self, message: str, *, hint: str | None = None, details: dict[str, object] | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.details = details or {}  # what the --json error document adds (a run's drift)

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  hint: {self.hint}"


class UsageError(EnvlockError):
    """Bad command-line input or a bad profile: exit 2."""

    exit_code = EXIT_USAGE


class ProfileError(UsageError):
    """A profile that does not validate: names file, table/key, expected and found."""

    def __init__(
        self,
        path: str,
        message: str,
        *,
        key: str | None = None,
        line: int | None = None,
        hint: str | None = None,
    ) -> None:
        where = path if line is None else f"{path}:{line}"
        if key:
            where = f"{where}: [{key}]" if "." not in key else f"{where}: {_format_key(key)}"
        super().__init__(f"{where}: {message}", hint=hint)
        self.path = path
        self.key = key
        self.line = line


def _format_key(key: str) -> str:
    table, _, rest = key.partition(".")
    return f"[{table}] {rest}"


class LockError(UsageError):
    """A lock that is missing, stale or unreadable: exit 2 (run `envlock lock`)."""


class OperationError(EnvlockError):
    """A target, transport, resolver or API operation failed: exit 3."""

    exit_code = EXIT_FAILED


# uv's chain ("error: …" then "  cause: …" lines; "Caused by:" in older uv), an OS error's own
# words at the end of a path-laden line, Python's "[Errno N] words: 'path'".
_CHAIN = re.compile(r"(?i)^(?:error|cause|caused by):\s*(.+)$")
_OS_ERROR = re.compile(r"([^:]*\(os error \d+\))")
_ERRNO = re.compile(r"\[Errno \d+\] ([^:']+)")
# "`uv pip sync …` failed (exit 2): uv pip sync --python … ROOT/generations/…": what ran,
# not why it failed.
_COMMAND_FAILED = re.compile(r"failed \(exit -?\d+\)")


def cause_of(message: str) -> str:
    """The cause in an error message, in one short line for a table: the deepest cause of a
    chain, reduced to an OS error's words ("No space left on device (os error 28)") — not
    the command line a failure message starts with."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    if not lines:
        return ""
    chain = [m.group(1) for line in lines if (m := _CHAIN.match(line))]
    if chain:
        deepest = chain[-1]
    elif len(lines) > 1 and _COMMAND_FAILED.search(lines[0]):
        deepest = lines[-1]  # the command's own last words
    else:
        deepest = lines[0]
    os_error = _OS_ERROR.search(deepest) or _ERRNO.search(deepest)
    return os_error.group(1).strip() if os_error else deepest
