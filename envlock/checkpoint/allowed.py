"""The few callables a checkpoint's pickle may really call, each checking what it is given.

Tensor rebuilds become `TensorInfo` descriptions; containers, bytes and devices are built from
plain values only. Whatever work a call does on its arguments (hashing them into a set, copying
bytes) is charged to the load's `Work`, since one shared argument can be handed to a call
thousands of times; scan.py has already charged what the C unpickler itself does.
"""

from __future__ import annotations

import collections
import pickle
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

from envlock.base.limits import (
    EXPANSION_PER_BYTE,
    MAX_DIM,
    MAX_DIMS,
    MAX_EXPANSION,
    Refused,
    brief,
    check_dims,
    check_numel,
)
from envlock.checkpoint.inert import (
    SPARSE_PARTS,
    DType,
    QScheme,
    Storage,
    Stub,
    TensorInfo,
    is_stub_class,
)

_MAX_DEVICE = 64  # characters in a device or layout name ("cuda", "cpu", "torch.strided")
_MAX_REBUILD_ARGS = 16  # a tensor subclass's rebuild arguments (torch passes about 7)


class Work:
    """What calls during one load may spend on their arguments (hashing, copying)."""

    def __init__(self, pickle_bytes: int) -> None:
        self.limit = MAX_EXPANSION + EXPANSION_PER_BYTE * pickle_bytes
        self.spent = 0
        self._hashing: dict[int, tuple[tuple[Any, ...], int]] = {}

    def spend(self, amount: int) -> None:
        self.spent += amount
        if self.spent > self.limit:
            raise Refused(
                "the work of hashing and copying what the pickle's calls are given (repeated "
                "by shared references or colliding hashes)",
                f"{self.limit:,} steps ({MAX_EXPANSION:,} + {EXPANSION_PER_BYTE} per byte)",
            )

    def hash_all(self, items: Any) -> list[Any]:
        """`items` as a list, once its elements' hashing has been paid for."""
        if not isinstance(items, list | tuple | set | frozenset | dict):
            raise pickle.UnpicklingError(f"expected a list of items, got {brief(items)}")
        self.spend(len(items))  # before looking at them: the same list may come many times
        values = list(items)
        self.spend(sum(self._cost(v) for v in values))
        hashes: dict[int, int] = {}
        for v in values:  # their hashing is paid for: now the comparisons of equal hashes
            if not isinstance(v, str | bytes):  # those hash with a per-process secret
                n = hashes.get(hash(v), 0)
                self.spend(n * self._cost(v))
                hashes[hash(v)] = n + 1
        return values

    def _cost(self, obj: Any) -> int:
        # Hashing a tuple hashes its items, each time: memoized per tuple (kept alive here, so
        # its id stays its own). scan.py bounds tuple nesting, so this recursion is shallow.
        if type(obj) is not tuple:
            return 1
        known = self._hashing.get(id(obj))
        if known is None:
            known = (obj, 1 + sum(self._cost(v) for v in obj))
            self._hashing[id(obj)] = known
        return known[1]


class OrderedDict(collections.OrderedDict[Any, Any]):
    """torch's state dicts; their `_metadata` (module versions) is not needed and not kept."""

    def __setstate__(self, state: Any) -> None:
        pass  # BUILD would otherwise hash every key of a (shared) state into __dict__ again


def _ordered_dict(work: Work, pairs: Any = ()) -> OrderedDict:
    made = OrderedDict()
    for pair in work.hash_all(pairs):
        if type(pair) is not tuple or len(pair) != 2:
            raise pickle.UnpicklingError(f"OrderedDict from {brief(pair)}, not (key, value)")
        made[pair[0]] = pair[1]
    return made


def _set(work: Work, items: Any = ()) -> set[Any]:
    return set(work.hash_all(items))


def _frozenset(work: Work, items: Any = ()) -> frozenset[Any]:
    return frozenset(work.hash_all(items))


def _encode(work: Work, text: Any, encoding: Any = "utf-8") -> bytes:
    # Protocol 2 pickles bytes as _codecs.encode(str, "latin1").
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1", "utf-8", "utf8"):
        raise pickle.UnpicklingError("unexpected _codecs.encode call")
    work.spend(len(text))
    return text.encode(encoding)


def _bytearray(work: Work, data: Any = b"") -> bytearray:
    if not isinstance(data, bytes | str):
        raise pickle.UnpicklingError("bytearray from something other than bytes")
    work.spend(len(data))
    return bytearray(data.encode("latin1") if isinstance(data, str) else data)


