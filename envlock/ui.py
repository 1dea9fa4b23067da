"""Output for people (rich, on stderr for progress and errors) and for machines (--json).

rich is imported when something is first printed, not when envlock starts: `check` and
`run` start the target's work first and let `prepare()` build the consoles meanwhile.
"""

from __future__ import annotations

import functools
import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    # Reports go to stdout; progress, prompts and errors to stderr so `--json` stays
    # parseable. Built on first use (module __getattr__ below).
    out: Console
    err: Console


@functools.lru_cache(maxsize=2)
def _console(*, stderr: bool) -> Console:
    from rich.console import Console

    console = Console(stderr=stderr, highlight=False, soft_wrap=True, emoji=False)
    if not console.is_terminal:
        # Pipes and logs get whole lines: a path or fingerprint is never folded mid-word.
        console.width = 100_000
    return console


def __getattr__(name: str) -> Any:
    if name in ("out", "err"):
        return _console(stderr=name == "err")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def prepare() -> None:
    """Import rich and build both consoles now (while a target works, say)."""
    _console(stderr=False)
    _console(stderr=True)
    from rich.markup import escape  # noqa: F401


class _Json:
    """This process's --json state: asked for (the CLI sets it once it has read the
    arguments), a document already printed, and the last error said (for the error
    document of a command that exits without raising)."""

    asked = False
    emitted = False
    last_error: str | None = None


JSON = _Json()


def emit_json(kind: str, data: dict[str, Any]) -> None:
    """Print one --json document of `kind` (its "schema" from envlock.schema.DOCUMENTS)."""
    from envlock.schema import document

    sys.stdout.write(json.dumps(document(kind, data), indent=2, sort_keys=False) + "\n")
    sys.stdout.flush()
    JSON.emitted = True


def emit_error(message: str, hint: str | None, exit_code: int, **details: Any) -> None:
    """A failure under --json: one document on stdout, whatever the command had begun."""
    emit_json("error", {"error": message, "hint": hint, "exit": exit_code, **details})


def error(message: str) -> None:
    JSON.last_error = message
    _console(stderr=True).print(f"[bold red]error:[/] {escape(message)}")


def warn(message: str) -> None:
    _console(stderr=True).print(f"[yellow]warning:[/] {escape(message)}")


def info(message: str) -> None:
    _console(stderr=True).print(escape(message))


def escape(text: str) -> str:
    from rich.markup import escape as rich_escape

    return rich_escape(text)


def untrusted(text: str) -> str:
    r"""Text from a file or another machine, safe to print: unprintable characters (terminal
    escapes like `\x1b[2J`, lone surrogates, bidi overrides) shown as `\x1b`, then markup
    escaped."""
    if not text.isprintable():
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return escape(text)


@contextmanager
def status(message: str, *, quiet: bool = False) -> Iterator[None]:
    """A spinner for work that may take more than a second (nothing when not a terminal)."""
    if quiet or not _console(stderr=True).is_terminal:
        yield
        return
    with _console(stderr=True).status(escape(message)):
        yield


def shown_path(path: object) -> str:
    """A path as a user would type it here: relative to the working directory when inside."""
    from pathlib import Path

    full = Path(str(path))
    try:
        return str(full.relative_to(Path.cwd()))
    except ValueError:
        return str(full)


# -- formatting for people --------------------------------------------------------------
def plural(count: int, noun: str) -> str:
    """ "1 container", "3 containers" (nouns that take an s)."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def size(n: int | float) -> str:
    """Bytes for people: 1.5 GB, 512 B (powers of 1000, like file managers)."""
    value = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(value) < 1000 or unit == "TB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{n} B"


def ago(timestamp: float | None) -> str:
    """How long ago a moment was: "3 h ago", "just now", "never"."""
    if not timestamp:
        return "never"
    seconds = max(0, time.time() - timestamp)
    for unit, length in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= length:
            return f"{seconds / length:.0f} {unit} ago"
    return "just now"


def warmth(files: int, size_bytes: int | None) -> str:
    """A compile cache's warmth: cold, or warm with its size and file count."""
    if not files:
        return "cold"
    return f"warm ({size(size_bytes or 0)}, {files} files)"
