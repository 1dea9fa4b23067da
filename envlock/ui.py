"""Output for people (rich, on stderr for progress and errors) and for machines (--json).

rich is imported when something is first printed, not when envlock starts: `check` and
`run` start the target's work first and let `prepare()` build the consoles meanwhile.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
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


def plain(*, stderr: bool = False) -> bool:
    """Whether rich would write this stream's text as it is: not a terminal, by rich's own
    test (TTY_COMPATIBLE, then FORCE_COLOR, then isatty). A line without markup then needs
    no rich at all: a pipe, a log or a CI job reading `check` never loads it."""
    forced = os.environ.get("TTY_COMPATIBLE", "")
    if forced in ("0", "1"):
        return forced == "0"
    color = os.environ.get("FORCE_COLOR")
    if color is not None:
        return color == ""
    stream = sys.stderr if stderr else sys.stdout
    try:
        return not stream.isatty()
    except (AttributeError, ValueError):  # no stream, or a closed one: rich says "no"
        return True


# What rich's Text drops from any text it prints (bell, backspace, vertical tab, form feed,
# carriage return) and its tab stops (every 8 columns): the plain path does the same, so
# both print the same line.
_RICH_STRIPS = dict.fromkeys((7, 8, 11, 12, 13))


def _say(message: str, *, stderr: bool, styled: str = "", prefix: str = "") -> None:
    """One line of `message` (text, not markup) after a prefix: through rich on a terminal,
    written as rich would write it, without loading rich, anywhere else."""
    with _LIVE_LOCK:
        end_live()
        if plain(stderr=stderr):
            stream = sys.stderr if stderr else sys.stdout
            stream.write((prefix + message.translate(_RICH_STRIPS)).expandtabs(8) + "\n")
        else:
            _console(stderr=stderr).print(styled + escape(message))


# -- progress: one line shown in place on stderr's terminal --------------------------------
# Every step that may take more than a second shows it here, the same way: uv's install
# (the agent's count), a resolve, a manifest, `data --deep`, `diff --weights`. Nothing of
# it ever reaches a pipe, a file or --json. The line of a `status` step is redrawn by a
# thread of its own (the seconds it has taken), so writes to the terminal take this lock.
_LIVE: dict[str, Any] = {"shown": False, "step": None}
_LIVE_LOCK = threading.RLock()


def shows_progress() -> bool:
    """Whether progress is shown at all: stderr is a terminal and no --json was asked."""
    return not (JSON.asked or plain(stderr=True))


def live(message: str) -> None:
    """A progress count shown in place on stderr's terminal (the next line replaces it);
    nothing at all on a pipe, a file or under --json. Within a `status` step the count
    goes after the step's own words."""
    if not shows_progress():
        return
    with _LIVE_LOCK:
        step = _LIVE["step"]
        if step is not None:
            step.detail = message
            message = step.line()
        _draw(message)


def _draw(message: str) -> None:
    width = max(20, _console(stderr=True).width - 1)
    sys.stderr.write("\r\x1b[K  " + message.translate(_RICH_STRIPS)[: width - 2])
    sys.stderr.flush()
    _LIVE["shown"] = True


def end_live() -> None:
    """Clear a count `live` left on the terminal before anything else is written."""
    with _LIVE_LOCK:
        if _LIVE["shown"]:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
            _LIVE["shown"] = False


class _Step:
    """A `status` step on the terminal: its words, the latest count, the seconds taken."""

    def __init__(self, message: str) -> None:
        self.message = message
        self.detail = ""
        self.started = time.monotonic()
        self.done = threading.Event()

    def count(self, detail: str) -> None:
        """The work's latest count, drawn with the next tick (cheap: call it per MiB); the
        first at once, however fast the work turns out."""
        first, self.detail = not self.detail, detail
        if first:
            with _LIVE_LOCK:
                if _LIVE["step"] is self:
                    _draw(self.line())

    def line(self) -> str:
        seconds = int(time.monotonic() - self.started)
        taken = f" ({seconds} s)" if seconds else ""
        return self.message + (f": {self.detail}" if self.detail else "") + taken

    def tick(self) -> None:
        while not self.done.wait(0.5):
            with _LIVE_LOCK:
                if _LIVE["step"] is self:
                    _draw(self.line())


def table(renderable: object, *, stderr: bool = False) -> None:
    """A rich table (or any renderable) as its lines, without the spaces rich pads them
    with at the end (styles kept on a terminal)."""
    import re

    console = _console(stderr=stderr)
    with console.capture() as captured:
        console.print(renderable)
    lines = captured.get().split("\n")
    trimmed = [re.sub(r" +((?:\x1b\[[0-9;]*m)*)$", r"\1", line) for line in lines]
    with _LIVE_LOCK:
        end_live()
        console.file.write("\n".join(trimmed))
        console.file.flush()


def ok(message: str) -> None:
    """`✓ message` on stdout (the ✓ green on a terminal)."""
    _say(message, stderr=False, styled="[green]✓[/] ", prefix="✓ ")


def prepare_for_terminal() -> None:
    """`prepare`, where the command's success path needs rich: on a terminal. For pipes and
    files it prints plain lines (`ok`, `info`, …): rich loads only if something else prints
    (a drift table), then."""
    if not (plain() and plain(stderr=True)):
        prepare()


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
    _say(message, stderr=True, styled="[bold red]error:[/] ", prefix="error: ")


def warn(message: str) -> None:
    _say(message, stderr=True, styled="[yellow]warning:[/] ", prefix="warning: ")


def info(message: str) -> None:
    _say(message, stderr=True)


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
def status(message: str, *, quiet: bool = False) -> Iterator[Callable[[str], None]]:
    """Work that may take more than a second: on stderr's terminal, `message` in place at
    once, then the seconds it has taken, every half second, with the latest count the work
    gives (to the function it yields, or an agent's live line); nothing on a pipe, a file or
    under --json. `message` is plain text (never markup)."""
    if quiet or not shows_progress():
        yield _no_count
        return
    step = _Step(message)
    with _LIVE_LOCK:
        outer, _LIVE["step"] = _LIVE["step"], step
        _draw(step.line())
    ticker = threading.Thread(target=step.tick, name="envlock-progress", daemon=True)
    ticker.start()
    try:
        yield step.count
    finally:
        step.done.set()
        ticker.join()
        with _LIVE_LOCK:
            _LIVE["step"] = outer
            end_live()


def _no_count(_count: str) -> None:
    """A `status` step's count where nothing is shown."""


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
