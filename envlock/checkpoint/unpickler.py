"""Read torch's zip checkpoints without torch: a restricted unpickler that executes nothing.

Every global the pickle names resolves either to a small allow-list of harmless callables (tensor
rebuilds become `TensorInfo` descriptions, storages become `Storage` records sized from the zip's
central directory) or to an inert `Stub` class that only records its name, arguments and state.
Only `<root>/data.pkl` is read; tensor data is never touched.
"""

from __future__ import annotations

import _compat_pickle
import collections
import io
import pickle
import pickletools
import zipfile
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace
from math import prod
from pathlib import Path
from typing import IO, Any, ClassVar

from envlock.errors import OperationError, UsageError

# Bytes per element; packed sub-byte types count the byte that holds them.
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
_DTYPE_ALIASES = {
    "float": "float32", "double": "float64", "half": "float16", "cfloat": "complex64",
    "cdouble": "complex128", "chalf": "complex32", "short": "int16", "int": "int32",
    "long": "int64",
}  # fmt: skip
_STORAGE_DTYPES = {
    "FloatStorage": "float32", "DoubleStorage": "float64", "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16", "LongStorage": "int64", "IntStorage": "int32",
    "ShortStorage": "int16", "CharStorage": "int8", "ByteStorage": "uint8", "BoolStorage": "bool",
    "ComplexFloatStorage": "complex64", "ComplexDoubleStorage": "complex128",
    "QInt8Storage": "qint8", "QUInt8Storage": "quint8", "QInt32Storage": "qint32",
    "QUInt4x2Storage": "quint4x2", "QUInt2x4Storage": "quint2x4", "UntypedStorage": "uint8",
}  # fmt: skip
# Modules whose globals in a checkpoint mean someone tried to run code on load.
SUSPICIOUS_MODULES = (
    "os", "posix", "nt", "subprocess", "sys", "shutil", "socket", "importlib", "runpy", "pty",
    "webbrowser", "code", "ctypes", "pickle", "marshal", "types", "operator", "functools",
)  # fmt: skip
SUSPICIOUS_BUILTINS = ("eval", "exec", "compile", "open", "getattr", "__import__", "setattr")
LEGACY_MAGIC = b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19."


@dataclass(frozen=True)
class Storage:
    """One storage blob: a zip's `<root>/data/<key>` entry or a safetensors byte span."""

    file: str
    key: str
    dtype: str
    nbytes: int
    location: str = "cpu"


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
        return self.numel * DTYPE_ITEMSIZE.get(self.dtype, 1)

    @property
    def alias(self) -> tuple[object, ...]:
        """Equal for two keys that name the very same tensor (tied weights)."""
        where = (self.storage.file, self.storage.key) if self.storage else id(self)
        return (where, self.offset, self.shape, self.stride, self.dtype)


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

    def __new__(cls, *args: Any, **kwargs: Any) -> Stub:
        # NEWOBJ calls __new__ without __init__, so everything is recorded here.
        self = object.__new__(cls)
        self.args, self.kwargs, self.state, self.items, self.listitems = args, kwargs, None, {}, []
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
            state = {**(state[0] or {}), **state[1]}
        return state if isinstance(state, dict) else None

    def __repr__(self) -> str:
        return f"<stub {self.global_name()}>"


class _CallStub(Stub):
    """A stub called like a function (e.g. the result of a stubbed getattr)."""

    qualname = "<call>"


def is_stub_class(obj: object) -> bool:
    return isinstance(obj, type) and issubclass(obj, Stub)


def _tensor(storage: Any, offset: Any, size: Any, stride: Any, dtype: Any) -> TensorInfo:
    if not isinstance(storage, Storage):
        raise pickle.UnpicklingError(f"a tensor is rebuilt from {storage!r}, not a storage")
    shape, strides = _ints(size), _ints(stride)
    name = dtype.name if isinstance(dtype, DType) else storage.dtype
    return TensorInfo(name, shape, storage, int(offset), strides)


def _ints(value: Any) -> tuple[int, ...]:
    if type(value) is not tuple:
        value = tuple(value) if isinstance(value, list) else None
    if value is None or any(type(v) is not int for v in value):
        raise pickle.UnpicklingError("a tensor's size or stride is not a tuple of ints")
    return value


def _rebuild_tensor(storage: Any, offset: Any, size: Any, stride: Any, *_: Any) -> TensorInfo:
    return _tensor(storage, offset, size, stride, None)


def _rebuild_tensor_v3(
    storage: Any, offset: Any, size: Any, stride: Any, _rg: Any, _hooks: Any, dtype: Any, *_: Any
) -> TensorInfo:
    return _tensor(storage, offset, size, stride, dtype)


def _rebuild_parameter(data: Any, *_: Any) -> Any:
    return replace(data, parameter=True) if isinstance(data, TensorInfo) else data


def _rebuild_meta(dtype: Any, size: Any, stride: Any, *_: Any) -> TensorInfo:
    return TensorInfo(dtype.name if isinstance(dtype, DType) else "?", _ints(size), None, 0)


