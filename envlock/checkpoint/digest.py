"""A digest of a whole value from a pickle, for what a budget cuts from a config.

`inspect` and `diff` render a config as JSON within a budget (summary.py); a container past
it, a string past its length, a huge int or a bytes value is shown cut. A cut value alone
would compare equal to any other cut the same way, so it carries the sha256 of the whole
value, computed here as it is read: the same value gives the same digest, and a diff that
compares two cuts compares their digests. What cannot be digested within MAX_DIGEST_NODES
says so, and a diff that meets it is incomplete (exit 3), never "identical".

The walk is bounded by the objects the pickle made (each digested once, by identity: a list
shared a thousand times costs one), so it costs no more than the read that built them, and
it is streamed: beside the tree it holds one list of a dict's keys at most (Digester). A
dict's digest does not depend on its order, as `==` does not.
"""

from __future__ import annotations

import hashlib
import re
import struct
from typing import Any

from envlock.checkpoint.inert import DType, Storage, Stub, TensorInfo, is_stub_class
from envlock.checkpoint.tree import stub_parts

MAX_DIGEST_NODES = 20_000_000  # objects one config's digests may visit (a pickle's budget is 5M)
DIGEST_HEX = 32  # hex digits kept: 128 bits
SHARED_LEAF = 4_096  # a leaf's bytes past which its digest is kept (a string shared 1,000x)

# How a cut value reads: `<cut: list of 150,000 items; sha256:…>`, or why it was not digested.
CUT = re.compile(
    r"^<cut: (?P<what>[^;>]*); (?:sha256:(?P<digest>[0-9a-f]+)|not compared: (?P<why>[^>]*))>$"
)
# A long string keeps its start: `abc…(+140,000 chars; sha256:…)`.
CUT_TEXT = re.compile(r"…\(\+(?P<more>[\d,]+) chars; sha256:(?P<digest>[0-9a-f]+)\)$")


class TooBig(Exception):
    """The value has more objects than MAX_DIGEST_NODES: not digested."""


_LENGTH = struct.Struct("<Q")


class Digester:
    """Digests of values, each object once (by identity), within MAX_DIGEST_NODES in all.

    Streamed: a container's digest is one sha256 fed its children in order, a leaf's bytes
    written into its parent's hash (length-prefixed) rather than hashed apart. A dict is fed
    in the order of its sorted keys when they are all strings (a config: one list of
    references, not a digest per item), else by its items' sorted digests. So digesting
    holds no more than a list of a container's keys beside the tree it reads (a 300,000-key
    config: 2 MB, not 75), and hashes each leaf once.
    """

    def __init__(self, limit: int = MAX_DIGEST_NODES, *, stable: set[int] | None = None) -> None:
        self.left = limit
        self.done: dict[int, bytes] = {}
        self.busy: set[int] = set()  # a cycle reads as a marker, not forever
        # While a pickle is still being read (folding.py), what a fold has digested is dropped
        # and its ids reused: only the ids in `stable` (objects the memo keeps alive) are
        # remembered, and each one digested is `sealed` (a later change to it is refused).
        self.stable = stable
        self.sealed: set[int] = set()
        # Tensors, storages and objects (stubs) met: a fold holds none of them, as the readings
        # that walk them (tensors, DCP's metadata, a pickled module) must find them whole.
        self.objects = 0
        self.stand_ins: dict[int, Any] = {}  # id of a folded container -> what reads as its Fold

    def hex(self, obj: Any) -> str | None:
        try:
            return self.of(obj).hex()[:DIGEST_HEX]
        except (TooBig, RecursionError):  # past the objects or the nesting a walk may take
            return None

    def _step(self) -> None:
        self.left -= 1
        if self.left < 0:
            raise TooBig

    def of(self, obj: Any) -> bytes:
        """The sha256 of `obj`, whole."""
        obj = self._standing_for(obj)
        leaf = self._leaf(obj)
        if leaf is not None and len(leaf) < SHARED_LEAF:  # cheaper to hash than to remember
            self._step()
            return hashlib.sha256(leaf).digest()
        key = id(obj)
        if key in self.done:
            return self.done[key]
        if key in self.busy:
            return b"cycle"
        self._step()
        self.busy.add(key)
        try:
            found = hashlib.sha256(leaf).digest() if leaf is not None else self._node(obj)
        finally:
            self.busy.discard(key)
        if self.stable is None or key in self.stable:  # ids that stay their objects' ids
            self.done[key] = found
            if self.stable is not None:
                self.sealed.add(key)
        return found

    def _standing_for(self, obj: Any) -> Any:
        if self.stand_ins and id(obj) in self.stand_ins:
            if self.stable is not None and id(obj) in self.stable:
                self.sealed.add(id(obj))
            return self.stand_ins[id(obj)]()
        return obj

    def _leaf(self, obj: Any) -> bytes | None:
        self.objects += type(obj) is TensorInfo
        return leaf_bytes(obj)

    def feed(self, digest: Any, obj: Any) -> None:
        """`obj` written into its parent's `digest`: a short leaf as its bytes, anything
        else as its own digest (a long leaf's is kept: it may be shared a thousand times)."""
        # A string, the commonest value of a config: leaf_bytes' bytes, without its walk.
        leaf = b"s" + obj.encode("utf-8", "surrogatepass") if type(obj) is str else None
        if leaf is None:
            obj = self._standing_for(obj)
            leaf = self._leaf(obj)
        if leaf is not None and len(leaf) < SHARED_LEAF:
            self._step()
            digest.update(b"L" + _LENGTH.pack(len(leaf)) + leaf)
        else:
            digest.update(b"N" + self.of(obj))

    def _node(self, obj: Any) -> bytes:
        if isinstance(obj, dict):
            return self._dict(obj)
        digest = hashlib.sha256()
        if isinstance(obj, set | frozenset):
            digest.update(type(obj).__name__.encode())
            for part in sorted(self.of(v) for v in obj):
                digest.update(part)
        elif isinstance(obj, list | tuple):
            digest.update(type(obj).__name__.encode() + _LENGTH.pack(len(obj)))
            for value in obj:
                self.feed(digest, value)
        elif isinstance(obj, Stub):
            self.objects += 1
            digest.update(b"o" + obj.global_name().encode("utf-8", "surrogatepass"))
            for part in stub_parts(obj):
                self.feed(digest, part)
        else:
            self.objects += isinstance(obj, Storage)
            digest.update(b"?" + type(obj).__name__.encode())
        return digest.digest()

    def _dict(self, obj: dict[Any, Any]) -> bytes:
        digest = hashlib.sha256(b"d" + _LENGTH.pack(len(obj)))
        if all(type(k) is str for k in obj):  # distinct strings: sorted, one order for all
            for key in sorted(obj):
                self.feed(digest, key)
                self.feed(digest, obj[key])
            return digest.digest()
        items = []
        for key, value in obj.items():
            item = hashlib.sha256()
            self.feed(item, key)
            self.feed(item, value)
            items.append(item.digest())
        for part in sorted(items):
            digest.update(part)
        return digest.digest()