def _complex(work: Work, real: Any = 0, imag: Any = 0) -> complex:
    for part in (real, imag):
        if not isinstance(part, int | float | str):
            raise pickle.UnpicklingError(f"complex from {brief(part)}")
        work.spend(len(part) if isinstance(part, str) else 1)
    return complex(real) if isinstance(real, str) else complex(real, imag)


def _slice(*args: Any) -> slice:
    # A slice hashes its parts (Python >= 3.12): plain ints only, or a key could hide a tuple.
    if len(args) > 3 or any(a is not None and type(a) is not int for a in args):
        raise pickle.UnpicklingError(f"slice of {brief(args)}")
    return slice(*args)


def _name(value: Any, what: str) -> str:
    if not isinstance(value, str) or len(value) > _MAX_DEVICE:
        raise pickle.UnpicklingError(f"a {what} named {brief(value)}")
    return value


def _device(kind: Any, index: Any = None) -> str:
    kind = _name(kind, "device")
    if index is None:
        return kind
    if type(index) is not int or not 0 <= index < 2**31:
        raise pickle.UnpicklingError(f"device index {brief(index)}")
    return f"{kind}:{index}"


def ints(value: Any, what: str) -> tuple[int, ...]:
    """A tensor's size or stride: a tuple (or list) of at most 64 int64 values."""
    if type(value) is not tuple and type(value) is not list:
        raise pickle.UnpicklingError(f"a tensor's {what} is {brief(value)}, not a tuple of ints")
    if len(value) > MAX_DIMS:
        check_dims(tuple(value[: MAX_DIMS + 1]), what)  # raises, without copying them all
    if any(type(v) is not int for v in value):
        raise pickle.UnpicklingError(f"a tensor's {what} {brief(value)} holds a non-int")
    return check_dims(tuple(value), what)


def _tensor(storage: Any, offset: Any, size: Any, stride: Any, dtype: Any) -> TensorInfo:
    if not isinstance(storage, Storage):
        raise pickle.UnpicklingError(f"a tensor is rebuilt from {brief(storage)}, not a storage")
    if type(offset) is not int or not 0 <= offset <= MAX_DIM:
        raise pickle.UnpicklingError(f"a tensor's storage offset is {brief(offset)}")
    shape, strides = ints(size, "shape"), ints(stride, "stride")
    check_numel(shape)
    name = dtype.name if isinstance(dtype, DType) else storage.dtype
    return TensorInfo(name, shape, storage, offset, strides)


def _rebuild_tensor(storage: Any, offset: Any, size: Any, stride: Any, *_: Any) -> TensorInfo:
    return _tensor(storage, offset, size, stride, None)


def _rebuild_tensor_v3(
    storage: Any, offset: Any, size: Any, stride: Any, _rg: Any, _hooks: Any, dtype: Any, *_: Any
) -> TensorInfo:
    return _tensor(storage, offset, size, stride, dtype)


def _rebuild_parameter(data: Any, *_: Any) -> Any:
    return replace(data, parameter=True) if isinstance(data, TensorInfo) else data


def _rebuild_meta(dtype: Any, size: Any, stride: Any, *_: Any) -> TensorInfo:
    shape = ints(size, "shape")
    check_numel(shape)
    return TensorInfo(dtype.name if isinstance(dtype, DType) else "?", shape, None, 0)


def _rebuild_wrapper_subclass(cls: Any, dtype: Any, size: Any, *_: Any) -> TensorInfo:
    meta = _rebuild_meta(dtype, size, None)
    return replace(meta, subclass=cls.global_name() if is_stub_class(cls) else None)


# --- tensors of other kinds: one logical tensor, described with the parts it is stored in ---


def _part(value: Any, what: str) -> TensorInfo:
    # torch rebuilds each part as a plain strided tensor: anything else is no part of torch's.
    plain = isinstance(value, TensorInfo) and value.layout == "strided" and not value.qscheme
    if not plain or value.parts:
        raise pickle.UnpicklingError(f"a tensor's {what} is {brief(value)}, not a plain tensor")
    return value


