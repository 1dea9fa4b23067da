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

# Bytes per element; packed sub-byte types count the byte that holds them.
# Element types narrower than a byte, whose shape counts elements, not bytes.
DTYPE_BITS: dict[str, int] = {"float4_e2m1": 4, "float6_e2m3": 6, "float6_e3m2": 6}
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


@dataclass(frozen=True)
class TensorInfo:
    """What torch would rebuild, described without its data."""

    dtype: str
    shape: tuple[int, ...]
    storage: Storage | None = None
    offset: int = 0
    stride: tuple[int, ...] | None = None
    parameter: bool = False
    subclass: str | None = None

    @property
    def numel(self) -> int:
        return prod(self.shape)

    @property
    def nbytes(self) -> int:
        if self.dtype in DTYPE_BITS:  # packed below a byte: safetensors' F4 and F6
            return (self.numel * DTYPE_BITS[self.dtype] + 7) // 8
        return self.numel * DTYPE_ITEMSIZE.get(self.dtype, 1)

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
