"""Read torch's pickles without torch: a restricted unpickler that executes nothing.

Every global the pickle names resolves either to a small allow-list of harmless callables
(allowed.py: tensor rebuilds become `TensorInfo` descriptions, storages become `Storage` records
sized from the zip's central directory or, in a plain pickle, from the header of each storage's
blob: rawstorage.py) or to an inert `Stub` class that only records its name, arguments and
state (inert.py). Tensor data is never touched. Run it on a pickle that scan.py has passed: the
unpickler's own opcodes are bounded there, the calls it makes are bounded here.
"""

from __future__ import annotations

import _compat_pickle
import pickle
from collections import Counter
from collections.abc import Mapping
from typing import IO, Any

from envlock.base.limits import MAX_GLOBAL_NAME, MAX_GLOBALS, Refused, brief, shown
from envlock.checkpoint.allowed import Safe, Work, allowed
from envlock.checkpoint.inert import (
    DTYPE_ITEMSIZE,
    QSCHEMES,
    DType,
    QScheme,
    Storage,
    StorageType,
    Stub,
)
from envlock.checkpoint.rawstorage import MAX_HEADER_OPCODES, storage_from_bytes

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
_MAX_LOCATION = 64  # "cpu", "cuda:7", "meta"


class Restricted:
    """What a pickle may name, for either unpickler: C's (RestrictedUnpickler) and the one in
    Python that folds big containers as it reads (folding.py)."""

    stubbed: Counter[str]

    def __init__(
        self,
        file: IO[bytes],
        *,
        source: str,
        storage_sizes: Mapping[str, int],
        work: Work | None = None,
    ) -> None:
        super().__init__(file, encoding="latin1")  # type: ignore[call-arg]
        self._source = source
        self._sizes = storage_sizes
        self._work = work or Work(0)
        self._storages: dict[str, Storage] = {}
        self._stub_classes: dict[tuple[str, str], type[Stub]] = {}
        self.stubbed: Counter[str] = Counter()

    def find_class(self, module: str, name: str) -> Any:
        if len(module) + len(name) > MAX_GLOBAL_NAME:
            raise Refused(
                f"a global named {shown(f'{module}.{name}', 60)}", f"{MAX_GLOBAL_NAME} chars"
            )
        # Python 2 names (protocol <= 2 writes e.g. subprocess as "commands"): what pickle maps.
        if (module, name) in _compat_pickle.NAME_MAPPING:
            module, name = _compat_pickle.NAME_MAPPING[(module, name)]
        module = _compat_pickle.IMPORT_MAPPING.get(module, module)
        safe = allowed(module, name, self._work)
        if safe is not None:
            return safe
        if (module, name) == ("torch.storage", "_load_from_bytes"):  # a plain pickle's storage
            return Safe(self._storage_from_bytes)
        if module == "torch" and (name in DTYPE_ITEMSIZE or name in _DTYPE_ALIASES):
            return DType(_DTYPE_ALIASES.get(name, name))
        if module == "torch" and name in QSCHEMES:
            return QScheme(name)
        if module in ("torch", "torch.storage") and name in _STORAGE_DTYPES:
            return StorageType(_STORAGE_DTYPES[name])
        return self._stub_class(module, name)

    def _stub_class(self, module: str, name: str) -> type[Stub]:
        key = (module, name)
        if key not in self._stub_classes:
            if len(self._stub_classes) >= MAX_GLOBALS:  # each is a class: about 1 kB
                raise Refused("a pickle's count of distinct unknown globals", f"{MAX_GLOBALS:,}")
            self._stub_classes[key] = type(name, (Stub,), {"module": module, "qualname": name})
        self.stubbed[f"{module}.{name}"] += 1
        return self._stub_classes[key]

    def _storage_from_bytes(self, blob: Any) -> Storage:
        self._work.spend(MAX_HEADER_OPCODES)  # one blob may be handed to many calls
        return storage_from_bytes(blob, self._source, _STORAGE_DTYPES)

    def persistent_load(self, pid: Any) -> Storage:
        if not (type(pid) is tuple and len(pid) == 5 and pid[0] == "storage"):
            raise pickle.UnpicklingError(f"unknown persistent id {brief(pid)}")
        _, storage_type, key, location, _numel = pid
        if not isinstance(storage_type, StorageType) or type(key) is not str:
            raise pickle.UnpicklingError(f"malformed storage record {brief(pid)}")
        if type(location) is not str or len(location) > _MAX_LOCATION:
            raise pickle.UnpicklingError(f"a storage on device {brief(location)}")
        if key not in self._storages:
            if key not in self._sizes:
                raise pickle.UnpicklingError(
                    f"data.pkl refers to storage data/{shown(key, 40)}, "
                    "which the archive does not contain"
                )
            dtype = storage_type.dtype
            self._storages[key] = Storage(self._source, key, dtype, self._sizes[key], location)
        return self._storages[key]


class RestrictedUnpickler(Restricted, pickle.Unpickler):
    """Loads a torch `data.pkl` into inert descriptions; nothing named by the pickle is run."""


def suspicious(names: Any) -> list[str]:
    """The stubbed globals that only an attempt to run code on load would name."""
    out = []
    for name in names:
        module, _, attr = name.rpartition(".")
        top = module.split(".")[0]
        if top in SUSPICIOUS_MODULES or (top == "builtins" and attr in SUSPICIOUS_BUILTINS):
            out.append(name)
    return sorted(out)
