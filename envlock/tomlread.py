"""Reading TOML tables with errors that name the file, table, key, expectation and finding.

A `Table` wraps one parsed TOML table and hands out typed values; whatever key was never
asked for is reported as unknown, with a "did you mean" suggestion.
"""

from __future__ import annotations

import difflib
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NoReturn

from envlock.errors import ProfileError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

TOMLDecodeError = tomllib.TOMLDecodeError

_MISSING = object()
# An environment variable's name, wherever a profile names one.
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def load_toml(path: Path) -> dict[str, Any]:
    """Parse a TOML file; syntax errors become a ProfileError with the line."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ProfileError(str(path), "no such file", hint="check the path") from None
    except OSError as exc:
        raise ProfileError(str(path), f"cannot read: {exc.strerror}") from None
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise ProfileError(str(path), "not UTF-8 text; TOML files must be UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        line = getattr(exc, "lineno", None)
        if line is None:  # tomllib before 3.14 only puts "(at line N, column M)" in the text
            found = re.search(r"\(at line (\d+), column \d+\)", str(exc))
            line = int(found.group(1)) if found else None
        raise ProfileError(str(path), f"invalid TOML: {exc}", line=line) from None


def describe(value: object) -> str:
    """A short, user-facing description of a TOML value, for 'found ...'."""
    kind = {
        bool: "a boolean",
        int: "an integer",
        float: "a float",
        str: "a string",
        list: "an array",
        dict: "a table",
    }.get(type(value), type(value).__name__)
    text = repr(value) if not isinstance(value, (dict, list)) else ""
    if isinstance(value, bool):
        text = "true" if value else "false"
    if isinstance(value, str):
        text = f'"{value}"'
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{kind} {text}".strip()


class Table:
    """One TOML table of a file, read key by key."""

    def __init__(self, path: str, name: str, data: dict[str, Any]) -> None:
        self.path = path
        self.name = name
        self.data = data
        self.seen: set[str] = set()

    def fail(self, key: str | None, message: str, hint: str | None = None) -> NoReturn:
        full = self.name if key is None else f"{self.name}.{key}"
        raise ProfileError(self.path, message, key=full, hint=hint)

    def has(self, key: str) -> bool:
        return key in self.data

    def raw(self, key: str, default: Any = _MISSING, *, required_because: str = "") -> Any:
        self.seen.add(key)
        if key in self.data:
            return self.data[key]
        if default is _MISSING:
            why = f" ({required_because})" if required_because else ""
            self.fail(key, f"missing required key{why}", hint=f"add `{key} = ...` to [{self.name}]")
        return default

    def typed(self, key: str, kind: type | tuple[type, ...], expected: str, default: Any) -> Any:
        value = self.raw(key, default)
        if value is default and default is not _MISSING:
            return value
        # bool is an int subclass: a boolean where a number is wanted is a mistake.
        if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _tuple(kind)):
            self.fail(key, f"expected {expected}, found {describe(value)}")
        return value

    def string(self, key: str, default: Any = _MISSING) -> Any:
        return self.typed(key, str, "a string", default)

    def integer(self, key: str, default: Any = _MISSING, *, minimum: int | None = None) -> Any:
        value = self.typed(key, int, "an integer", default)
        if isinstance(value, int) and minimum is not None and value < minimum:
            self.fail(key, f"expected an integer >= {minimum}, found {value}")
        return value

    def boolean(self, key: str, default: Any = _MISSING) -> Any:
        return self.typed(key, bool, "true or false", default)

    def strings(self, key: str, default: Any = _MISSING) -> Any:
        value = self.typed(key, list, "an array of strings", default)
        if value is default:
            return value
        for index, item in enumerate(value):
            if not isinstance(item, str):
                self.fail(f"{key}[{index}]", f"expected a string, found {describe(item)}")
        return list(value)

    def table(self, key: str) -> Table | None:
        value = self.raw(key, None)
        if value is None:
            return None
        if not isinstance(value, dict):
            self.fail(key, f"expected a table, found {describe(value)}")
        return Table(self.path, f"{self.name}.{key}", value)

    def finish(self) -> None:
        """Report the first key that nobody asked for."""
        for key in self.data:
            if key not in self.seen:
                self.fail(key, "unknown key", hint=suggest(key, self.seen))


def _tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def suggest(word: str, choices: Iterable[str]) -> str | None:
    options = sorted(choices)
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    if close:
        return f"did you mean `{close[0]}`?"
    if options:
        return "known keys: " + ", ".join(options)
    return None