def leaf_bytes(obj: Any) -> bytes | None:
    """A value that holds no other, as bytes tagged with its type; None for a container."""
    if obj is None or isinstance(obj, bool):
        return repr(obj).encode()
    if isinstance(obj, int):
        return b"i" + str(obj).encode() if obj.bit_length() < 4096 else b"I" + _int_bytes(obj)
    if isinstance(obj, float):
        return b"f" + struct.pack("<d", obj)
    if isinstance(obj, complex):
        return b"c" + struct.pack("<dd", obj.real, obj.imag)
    if isinstance(obj, str):
        return b"s" + obj.encode("utf-8", "surrogatepass")
    if isinstance(obj, bytes | bytearray):
        return b"b" + bytes(obj)
    return _object_bytes(obj)


def _object_bytes(obj: Any) -> bytes | None:
    """The leaves that are envlock's own objects: a tensor's description, a dtype, a global,
    a folded container (by its digest)."""
    if isinstance(obj, TensorInfo):
        return f"t{obj.dtype}{list(obj.shape)}{obj.layout}{obj.qscheme}".encode()
    if isinstance(obj, DType):
        return b"D" + obj.name.encode()
    if is_stub_class(obj):
        return b"g" + obj.global_name().encode("utf-8", "surrogatepass")
    if isinstance(obj, Folded):
        return b"F" + obj.digest
    return None


class Folded:
    """What a folded container reads as (fold.py's Fold): a value by its digest."""

    digest: bytes


def _int_bytes(value: int) -> bytes:
    # str() of a huge int is quadratic (and refused past 4300 digits): its bytes instead.
    return value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)


def cut(what: str, digest: str | None) -> str:
    """How a value cut by a budget reads: what it was, and its digest (or why none)."""
    what = what.replace(";", ",").replace(">", "›")  # a key's text cannot end the marker
    if digest is None:
        return f"<cut: {what}; not compared: past {MAX_DIGEST_NODES:,} objects or too deep>"
    return f"<cut: {what}; sha256:{digest}>"


def cut_digest(value: Any) -> tuple[bool, bool]:
    """Whether `value` is a cut value, and whether it carries a digest (compared by it)."""
    if not isinstance(value, str) or not value.endswith((">", ")")):
        return False, False
    found = CUT.match(value)
    if found:
        return True, found.group("digest") is not None
    return (True, True) if CUT_TEXT.search(value) else (False, False)
