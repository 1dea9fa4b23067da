"""A big container of a config, folded into digests as it is read: memory that does not grow
with the config.

A dict or list of more than FOLD_AT items of plain data (no tensor, no object) is not kept
by the reader (folding.py): each item, as it arrives, is fed into a `Folder` (a dict's into
one of BUCKETS digests chosen by its key, a list's into one digest per CHUNK elements) and
dropped. What remains is a `Fold`: the type, the count, the digests, their sha256, and how to
read the pickle again. Two folds with one digest hold equal values (the digests are
collision-resistant and cover every item in the order it was read); where they differ, the
differing digests say where to look, and `entries` reads only those items of the pickle
again, so a diff names the keys or indices that changed (`param_17: a → b`) at any size.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from itertools import zip_longest
from typing import Any

from envlock.checkpoint.digest import DIGEST_HEX, Digester, Folded, cut, leaf_bytes

FOLD_AT = 10_000  # items past which a container of plain data is folded (base/flat.FLAT_KEYS)
BUCKETS = 1_024  # a folded dict's digests, its items spread among them by key
CHUNK = 1_024  # a folded list's elements per digest
MAX_LOOKED = 32  # differing digests whose entries a diff reads again, per value
MAX_KEPT = 200_000  # entries one reading again keeps, in all
_LENGTH = struct.Struct("<Q")
_NOTHING = hashlib.sha256().digest()

# How a fold is read again: the pickle read once more, keeping the entries of the given parts
# of its `ordinal`th fold; that fold's Folder, or None if the pickle changed or cannot be read.
Reread = Callable[[int, set[int]], "Folder | None"]


@dataclass(eq=False)
class Fold(Folded):
    """A folded dict or list: what it was, how many items, and the digests of its parts."""

    kind: str  # the container's type name, as a cut value says it (`dict`, `list`)
    is_dict: bool
    count: int
    parts: tuple[bytes, ...]  # one per bucket (dict) or chunk (list)
    digest: bytes
    ordinal: int  # the how-manieth fold of its pickle: the same on every reading of it
    reread: Reread | None = field(default=None, repr=False)

    @property
    def hex(self) -> str:
        return self.digest.hex()[:DIGEST_HEX]

    def text(self) -> str:
        """The value as inspect and diff show it: a cut value with its digest (digest.py)."""
        return cut(f"{self.kind} of {self.count:,} items", self.hex)


class Folder:
    """One container's items fed in as they are read; `fold()` at any point says the whole."""

    def __init__(self, container: Any, digester: Digester, ordinal: int, keep: set[int]) -> None:
        self.kind, self.is_dict = type(container).__name__, isinstance(container, dict)
        self.digester, self.ordinal, self.count = digester, ordinal, 0
        self.buckets: list[Any] = [None] * BUCKETS if self.is_dict else []
        self.chunk = hashlib.sha256()
        self.keep = keep  # the parts whose entries are kept (a diff reading again)
        self.kept: list[tuple[int, Any, Any]] = []  # (part, key or index, value)
        self.kept_all = True  # False: past MAX_KEPT, some entries of the kept parts were not
        self._fold: Fold | None = None
        # Reading again the very bytes read before (archive.py checks), only the kept parts'
        # entries are wanted: the others are counted, not hashed (set once the fold is made).
        self.only_kept = False

    def add(self, key: Any, value: Any) -> None:
        """One item of a dict."""
        named = b"s" + key.encode("utf-8", "surrogatepass") if type(key) is str else leaf_bytes(key)
        if named is None:  # a tuple key: by its digest
            named = b"N" + self.digester.of(key)
        part = zlib.crc32(named) % BUCKETS
        if self.only_kept:
            self._count(part, key, value)
            return
        bucket = self.buckets[part]
        if bucket is None:
            bucket = self.buckets[part] = hashlib.sha256()
        bucket.update(_LENGTH.pack(len(named)) + named)
        self.digester.feed(bucket, value)
        self._count(part, key, value)

    def append(self, value: Any) -> None:
        """One element of a list."""
        part = self.count // CHUNK
        if self.only_kept:
            self._count(part, self.count, value)
            return
        self.digester.feed(self.chunk, value)
        self._count(part, self.count, value)
        if self.count % CHUNK == 0:
            self.buckets.append(self.chunk.digest())
            self.chunk = hashlib.sha256()

    def _count(self, part: int, key: Any, value: Any) -> None:
        self.count += 1
        self._fold = None
        if part in self.keep:
            if len(self.kept) < MAX_KEPT:
                self.kept.append((part, key, value))
            else:
                self.kept_all = False

    def fold(self) -> Fold:
        if self._fold is None:
            if self.is_dict:
                parts = tuple(_NOTHING if b is None else b.digest() for b in self.buckets)
            else:
                tail = (self.chunk.digest(),) if self.count % CHUNK else ()
                parts = (*self.buckets, *tail)
            whole = hashlib.sha256(b"fold" + self.kind.encode() + _LENGTH.pack(self.count))
            whole.update(b"".join(parts))
            self._fold = Fold(
                self.kind, self.is_dict, self.count, parts, whole.digest(), self.ordinal
            )
        return self._fold


# -- the folds one command met, for its diff to read again ------------------------------------
_SEEN: ContextVar[dict[str, Fold] | None] = ContextVar("envlock_folds", default=None)


@contextmanager
def remembered() -> Iterator[dict[str, Fold]]:
    """The folds made while this is open, by their digest's hex (diff: each side's)."""
    seen: dict[str, Fold] = {}
    token = _SEEN.set(seen)
    try:
        yield seen
    finally:
        _SEEN.reset(token)


def remember(fold: Fold) -> None:
    seen = _SEEN.get()
    if seen is not None:
        seen.setdefault(fold.hex, fold)


def differing_parts(a: Fold, b: Fold) -> list[int]:
    """The buckets (dict) or chunks (list) whose digests differ between two folds."""
    return [i for i, (x, y) in enumerate(zip_longest(a.parts, b.parts)) if x != y]


def entries(fold: Fold, parts: set[int]) -> list[tuple[Any, Any]] | None:
    """The (key or index, value) entries of `parts` of `fold`, read again from its pickle;
    None if it cannot be read again, or its bytes changed since the first reading."""
    folder = fold.reread(fold.ordinal, parts) if fold.reread is not None else None
    if folder is None or not folder.kept_all:  # a part of it missing would read as removed
        return None
    return [(key, value) for _, key, value in folder.kept]
