"""Navigating a checkpoint's inert object tree (dicts, lists, tuples and stubs of the
restricted unpickler), and the walk that finds its tensors under shared references."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import chain
from typing import Any

from envlock.base.limits import MAX_TEXT, MAX_WALK, WALK_PER_BYTE, Refused, brief
from envlock.checkpoint.inert import Stub, TensorInfo

_MAX_DEPTH = 64  # key path components: deeper tensors are not listed


def is_container(obj: Any) -> bool:
    # Concrete types, not collections.abc: this runs once per object of the pickle.
    return isinstance(obj, dict | list | tuple | Stub)


def pairs(obj: Any) -> Iterable[tuple[Any, Any]]:
    """(key, value) pairs under a container, keys as the pickle has them; none under a leaf."""
    if isinstance(obj, dict):
        return obj.items()
    if isinstance(obj, list | tuple):
        return enumerate(obj)
    if isinstance(obj, Stub):
        return chain.from_iterable(pairs(part) for part in stub_parts(obj))
    return ()


def is_optimizer(obj: Any) -> bool:
    return isinstance(obj, dict) and "state" in obj and "param_groups" in obj


def children(obj: Any) -> Iterator[tuple[str, Any]]:
    return ((key_text(k), v) for k, v in pairs(obj))


def key_text(key: Any) -> str:
    """A key of the pickle as a path component: bounded, whatever object the key is."""
    if type(key) is str:
        return key if len(key) <= MAX_TEXT else f"{key[:MAX_TEXT]}…(+{len(key) - MAX_TEXT:,} chars)"
    if type(key) is int and key.bit_length() <= 64:
        return str(key)
    return brief(key, 100)  # never str(): a tuple key's repr can be exponential


def stub_parts(obj: Stub) -> list[Any]:
    if obj.parts is None:  # built once: a shared object is reached many times
        obj.parts = _stub_parts(obj)
    return obj.parts


def _stub_parts(obj: Stub) -> list[Any]:
    fields = obj.fields()
    if fields is not None and "_parameters" in fields and "_modules" in fields:
        # An nn.Module pickled whole: present it the way its state_dict would be keyed.
        parts = [fields.get(n) for n in ("_parameters", "_buffers", "_modules")]
        return [p for p in parts if isinstance(p, dict)]
    state = fields if fields is not None else {} if obj.state is None else {"state": obj.state}
    return [state, obj.items, obj.listitems, {f"arg{i}": v for i, v in enumerate(obj.args)}]


def child_count(obj: Any) -> int:
    if isinstance(obj, Stub):
        return sum(len(part) for part in stub_parts(obj))
    return len(obj) if is_container(obj) else 0


@dataclass(frozen=True)
class TensorEntry:
    """One tensor reached by `path` (`key` when dotted), inside top-level section `section`."""

    path: tuple[str, ...]
    key: str
    section: str
    prefix: str
    info: TensorInfo
    optimizer: bool


# --- walking the inert tree -------------------------------------------------------------------


class _Guard:
    """Shared references can make a small pickle a huge tree: the walk refuses to inflate.

    It may visit objects and produce key characters in proportion to the bytes read.
    """

    def __init__(self, allowance: int) -> None:
        self.left = self.limit = MAX_WALK + WALK_PER_BYTE * allowance
        self.tensorless: set[int] = set()  # containers already walked that hold no tensor
        self.tensor_ids: set[int] = set()

    def spend(self, amount: int) -> None:
        self.left -= amount
        if self.left < 0:
            raise Refused(
                "walking the objects and key paths the pickle's shared references repeat",
                f"{self.limit:,} steps ({MAX_WALK:,} + {WALK_PER_BYTE} per byte read)",
            )

    def tensor(self, info: TensorInfo, path: list[str], keys: int) -> None:
        self.tensor_ids.add(id(info))
        self.spend(sum(len(p) + 1 for p in path))  # the dotted key that will be built
        if keys > 100_000 and keys > 16 * len(self.tensor_ids):  # tied weights: 2 keys, not 16
            raise Refused(
                f"{keys:,} tensor keys naming {len(self.tensor_ids):,} tensors through "
                "shared references",
                "16 keys per tensor",
            )


def _walk(
    obj: Any, path: list[str], optim: bool, ancestors: set[int], guard: _Guard, out: list
) -> None:
    # Plain recursion over one shared path list: this runs once per object of the pickle.
    ancestors.add(id(obj))
    optim = optim or is_optimizer(obj)
    found = len(out)
    for key, value in pairs(obj):
        guard.left -= 1
        if guard.left < 0:
            guard.spend(0)  # raises
        if isinstance(value, TensorInfo):
            path.append(key_text(key))
            guard.tensor(value, path, len(out) + 1)
            out.append((tuple(path), value, optim))
            path.pop()
        elif is_container(value) and id(value) not in ancestors:
            if id(value) in guard.tensorless:
                continue
            path.append(key_text(key))
            if len(path) <= _MAX_DEPTH:
                _walk(value, path, optim, ancestors, guard, out)
            path.pop()
    if len(out) == found:  # shared again later (e.g. a loss history): skip it in O(1)
        guard.tensorless.add(id(obj))
    ancestors.discard(id(obj))


def entries(root: Any, allowance: int = 0) -> Iterator[TensorEntry]:
    """The tensors under `root`; walking them may cost in proportion to `allowance` bytes."""
    by_key = isinstance(root, dict)  # a dict checkpoint: one section per top-level key
    found: list[tuple[tuple[str, ...], TensorInfo, bool]] = [((), root, False)]
    if not isinstance(root, TensorInfo):
        found.clear()
        _walk(root, [], False, set(), _Guard(allowance), found)
    for path, info, optim in found:
        if len(path) <= 1 or not by_key:  # tensors straight under the root share section ""
            section, rest = "", path
        else:
            section, rest = path[0], path[1:]
        prefix = rest[0].split(".")[0] if rest else ""
        yield TensorEntry(path, ".".join(path), section, prefix, info, optim)
