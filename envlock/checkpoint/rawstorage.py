"""A storage that plain `pickle.dump` wrote: `torch.storage._load_from_bytes(blob)`.

A tensor pickled without `torch.save` (a state dict saved with `pickle.dump`) carries each
storage as a bytes blob holding a whole legacy `torch.save` stream: four small pickles (magic
number, protocol version, system info, the storage's persistent id) and the raw elements.
torch.load would run that stream; here only the opcodes of its header pickles are decoded
(pickletools, which builds nothing), to read the storage's type, key, device and size.
"""

from __future__ import annotations

import io
import pickle
import pickletools
import struct
from typing import Any

from envlock.base.limits import MAX_DIM, brief
from envlock.checkpoint.inert import DTYPE_ITEMSIZE, Storage

MAX_HEADER_OPCODES = 200  # torch writes about 40; past this it is no storage torch wrote
_MAGIC = 0x1950A86A20F9469CFC6C  # torch.serialization.MAGIC_NUMBER
_MEMO = ("PROTO", "FRAME", "PUT", "BINPUT", "LONG_BINPUT")
_CONSTANTS = {"NONE": None, "NEWTRUE": True, "NEWFALSE": False}


def storage_from_bytes(blob: Any, source: str, storage_dtypes: dict[str, str]) -> Storage:
    """The storage `_load_from_bytes(blob)` would make, described; `source` names the file."""
    if type(blob) is not bytes:
        raise pickle.UnpicklingError(f"_load_from_bytes of {brief(blob)}, not bytes")
    stream, budget = io.BytesIO(blob), [MAX_HEADER_OPCODES]
    if _values(stream, budget) != [_MAGIC]:
        raise pickle.UnpicklingError("_load_from_bytes of bytes that are no torch.save stream")
    for _ in range(2):  # protocol version, system info
        _values(stream, budget)
    pid = _values(stream, budget)
    if (
        len(pid) != 7  # ("storage", module, class, key, location, numel, None): the MARK's
        or pid[0] != "storage"
        or pid[1] not in ("torch", "torch.storage")
        or pid[2] not in storage_dtypes
        or not all(type(v) is str and 0 < len(v) <= 64 for v in (pid[3], pid[4]))
        or type(pid[5]) is not int
        or not 0 <= pid[5] <= MAX_DIM
        or pid[6] is not None
    ):
        raise pickle.UnpicklingError(f"a pickled storage's header holds {brief(pid)}")
    dtype = storage_dtypes[pid[2]]
    nbytes = pid[5] * DTYPE_ITEMSIZE.get(dtype, 1)
    return Storage(source, f"pickled:{pid[3]}", dtype, nbytes, pid[4])


def _values(stream: io.BytesIO, budget: list[int]) -> list[Any]:
    # The arguments of one pickle's opcodes, in order (a GLOBAL's as its two names).
    values: list[Any] = []
    try:
        for opcode, arg, _ in pickletools.genops(stream):
            budget[0] -= 1
            if budget[0] < 0:
                raise pickle.UnpicklingError("a pickled storage's header is too long")
            if opcode.name == "STOP":
                return values
            if opcode.name == "GLOBAL":
                values += str(arg).split(" ", 1)
            elif opcode.name in _CONSTANTS:
                values.append(_CONSTANTS[opcode.name])
            elif opcode.arg is not None and opcode.name not in _MEMO:
                values.append(arg)
    except (ValueError, struct.error) as exc:  # pickletools' words for truncated or malformed
        raise pickle.UnpicklingError(f"a pickled storage's header: {exc}") from None
    raise pickle.UnpicklingError("a pickled storage's header ends early")
