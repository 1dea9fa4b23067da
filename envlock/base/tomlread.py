"""Reading TOML tables with errors that name the file, table, key, expectation and finding.

A `Table` wraps one parsed TOML table and hands out typed values; whatever key was never
asked for is reported as unknown, with a "did you mean" suggestion.
"""

from __future__ import annotations

import difflib
import re
import sys
import unicodedata
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NoReturn

from envlock.base.untrusted import NamedRefused, read_named
from envlock.errors import ProfileError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

TOMLDecodeError = tomllib.TOMLDecodeError

_MISSING = object()
# An environment variable's name, wherever a profile names one. \Z, not $: "$" would also
# accept a name that ends in a newline.
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")


def load_toml(path: Path) -> dict[str, Any]:
    """Parse a TOML file; syntax errors become a ProfileError with the line."""
    return loads_toml(path, read_toml_bytes(path))


def read_toml_bytes(path: Path) -> bytes:
    """The bytes of a profile the user named, through the gate: a FIFO, a device, a directory
    or a giant named as one is refused at once (exit 2), never blocked on or read whole."""
    try:
        return read_named(path, "profile")
    except NamedRefused as exc:
        raise ProfileError(str(path), exc.why, hint=exc.hint) from None
    except FileNotFoundError:
        raise ProfileError(str(path), "no such file", hint="check the path") from None
    except OSError as exc:
        raise ProfileError(str(path), f"cannot read: {exc.strerror}") from None


def loads_toml(path: Path, data: bytes) -> dict[str, Any]:
    """Parse TOML bytes that are (or will be) the file at `path`; errors name its line."""
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
        text = shown(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{kind} {text}".strip()


def shown(text: str) -> str:
    """A string in double quotes for a message, its control characters escaped: a NUL or a
    newline from a profile must not break the line it is reported on."""
    return '"' + "".join(_escaped(char) for char in text) + '"'


def _escaped(char: str) -> str:
    if not _is_control(char):
        return char
    return {"\n": "\\n", "\t": "\\t", "\r": "\\r"}.get(char, f"\\u{ord(char):04x}")


def _is_control(char: str) -> bool:
    # Cc: NUL, newlines, escape, DEL...; Zl/Zp: the Unicode line and paragraph separators.
    return unicodedata.category(char) in ("Cc", "Zl", "Zp")


def control_char(text: str) -> str | None:
    """The first control character of text, escaped for a message, or None."""
    for char in text:
        if _is_control(char):
            return _escaped(char)
    return None


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
            self.missing(key, required_because)
        return default

    def missing(self, key: str, why: str = "") -> NoReturn:
        """Fail for a required key; a misspelling of it in the table is named, since the
        unknown-key check would only have come after this failure."""
        typo = self.misspelling_of(key)
        if typo is not None:
            self.fail(
                key,
                f"missing required key `{key}` (found unknown key `{typo}`: did you mean `{key}`?)",
                hint=f"rename `{typo}` to `{key}`",
            )
        why = f" ({why})" if why else ""
        self.fail(key, f"missing required key{why}", hint=f"add `{key} = ...` to [{self.name}]")

    def misspelling_of(self, key: str) -> str | None:
        """A key of this table that nobody asked for and that is a typo or two from `key`.

        Keys read later are not known yet, so "close" is strict (one edit for short names,
        two for longer ones): a real neighbour such as api-user never passes for api-url.
        """
        limit = 1 if len(key) <= 5 else 2
        for candidate in self.data:
            if candidate in self.seen:
                continue
            if _typo_distance(_folded(candidate), _folded(key)) <= limit:
                return candidate
        return None

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

    def text(self, key: str, default: Any = _MISSING) -> Any:
        """A string without control characters: it becomes an argv word, a path, a header
        or a config line, where a NUL or a newline is an error or an injection."""
        value = self.string(key, default)
        if isinstance(value, str):
            self.plain(key, value)
        return value

    def plain(self, key: str, value: str) -> None:
        """Fail when value holds a control character (NUL, newline, escape, ...)."""
        char = control_char(value)
        if char is not None:
            self.fail(
                key,
                f"expected text without control characters, found {shown(value)} "
                f'(contains "{char}")',
                hint="remove the control character; TOML escapes such as \\n and \\u0000 count too",
            )

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

    def texts(self, key: str, default: Any = _MISSING) -> Any:
        """An array of strings without control characters (see `text`)."""
        values = self.strings(key, default)
        for index, value in enumerate(values or ()):
            self.plain(f"{key}[{index}]", value)
        return values

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


def _folded(key: str) -> str:
    # `index_url` and `Index-URL` are the same mistake as a one-letter typo.
    return key.lower().replace("_", "-")


def _typo_distance(a: str, b: str) -> int:
    """Edits (insert, delete, replace, swap two neighbours) from a to b."""
    rows = [list(range(len(b) + 1))]
    for i, char_a in enumerate(a, 1):
        row = [i]
        for j, char_b in enumerate(b, 1):
            cost = 0 if char_a == char_b else 1
            best = min(rows[-1][j] + 1, row[j - 1] + 1, rows[-1][j - 1] + cost)
            if i > 1 and j > 1 and char_a == b[j - 2] and a[i - 2] == char_b:
                best = min(best, rows[-2][j - 2] + 1)
            row.append(best)
        rows.append(row)
    return rows[-1][-1]


def suggest(word: str, choices: Iterable[str], *, what: str = "keys") -> str | None:
    """Says "did you mean `x`?" for a close or differently-cased choice, else the known ones."""
    return _suggest(word, choices, what, "`")


def suggest_value(word: str, choices: Iterable[str]) -> str | None:
    """The same for a value the profile spells: 'did you mean "cpu"?' / 'known values: …'."""
    return _suggest(word, choices, "values", '"')


def _suggest(word: str, choices: Iterable[str], what: str, quote: str) -> str | None:
    options = sorted(choices)
    # Case never makes a different choice: "CPU" is "cpu", however far difflib puts them.
    by_case = {option.lower(): option for option in options}
    close = difflib.get_close_matches(word.lower(), list(by_case), n=1, cutoff=0.6)
    if close:
        return f"did you mean {quote}{by_case[close[0]]}{quote}?"
    if options:
        return f"known {what}: " + ", ".join(options)
    return None