def _rebuild_wrapper_subclass(cls: Any, dtype: Any, size: Any, *_: Any) -> TensorInfo:
    meta = _rebuild_meta(dtype, size, None)
    return replace(meta, subclass=cls.global_name() if is_stub_class(cls) else None)


def _rebuild_from_type(func: Any, new_type: Any, args: Any, *_: Any) -> Any:
    if not (isinstance(func, _Safe) or is_stub_class(func)) or not isinstance(args, tuple):
        raise pickle.UnpicklingError(f"unexpected tensor subclass rebuild {func!r}")
    made = func(*args)
    if isinstance(made, TensorInfo) and is_stub_class(new_type):
        name = new_type.global_name()
        if name not in ("torch.Tensor", "torch._tensor.Tensor"):
            made = replace(made, subclass=name)
    return made


def _device(kind: Any, index: Any = None) -> str:
    return f"{kind}:{index}" if index is not None else str(kind)


def _encode(text: Any, encoding: Any = "utf-8") -> bytes:
    # Protocol 2 pickles bytes as _codecs.encode(str, "latin1").
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1", "utf-8", "utf8"):
        raise pickle.UnpicklingError("unexpected _codecs.encode call")
    return text.encode(encoding)


def _bytearray(data: Any = b"") -> bytearray:
    if not isinstance(data, bytes | str):
        raise pickle.UnpicklingError("bytearray from something other than bytes")
    return bytearray(data.encode("latin1") if isinstance(data, str) else data)


def _reconstructor(cls: Any, *_: Any) -> Any:
    # copyreg._reconstructor(cls, base, state): build the stub without calling anything.
    return cls() if is_stub_class(cls) else Stub(cls)


_SAFE: dict[tuple[str, str], Any] = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("collections", "defaultdict"): lambda *_: {},
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("builtins", "complex"): complex,
    ("builtins", "slice"): slice,
    ("builtins", "bytearray"): _bytearray,
    ("_codecs", "encode"): _encode,
    ("copyreg", "_reconstructor"): _reconstructor,
    ("torch", "Size"): lambda dims=(): _ints(dims),
    ("torch", "device"): _device,
    ("torch.serialization", "_get_layout"): lambda name: str(name),
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor_v3"): _rebuild_tensor_v3,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    ("torch._utils", "_rebuild_meta_tensor_no_storage"): _rebuild_meta,
    ("torch._utils", "_rebuild_wrapper_subclass"): _rebuild_wrapper_subclass,
    ("torch._tensor", "_rebuild_from_type"): _rebuild_from_type,
    ("torch._tensor", "_rebuild_from_type_v2"): _rebuild_from_type,
}


class _Safe:
    """One allow-listed callable, handed out fresh so a pickle's BUILD cannot alter the original."""

    __slots__ = ("fn",)

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __setstate__(self, state: Any) -> None:
        raise pickle.UnpicklingError("the pickle tries to modify a function")


class RestrictedUnpickler(pickle.Unpickler):
    """Loads a torch `data.pkl` into inert descriptions; nothing named by the pickle is run."""

    def __init__(self, file: IO[bytes], *, source: str, storage_sizes: Mapping[str, int]) -> None:
        super().__init__(file, encoding="latin1")
        self._source = source
        self._sizes = storage_sizes
        self._storages: dict[str, Storage] = {}
        self._stub_classes: dict[tuple[str, str], type[Stub]] = {}
        self.stubbed: Counter[str] = Counter()

    def find_class(self, module: str, name: str) -> Any:
        # Python 2 names (protocol <= 2 writes e.g. subprocess as "commands"): what pickle maps.
        if (module, name) in _compat_pickle.NAME_MAPPING:
            module, name = _compat_pickle.NAME_MAPPING[(module, name)]
        module = _compat_pickle.IMPORT_MAPPING.get(module, module)
        if (module, name) in _SAFE:
            return _Safe(_SAFE[(module, name)])
        if module == "torch" and (name in DTYPE_ITEMSIZE or name in _DTYPE_ALIASES):
            return DType(_DTYPE_ALIASES.get(name, name))
        if module in ("torch", "torch.storage") and name in _STORAGE_DTYPES:
            return StorageType(_STORAGE_DTYPES[name])
        self.stubbed[f"{module}.{name}"] += 1
        key = (module, name)
        if key not in self._stub_classes:
            self._stub_classes[key] = type(name, (Stub,), {"module": module, "qualname": name})
        return self._stub_classes[key]

    def persistent_load(self, pid: Any) -> Storage:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise pickle.UnpicklingError(f"unknown persistent id {pid!r}")
        _, storage_type, key, location, _numel = pid
        if not isinstance(storage_type, StorageType) or not isinstance(key, str):
            raise pickle.UnpicklingError(f"malformed storage record {pid!r}")
        if key not in self._storages:
            if key not in self._sizes:
                raise pickle.UnpicklingError(
                    f"data.pkl refers to storage data/{key}, which the archive does not contain"
                )
            dtype = storage_type.dtype
            self._storages[key] = Storage(self._source, key, dtype, self._sizes[key], str(location))
        return self._storages[key]


