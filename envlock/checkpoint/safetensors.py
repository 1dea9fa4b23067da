"""safetensors files: an 8-byte little-endian length, a JSON header, then the tensor bytes.

Only the header is read, and every field of it is checked the way the format defines it
(dtype a short string, shape a list of at most 64 int64 dims, data offsets two ints inside
the file), so nothing from it reaches a report unchecked.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any

from envlock.base.limits import (
    MAX_DIM,
    MAX_HEADER_BYTES,
    MAX_TENSORS,
    MiB,
    Refused,
    brief,
    budget,
    check_dims,
    check_numel,
    shown,
)
from envlock.base.untrusted import open_untrusted
from envlock.checkpoint.inert import DTYPE_BITS, DTYPE_ITEMSIZE, Storage, TensorInfo
from envlock.checkpoint.jsondata import parse_json
from envlock.errors import OperationError

_DTYPES = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8", "F8_E5M2": "float8_e5m2",
    "F8_E4M3": "float8_e4m3fn", "F8_E8M0": "float8_e8m0fnu", "I16": "int16", "U16": "uint16",
    "F16": "float16", "BF16": "bfloat16", "I32": "int32", "U32": "uint32", "F32": "float32",
    "F64": "float64", "I64": "int64", "U64": "uint64", "C64": "complex64",
    "F4": "float4_e2m1", "F6_E2M3": "float6_e2m3", "F6_E3M2": "float6_e3m2",
}  # fmt: skip
_MAX_DTYPE = 32  # characters of a dtype name the format does not know


def read_safetensors(
    path: Path, *, within: Path | None = None, follow_links: bool = False
) -> tuple[dict[str, TensorInfo], int, dict[str, str]]:
    """The tensors a safetensors file describes, in data order, its header's size, and its
    `__metadata__` (string to string: where LoRA and kohya trainers keep their config)."""
    with open_untrusted(path, "checkpoint", within=within, follow_links=follow_links) as f:
        size = os.fstat(f.fileno()).st_size
        (length,) = struct.unpack("<Q", f.read(8))
        if length > MAX_HEADER_BYTES:
            raise Refused(
                f"{path}: a safetensors header of {length:,} bytes",
                f"the format's {MAX_HEADER_BYTES // MiB} MiB",
            )
        if length > size - 8:
            raise OperationError(
                f"{path}: safetensors header claims {length} bytes but the file has {size}: "
                "truncated or corrupt"
            )
        budget().spend("bytes", length, str(path))  # before reading it
        raw = f.read(length)
    _count_tensors(path, raw)
    header = parse_json(raw, f"{path}: safetensors header")
    metadata = _metadata(header)
    try:
        tensors = _tensors(path.name, header)
    except Refused as exc:
        raise exc.at(str(path)) from None
    except (ValueError, TypeError) as exc:
        raise OperationError(f"{path}: corrupt safetensors header ({exc})") from exc
    data_end = max((t.offset + t.storage.nbytes for t in tensors.values() if t.storage), default=0)
    if 8 + length + data_end > size:
        raise OperationError(
            f"{path}: tensor data ends at byte {8 + length + data_end} but the file has {size} "
            "bytes: the file is truncated"
        )
    return dict(sorted(tensors.items(), key=lambda kv: kv[1].offset)), length, metadata


def _metadata(header: Any) -> dict[str, str]:
    # The format allows only strings here; anything else is not metadata safetensors wrote.
    found = header.get("__metadata__") if isinstance(header, dict) else None
    if not isinstance(found, dict):
        return {}
    return {k: v for k, v in found.items() if isinstance(k, str) and isinstance(v, str)}


def _count_tensors(path: Path, raw: bytes) -> None:
    # Each tensor is one JSON object and an object's brace cannot be escaped, so counting "{"
    # bounds the tensors before the parser builds them (a brace in a name only overcounts).
    n = max(raw.count(b"{") - 1, 0)  # less the header's own object (__metadata__ counts one)
    if n > MAX_TENSORS:
        raise Refused(f"{path}: a safetensors header of {n:,} tensors", f"{MAX_TENSORS:,} a file")
    budget().spend("tensors", n, str(path))


def _tensors(file: str, header: Any) -> dict[str, TensorInfo]:
    if not isinstance(header, dict):
        raise ValueError("header is not a JSON object")
    header.pop("__metadata__", None)
    return {name: _tensor(file, name, spec) for name, spec in header.items()}


def _tensor(file: str, name: str, spec: Any) -> TensorInfo:
    if not isinstance(spec, dict):
        raise ValueError(f"tensor {shown(name, 60)} is described by {brief(spec)}")
    dtype, shape, offsets = spec.get("dtype"), spec.get("shape"), spec.get("data_offsets")
    if not isinstance(dtype, str) or len(dtype) > _MAX_DTYPE:
        raise ValueError(f"tensor {shown(name, 60)} has dtype {brief(dtype)}")
    dims = _int_list(shape, name, "shape")
    check_dims(dims, "shape")
    check_numel(dims)
    begin, end = _int_list(offsets, name, "data_offsets", length=2)
    dtype = _DTYPES.get(dtype, dtype.lower())
    if dtype == "float4_e2m1" and dims and dims[-1] % 2 == 0:
        # torch saves float4_e2m1fn_x2 (two per byte) as F4 with the last dim doubled, and
        # loads it back so: described as torch has it, it counts as it does from a .pt.
        dtype, dims = "float4_e2m1fn_x2", (*dims[:-1], dims[-1] // 2)
    info = TensorInfo(dtype, dims, Storage(file, str(begin), dtype, end - begin), begin)
    known = dtype in DTYPE_ITEMSIZE or dtype in DTYPE_BITS
    if end < begin or (known and info.nbytes != end - begin):
        raise ValueError(f"{dtype}{list(dims)} does not fit data_offsets [{begin}, {end}]")
    return info


def _int_list(value: Any, name: str, field: str, length: int | None = None) -> tuple[int, ...]:
    # JSON numbers may be floats (1e400 is infinity) or bools: only real ints in range pass.
    ok = isinstance(value, list) and (length is None or len(value) == length)
    if not ok or any(type(v) is not int or not 0 <= v <= MAX_DIM for v in value[:65]):
        raise ValueError(f"tensor {shown(name, 60)} has {field} {brief(value)}")
    return tuple(value)
