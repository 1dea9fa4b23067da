"""The inert objects a checkpoint's pickle becomes: descriptions of tensors and storages,
dtypes, and `Stub`s for every class or function envlock does not know.

None of them can be changed by a pickle's BUILD opcode in a way that runs code or costs work:
the frozen ones refuse `__setstate__`, a `Stub` only records what it was given.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from math import prod
from typing import Any, ClassVar

# Element types narrower than a byte, whose shape counts elements, not bytes: safetensors'
# F4 and F6, and torch's packed quantized types (two or four elements per byte).
DTYPE_BITS: dict[str, int] = {
    "float4_e2m1": 4, "float6_e2m3": 6, "float6_e3m2": 6, "quint4x2": 4, "quint2x4": 2,
}  # fmt: skip
# Bytes per element.
DTYPE_ITEMSIZE: dict[str, int] = {
    **dict.fromkeys(("bool", "uint8", "int8", "qint8", "quint8", "quint4x2", "quint2x4"), 1),
    **dict.fromkeys(("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"), 1),
    **dict.fromkeys(("float8_e8m0fnu", "float4_e2m1fn_x2", "bits8", "bits1x8", "bits2x4"), 1),
    **dict.fromkeys(("bits4x2",), 1),
    **dict.fromkeys(("float16", "bfloat16", "int16", "uint16", "bits16"), 2),
    **dict.fromkeys(("float32", "int32", "uint32", "qint32", "complex32"), 4),
    **dict.fromkeys(("float64", "int64", "uint64", "complex64"), 8),
    "complex128": 16,
}


@dataclass(frozen=True)
class Storage:
    """One storage blob: a zip's `<root>/data/<key>` entry or a safetensors byte span."""

    file: str
    key: str
    dtype: str
    nbytes: int
    location: str = "cpu"

    def __setstate__(self, state: Any) -> None:
        raise pickle.UnpicklingError("the pickle tries to modify a storage")


# torch's sparse layouts (`torch.sparse_coo`, ...), and the names of their stored parts.
SPARSE_PARTS: dict[str, tuple[str, ...]] = {
    "sparse_coo": ("indices", "values"),
    "sparse_csr": ("crow_indices", "col_indices", "values"),
    "sparse_csc": ("ccol_indices", "row_indices", "values"),
    "sparse_bsr": ("crow_indices", "col_indices", "values"),
    "sparse_bsc": ("ccol_indices", "row_indices", "values"),
}
QSCHEMES = (
    "per_tensor_affine", "per_channel_affine", "per_channel_affine_float_qparams",
    "per_tensor_symmetric", "per_channel_symmetric",
)  # fmt: skip


