"""The profile's requirement lists, validated once per distinct list.

Parsing PEP 508 requirements needs `packaging`'s requirement parser (its markers, specifiers
and tokenizer): a few times more import time than everything else `check` and `run` read of
a profile. The verdict is a pure function of the texts and of `packaging`'s version, so it is
kept by content hash: `~/.cache/envlock/requirements/<sha256>.json` holds, for one list of
texts that the parser accepted, each one's name as written and canonicalised. Only accepted
lists are kept (a refusal is always worded by the parser itself), and the texts are stored
too, so that a hit is a lookup of exactly those bytes.

The file is data written by an earlier envlock of this user, kept and read as usercache.py
says (this user's alone, through the one gate), and used only when its shape and its texts
are exactly what was asked; anything else is a miss, and the parser runs.
"""

from __future__ import annotations

import packaging  # the package only (its version): the parser loads on a miss

from envlock import __version__
from envlock.base.usercache import entry_path as cache_entry
from envlock.base.usercache import read_entry, write_entry

SCHEMA = 1
KIND = "requirements"
Names = list[tuple[str, str]]  # per text: (the name as written, its canonical form)


def entry_key(texts: list[str]) -> list[object]:
    """What a verdict depends on: the texts, the parser's version and envlock's."""
    return [SCHEMA, __version__, packaging.__version__, texts]


def entry_path(texts: list[str]) -> str | None:
    return cache_entry(KIND, entry_key(texts))


def cached_names(texts: list[str]) -> Names | None:
    """The names of `texts` as the parser gave them before, or None (a miss)."""
    if not texts:
        return None
    return names_of(read_entry(KIND, entry_key(texts)), texts)


def names_of(data: object, texts: list[str]) -> Names | None:
    """The entry's names when it is exactly the shape written for `texts`, else None."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or data.get("texts") != texts:
        return None
    names = data.get("names")
    if not isinstance(names, list) or len(names) != len(texts):
        return None
    found: Names = []
    for pair in names:
        if not isinstance(pair, list) or len(pair) != 2:
            return None
        if not all(isinstance(part, str) for part in pair):
            return None
        found.append((pair[0], pair[1]))
    return found


def remember_names(texts: list[str], names: Names) -> None:
    """Keep the parser's verdict on `texts` (accepted, with these names) for next time."""
    if texts:
        data = {"schema": SCHEMA, "texts": texts, "names": [list(pair) for pair in names]}
        write_entry(KIND, entry_key(texts), data)
