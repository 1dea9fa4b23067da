"""Output for people (rich, on stderr for progress and errors) and for machines (--json)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.markup import escape as rich_escape

# Reports go to stdout; progress, prompts and errors to stderr so `--json` stays parseable.
out = Console(highlight=False, soft_wrap=True, emoji=False)
err = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)


def emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False) + "\n")
    sys.stdout.flush()


def error(message: str) -> None:
    err.print(f"[bold red]error:[/] {escape(message)}")


def warn(message: str) -> None:
    err.print(f"[yellow]warning:[/] {escape(message)}")


def info(message: str) -> None:
    err.print(escape(message))


def escape(text: str) -> str:
    return rich_escape(text)


@contextmanager
def status(message: str, *, quiet: bool = False) -> Iterator[None]:
    """A spinner for work that may take more than a second (nothing when not a terminal)."""
    if quiet or not err.is_terminal:
        yield
        return
    with err.status(escape(message)):
        yield