def _rebuild_qtensor(
    storage: Any, offset: Any, size: Any, stride: Any, qparams: Any, *_: Any
) -> TensorInfo:
    # qparams: (per_tensor_affine, scale, zero_point) or (per_channel_*, scales, zero_points,
    # axis), the scales and zero points tensors (or, from older torch, lists of numbers).
    tensor = _tensor(storage, offset, size, stride, None)
    if type(qparams) is not tuple or not qparams or not isinstance(qparams[0], QScheme):
        raise pickle.UnpicklingError(f"a quantized tensor's parameters are {brief(qparams)}")
    scheme = qparams[0].name
    parts: tuple[tuple[str, TensorInfo], ...] = ()
    if scheme.startswith("per_channel"):
        if len(qparams) != 4 or type(qparams[3]) is not int or not 0 <= qparams[3] < len(size):
            raise pickle.UnpicklingError(f"per-channel parameters {brief(qparams)}")
        named = (("scales", qparams[1]), ("zero_points", qparams[2]))
        parts = tuple((n, _part(v, n)) for n, v in named if not isinstance(v, list))
    return replace(tensor, qscheme=scheme, parts=parts)


def _rebuild_sparse_tensor(layout: Any, data: Any) -> TensorInfo:
    # (indices, values, size[, is_coalesced]) for COO; (compressed indices, plain indices,
    # values, size) for CSR, CSC, BSR and BSC.
    name = layout.removeprefix("torch.") if isinstance(layout, str) else None
    if name not in SPARSE_PARTS or type(data) is not tuple:
        raise pickle.UnpicklingError(f"a sparse tensor of layout {brief(layout)}")
    names = SPARSE_PARTS[name]
    if len(data) != len(names) + 1 and not (name == "sparse_coo" and len(data) == 4):
        raise pickle.UnpicklingError(f"a {name} tensor rebuilt from {brief(data)}")
    parts = tuple((n, _part(v, n)) for n, v in zip(names, data, strict=False))
    shape = ints(data[len(names)], "shape")
    check_numel(shape)
    return TensorInfo(parts[-1][1].dtype, shape, layout=name, parts=parts)


def _rebuild_nested_tensor(buffer: Any, sizes: Any, strides: Any, offsets: Any) -> TensorInfo:
    # torch.nested's strided layout: every component's values in one buffer, and int64 tensors
    # of the components' sizes [n, dims], strides and offsets. The sizes are tensor data, which
    # is never read: the components' dims are shown as varying (None).
    named = (("buffer", buffer), ("sizes", sizes), ("strides", strides), ("offsets", offsets))
    parts = tuple((n, _part(v, n)) for n, v in named)
    dims = parts[1][1].shape
    inner = (dims[1] or 0) if len(dims) == 2 else 0
    if len(dims) not in (1, 2) or inner > MAX_DIMS:
        raise pickle.UnpicklingError(f"a nested tensor's sizes have shape {brief(dims)}")
    shape = (dims[0], *[None] * inner)
    values = parts[0][1]
    return TensorInfo(values.dtype, shape, layout="nested", parts=parts, elements=values.numel)


def _rebuild_njt(kwargs: Any) -> TensorInfo:
    # torch.nested's jagged layout (NestedTensor(**kwargs)): values [sum of lengths, ...]
    # and offsets [batch + 1], the ragged dim at _ragged_idx.
    if not isinstance(kwargs, dict):
        raise pickle.UnpicklingError(f"a jagged nested tensor from {brief(kwargs)}")
    values, offsets = _part(kwargs.get("values"), "values"), _part(kwargs.get("offsets"), "offsets")
    parts = [("values", values), ("offsets", offsets)]
    if kwargs.get("lengths") is not None:
        parts.append(("lengths", _part(kwargs["lengths"], "lengths")))
    ragged = kwargs.get("_ragged_idx", 1)
    if type(ragged) is not int or not 1 <= ragged <= len(values.shape) or len(offsets.shape) != 1:
        raise pickle.UnpicklingError(f"a jagged nested tensor ragged at {brief(ragged)}")
    batch = max(0, (offsets.shape[0] or 0) - 1)
    inner = list(values.shape)
    inner[ragged - 1] = None
    return TensorInfo(
        values.dtype, (batch, *inner), layout="jagged", parts=tuple(parts), elements=values.numel
    )


def _rebuild_from_type(func: Any, new_type: Any, args: Any, *rest: Any) -> Any:
    if not (isinstance(func, Safe) or is_stub_class(func)) or type(args) is not tuple:
        raise pickle.UnpicklingError(f"unexpected tensor subclass rebuild {brief(func)}")
    if len(args) > _MAX_REBUILD_ARGS:  # the call copies them: a shared tuple, every time
        raise pickle.UnpicklingError(f"a tensor subclass rebuilt from {len(args):,} arguments")
    made = func(*args)
    if isinstance(made, TensorInfo) and is_stub_class(new_type):
        name = new_type.global_name()
        if name not in ("torch.Tensor", "torch._tensor.Tensor"):
            made = replace(made, subclass=name)
            made = _local_shard(made, rest[0] if rest else None) or made
    return made


