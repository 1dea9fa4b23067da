"""The abstract values scan.py pushes in place of objects, and what hashing them will cost.

A value knows its nesting depth, the work hashing it takes (a tuple hashes every item, again
each time, so shared tuples multiply it) and, as a dict key, its hash: exact for numbers and
tuples of numbers, `None` where the file cannot choose it (strings and bytes are hashed with a
per-process secret; most objects by address), `CHOSEN` where it can but the scan cannot tell.
Keys sharing a hash are compared one by one on every insert: thousands of ints or tuples chosen
to collide make a dict quadratic, so `KeyHashes` counts them and charges the comparisons.
"""

from __future__ import annotations

CHOSEN = -1  # a hash the file may choose but the scan cannot compute (Python never hashes to -1)
_M = 2**61 - 1  # numbers hash modulo this prime: an int smaller than it is its own hash


class Value:
    """What the scan knows of one object."""

    __slots__ = ("depth", "frozen", "hashing", "items", "key", "keys", "size")

    def __init__(
        self, depth: int, hashing: int, size: int, frozen: bool, key: int | None = None
    ) -> None:
        self.depth, self.hashing, self.size, self.frozen = depth, hashing, size, frozen
        self.key = key
        self.items: list[Value] | None = None  # a tuple's, until its key is asked for
        self.keys: dict[int, int] | None = None  # a dict's or set's key hashes, and how often


class _Hash:
    """Stands in for an item when hashing a tuple: Python hashes a tuple from its items' hashes."""

    __slots__ = ("value",)

    def __init__(self, value: int) -> None:
        self.value = value

    def __hash__(self) -> int:
        return self.value


def number(value: float) -> Value:
    # NaN hashes by identity: as a key it collides with nothing.
    return Value(0, 1, 0, True, hash(value) if value == value else None)


LEAF = Value(0, 1, 0, True)  # strings, bytes, globals, storages
EMPTY_TUPLE = Value(1, 1, 0, True, hash(()))
SMALL_INTS = [number(n) for n in range(256)]
NONE = Value(0, 1, 0, True, hash(None))


def tuple_of(items: list[Value], cap: int) -> Value:
    """A tuple of `items`: its hashing work (capped at `cap`), depth and, lazily, its key."""
    hashing, depth, secret = 1, 0, False
    for v in items:
        hashing += v.hashing
        depth = v.depth if v.depth > depth else depth
        secret = secret or (v.key is None and v.items is None)
    made = Value(depth + 1, min(hashing, cap), len(items), True)
    if not secret:  # a tuple holding a string hashes unpredictably: no need to keep its items
        made.items = items
    return made


def key_of(value: Value) -> int | None:
    """The hash `value` will have as a key: exact, None (not the file's choice), or CHOSEN."""
    if value.items is not None:  # a tuple: computed once, from its items' keys
        keys = [key_of(v) for v in value.items]
        if None in keys:
            value.key = None
        elif CHOSEN in keys:
            value.key = CHOSEN
        elif all(-_M < k < _M for k in keys):  # type: ignore[operator]
            value.key = hash(tuple(keys))
        else:
            value.key = hash(tuple(_Hash(k) for k in keys))  # type: ignore[arg-type]
        value.items = None
    return value.key


def collisions(into: Value, keys: list[Value]) -> int:
    """Comparisons inserting `keys` into the dict or set `into` may take, in the worst case."""
    if into.frozen:  # not a dict or set: the unpickler fails on it
        return 0
    seen = into.keys if into.keys is not None else {}
    into.keys = seen
    work = 0
    for v in keys:
        key = key_of(v)
        if key is not None:
            n = seen.get(key, 0)
            work += n * v.hashing
            seen[key] = n + 1
    return work
