"""One error base with subclasses that map onto the CLI exit codes of DESIGN.md."""

from __future__ import annotations

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