def _local_shard(dtensor: TensorInfo, state: Any) -> TensorInfo | None:
    """A DTensor's rebuild describes its global shape with no data; its state holds the local
    shard this rank saved (`_local_tensor`) and how the whole is split (`_spec`): described
    as that shard, saying of what."""
    if isinstance(state, tuple) and len(state) == 2 and isinstance(state[1], dict):
        state = {**(state[0] if isinstance(state[0], dict) else {}), **state[1]}  # (dict, slots)
    if not (dtensor.subclass or "").endswith(".DTensor") or not isinstance(state, dict):
        return None
    local = state.get("_local_tensor")
    if not isinstance(local, TensorInfo):
        return None
    spec = state.get("_spec")
    fields = (spec.fields() if isinstance(spec, Stub) else None) or {}
    placements = fields.get("placements")
    shown = ", ".join(_placement(p) for p in placements) if isinstance(placements, tuple) else "?"
    ranks = _mesh_size(fields.get("mesh"))
    over = f"{ranks} rank(s)" if ranks else "a mesh"
    local_shape = ", ".join(str(d) for d in local.shape)
    global_shape = ", ".join(str(d) for d in dtensor.shape)
    text = f"{shown} over {over}: local [{local_shape}] of global [{global_shape}]"
    return replace(local, subclass=dtensor.subclass, sharding=text)


def _placement(placement: Any) -> str:
    if not isinstance(placement, Stub):
        return "?"
    name = type(placement).qualname
    dim = (placement.fields() or {}).get("dim")
    return f"{name}(dim={dim})" if type(dim) is int else f"{name}()"


def _mesh_size(mesh: Any) -> int | None:
    """The ranks of a DeviceMesh: its `_rank_map` (torch ≥ 2.10) or `mesh` tensor's size."""
    fields = (mesh.fields() if isinstance(mesh, Stub) else None) or {}
    for name in ("_rank_map", "mesh"):
        ranks = fields.get(name)
        if isinstance(ranks, TensorInfo):
            return ranks.numel
    return None


def _reconstructor(cls: Any, *_: Any) -> Any:
    # copyreg._reconstructor(cls, base, state): build the stub without calling anything.
    return cls() if is_stub_class(cls) else Stub(cls)


# Callables that spend from the load's Work: find_class binds it.
_CHARGED: dict[tuple[str, str], Callable[..., Any]] = {
    ("collections", "OrderedDict"): _ordered_dict,
    ("builtins", "set"): _set,
    ("builtins", "frozenset"): _frozenset,
    ("builtins", "complex"): _complex,
    ("builtins", "bytearray"): _bytearray,
    ("_codecs", "encode"): _encode,
}
_FREE: dict[tuple[str, str], Callable[..., Any]] = {
    ("collections", "defaultdict"): lambda *_: {},
    ("builtins", "slice"): _slice,
    ("copyreg", "_reconstructor"): _reconstructor,
    ("torch", "Size"): lambda dims=(): ints(dims, "shape"),
    ("torch", "device"): _device,
    ("torch.serialization", "_get_layout"): lambda name: _name(name, "layout"),
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor_v3"): _rebuild_tensor_v3,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    ("torch._utils", "_rebuild_meta_tensor_no_storage"): _rebuild_meta,
    ("torch._utils", "_rebuild_wrapper_subclass"): _rebuild_wrapper_subclass,
    ("torch._utils", "_rebuild_qtensor"): _rebuild_qtensor,
    ("torch._utils", "_rebuild_sparse_tensor"): _rebuild_sparse_tensor,
    ("torch._utils", "_rebuild_nested_tensor"): _rebuild_nested_tensor,
    ("torch.nested._internal.nested_tensor", "_rebuild_njt"): _rebuild_njt,
    ("torch._tensor", "_rebuild_from_type"): _rebuild_from_type,
    ("torch._tensor", "_rebuild_from_type_v2"): _rebuild_from_type,
}


def allowed(module: str, name: str, work: Work) -> Safe | None:
    """The allow-listed callable `module.name`, bound to `work`, or None."""
    if (module, name) in _CHARGED:
        return Safe(partial(_CHARGED[(module, name)], work))
    if (module, name) in _FREE:
        return Safe(_FREE[(module, name)])
    return None


class Safe:
    """One allow-listed callable, handed out fresh so a pickle's BUILD cannot alter the original."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __setstate__(self, state: Any) -> None:
        raise pickle.UnpicklingError("the pickle tries to modify a function")