@dataclass(frozen=True)
class LoadedPickle:
    """The inert object tree of one torch zip checkpoint and the globals that were stubbed."""

    root: Any
    stubbed: Counter[str]
    pickle_name: str


# Argument width of every opcode: >= 0 fixed bytes, -1 up to a newline, -2..-5 a length field.
_ARG_BYTES = {
    op.code.encode("latin1")[0]: op.arg.n if op.arg else 0
    for op in pickletools.opcodes
    if op.name not in ("NEXT_BUFFER", "READONLY_BUFFER", "BYTEARRAY8")  # protocol 5: not torch
}
_LENGTH_FIELD = {-2: (1, False), -3: (4, True), -4: (4, False), -5: (8, False)}
_STOP, _PUT, _LONG_BINPUT, _GLOBAL, _INST = b".prci"


def check_opcodes(data: bytes) -> None:
    """Refuse what the C unpickler would turn into a huge allocation before it runs.

    A PUT/LONG_BINPUT index sizes the unpickler's memo array, so a corrupt or hostile index
    of 2**31 would allocate gigabytes; a real index is below the pickle's length.
    """
    pos, end = 0, len(data)
    while pos < end:
        op, width = data[pos], _ARG_BYTES.get(data[pos])
        if width is None:
            raise pickle.UnpicklingError(f"invalid opcode {op:#04x} at byte {pos}")
        pos += 1
        if op == _STOP:
            return
        if width >= 0:
            if op == _LONG_BINPUT and int.from_bytes(data[pos : pos + 4], "little") > end:
                raise pickle.UnpicklingError(f"memo index out of range at byte {pos - 1}")
            pos += width
            continue
        if width == -1:
            stop = data.find(b"\n", pos)
            if op in (_GLOBAL, _INST):
                stop = data.find(b"\n", stop + 1) if stop >= 0 else -1
            if stop < 0 or (op == _PUT and not _small_decimal(data[pos:stop], end)):
                raise pickle.UnpicklingError(f"bad argument for opcode {chr(op)!r} at {pos - 1}")
            pos = stop + 1
            continue
        size, signed = _LENGTH_FIELD[width]
        length = int.from_bytes(data[pos : pos + size], "little", signed=signed)
        if length < 0:
            raise pickle.UnpicklingError(f"negative length at byte {pos - 1}")
        pos += size + length
    raise pickle.UnpicklingError("the pickle ends without a STOP opcode: it is truncated")


def _small_decimal(text: bytes, limit: int) -> bool:
    return text.isdigit() and len(text) < 20 and int(text) <= limit


def load_torch_zip(path: Path) -> LoadedPickle:
    """Unpickle `<root>/data.pkl` of a torch zip checkpoint into inert descriptions."""
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise OperationError(
            f"{path}: not a readable zip archive ({exc}): the checkpoint is truncated or corrupt",
            hint="copy it again from its source, or inspect another checkpoint of the run",
        ) from exc
    with archive:
        pkl = _find_data_pkl(path, archive.namelist())
        prefix = pkl[: -len("data.pkl")] + "data/"
        sizes = {
            info.filename[len(prefix) :]: info.file_size
            for info in archive.infolist()
            if info.filename.startswith(prefix)
        }
        unpickler: RestrictedUnpickler | None = None
        try:
            data = archive.read(pkl)  # also checks the entry's CRC
            check_opcodes(data)
            unpickler = RestrictedUnpickler(io.BytesIO(data), source=path.name, storage_sizes=sizes)
            root = unpickler.load()
        except Exception as exc:  # any failure to parse an untrusted pickle means corruption
            raise OperationError(
                f"{path}: {pkl} is corrupt ({type(exc).__name__}: {exc})",
                hint="the checkpoint is truncated or damaged; torch.load would fail on it too",
            ) from exc
    return LoadedPickle(root, unpickler.stubbed, pkl)


def _find_data_pkl(path: Path, names: list[str]) -> str:
    found = [n for n in names if n.endswith("/data.pkl") and n.count("/") == 1]
    if not found:
        raise UsageError(
            f"{path}: a zip archive without <root>/data.pkl is not a torch checkpoint",
            hint="envlock inspect reads torch.save files, safetensors files and their indexes",
        )
    # torch names the root folder after the file stem; fall back to the first candidate.
    return next((n for n in found if n == f"{path.stem}/data.pkl"), found[0])


def suspicious(names: Any) -> list[str]:
    """The stubbed globals that only an attempt to run code on load would name."""
    out = []
    for name in names:
        module, _, attr = name.rpartition(".")
        top = module.split(".")[0]
        if top in SUSPICIOUS_MODULES or (top == "builtins" and attr in SUSPICIOUS_BUILTINS):
            out.append(name)
    return sorted(out)
