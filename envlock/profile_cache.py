"""The profile's requirement lists, validated once per distinct list.

Parsing PEP 508 requirements needs `packaging`'s requirement parser (its markers, specifiers
and tokenizer): a few times more import time than everything else `check` and `run` read of
a profile. The verdict is a pure function of the texts and of `packaging`'s version, so it is
kept by content hash: `~/.cache/envlock/requirements/<sha256>.json` holds, for one list of
texts that the parser accepted, each one's name as written and canonicalised. Only accepted
lists are kept (a refusal is always worded by the parser itself), and the texts are stored
too, so that a hit is a lookup of exactly those bytes.

The file is data written by an earlier envlock of this user, read as untrusted: only while
it and its directories are this user's (or root's) and no one else may write them
(ownership.untrusted), through the one gate (untrusted.read_untrusted), and used only when
its shape and its texts are exactly what was asked; anything else is a miss, and the parser
runs. Writing it is best effort (a read-only home only costs the parse next time).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os

import packaging  # the package only (its version): the parser loads on a miss

from envlock import __version__
from envlock.atomic import write_atomic
from envlock.errors import EnvlockError
from envlock.ownership import untrusted
from envlock.untrusted import read_untrusted

SCHEMA = 1
Names = list[tuple[str, str]]  # per text: (the name as written, its canonical form)


def cache_dir() -> str | None:
    """The user's cache directory for envlock (None without an absolute one)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return os.path.join(base, "envlock", "requirements") if os.path.isabs(base) else None


def entry_path(texts: list[str]) -> str | None:
    directory = cache_dir()
    if directory is None:
        return None
    key = json.dumps([SCHEMA, __version__, packaging.__version__, texts])
    return os.path.join(directory, hashlib.sha256(key.encode()).hexdigest() + ".json")


def cached_names(texts: list[str]) -> Names | None:
    """The names of `texts` as the parser gave them before, or None (a miss)."""
    path = entry_path(texts)
    if path is None or not texts:
        return None
    try:
        if not os.path.exists(path) or untrusted(path) is not None:
            return None
        data = json.loads(read_untrusted(path, "json"))
    except (OSError, ValueError, EnvlockError):
        return None
    return names_of(data, texts)


def names_of(data: object, texts: list[str]) -> Names | None:
    """The entry's names when it is exactly the shape written for `texts`, else None."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or data.get("texts") != texts:
        return None
    names = data.get("names")
    if not isinstance(names, list) or len(names) != len(texts):
        return None
    found: Names = []
    for pair in names:
        if not (
            isinstance(pair, list) and len(pair) == 2 and all(isinstance(p, str) for p in pair)
        ):
            return None
        found.append((pair[0], pair[1]))
    return found


def remember_names(texts: list[str], names: Names) -> None:
    """Keep the parser's verdict on `texts` (accepted, with these names) for next time."""
    path = entry_path(texts)
    if path is None or not texts:
        return
    data = {"schema": SCHEMA, "texts": texts, "names": [list(pair) for pair in names]}
    with contextlib.suppress(OSError, EnvlockError):
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        if untrusted(os.path.dirname(path)) is None:
            write_atomic(path, json.dumps(data).encode(), 0o600)