@dataclass(frozen=True)
class TensorInfo:
    """What torch would rebuild, described without its data.

    A plain tensor is a strided view of one storage. A sparse tensor (layout `sparse_coo`,
    `sparse_csr`, ...) or a nested one (`nested`: torch.nested's strided layout; `jagged`) is
    the logical tensor: its values' dtype, its logical shape (None for a dim that varies per
    component) and its stored `parts` (indices, values, offsets ...), which hold its bytes. A
    quantized tensor is strided, with its `qscheme` and, per channel, its scales and zero
    points as parts.
    """

    dtype: str
    shape: tuple[int | None, ...]
    storage: Storage | None = None
    offset: int = 0
    stride: tuple[int, ...] | None = None
    parameter: bool = False
    subclass: str | None = None
    layout: str = "strided"
    qscheme: str | None = None
    parts: tuple[tuple[str, TensorInfo], ...] = ()
    elements: int | None = None  # the element count, where the shape cannot give it (nested)
    # A DTensor (FSDP2, tensor parallel) saved by one rank: this is its local shard, and this
    # says of what ("Shard(dim=0) over 2 ranks: local [2, 3] of global [4, 3]").
    sharding: str | None = None

    @property
    def numel(self) -> int:
        """Elements of the logical tensor, as torch's `numel()` counts them."""
        if self.elements is not None:
            return self.elements
        return prod(d or 0 for d in self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of its data: a strided tensor's elements, and the parts it is stored in."""
        stored = sum(part.nbytes for _, part in self.parts)
        if self.layout != "strided":  # sparse and nested: their parts hold all of it
            return stored
        if self.dtype in DTYPE_BITS:  # packed below a byte: safetensors' F4 and F6, quint4x2
            return (self.numel * DTYPE_BITS[self.dtype] + 7) // 8 + stored
        return self.numel * DTYPE_ITEMSIZE.get(self.dtype, 1) + stored

    @property
    def storages(self) -> tuple[Storage, ...]:
        """The storages its data lies in: its own, and its parts'."""
        own = (self.storage,) if self.storage else ()
        return own + tuple(s for _, part in self.parts for s in part.storages)

    @property
    def alias(self) -> tuple[object, ...]:
        """Equal for two keys that name the very same tensor (tied weights)."""
        where = (self.storage.file, self.storage.key) if self.storage else id(self)
        return (where, self.offset, self.shape, self.stride, self.dtype)

    def __setstate__(self, state: Any) -> None:
        raise pickle.UnpicklingError("the pickle tries to modify a tensor")


@dataclass(frozen=True)
class DType:
    """A `torch.<dtype>` global."""

    name: str

    def __setstate__(self, state: Any) -> None:
        raise pickle.UnpicklingError("the pickle tries to modify a dtype")


@dataclass(frozen=True)
class QScheme:
    """A `torch.<qscheme>` global: how a quantized tensor maps integers to reals."""

    name: str

    def __setstate__(self, state: Any) -> None:
        raise pickle.UnpicklingError("the pickle tries to modify a qscheme")


@dataclass(frozen=True)
class StorageType:
    """A `torch.<X>Storage` global, as named in a storage's persistent id."""

    dtype: str

    def __setstate__(self, state: Any) -> None:
        raise pickle.UnpicklingError("the pickle tries to modify a storage type")


class Stub:
    """An object the pickle asked for that envlock does not know: its name and arguments, inert."""

    module: ClassVar[str] = ""
    qualname: ClassVar[str] = "?"
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    state: Any
    items: dict[Any, Any]
    listitems: list[Any]
    parts: list[Any] | None  # what tree.py presents of it, kept once computed

    def __new__(cls, *args: Any, **kwargs: Any) -> Stub:
        # NEWOBJ calls __new__ without __init__, so everything is recorded here.
        self = object.__new__(cls)
        self.args, self.kwargs, self.state, self.items, self.listitems = args, kwargs, None, {}, []
        self.parts = None
        return self

    def __setstate__(self, state: Any) -> None:
        self.state = state

    def __setitem__(self, key: Any, value: Any) -> None:
        self.items[key] = value

    def append(self, value: Any) -> None:
        self.listitems.append(value)

    def extend(self, values: Any) -> None:
        self.listitems.extend(values)

    def __call__(self, *args: Any, **kwargs: Any) -> Stub:
        return _CallStub(self, *args, **kwargs)

    @classmethod
    def global_name(cls) -> str:
        return f"{cls.module}.{cls.qualname}" if cls.module else cls.qualname

    def fields(self) -> dict[Any, Any] | None:
        """The object's attributes when its state is a dict (or a (dict, slots-dict) pair)."""
        state = self.state
        pair = isinstance(state, tuple) and len(state) == 2 and isinstance(state[1], dict)
        if pair and (state[0] is None or isinstance(state[0], dict)):
            # Merged once: a shared object is reached many times by the walks after the load.
            state = self.state = {**(state[0] or {}), **state[1]}
        return state if isinstance(state, dict) else None

    def __repr__(self) -> str:
        return f"<stub {self.global_name()}>"


class _CallStub(Stub):
    """A stub called like a function (e.g. the result of a stubbed getattr)."""

    qualname = "<call>"


def is_stub_class(obj: object) -> bool:
    return isinstance(obj, type) and issubclass(obj, Stub)
