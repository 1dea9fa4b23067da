"""Where a tensor's bytes lie in one file: a torch zip's stored storage member, or a
safetensors file's data after its header (each a format's `spans` in formats.py). DCP's
chunks are weights_dcp.py's."""

from __future__ import annotations

import os
import struct
import zipfile
from pathlib import Path

from envlock.base.limits import printable
from envlock.base.untrusted import open_untrusted
from envlock.checkpoint.inert import DTYPE_BITS, DTYPE_ITEMSIZE, TensorInfo
from envlock.checkpoint.tensor_bytes import Reader, Span, nbytes
from envlock.errors import OperationError


def safetensors_spans(reader: Reader, file: str, info: TensorInfo) -> list[Span] | None:
    """A safetensors tensor: its data offset, past the 8-byte length and the header."""
    path = Path(reader.by_name[file].path)
    return [Span(path, _safetensors_start(reader, path) + info.offset, nbytes(info))]


def torch_zip_spans(reader: Reader, file: str, info: TensorInfo) -> list[Span] | None:
    """A torch zip tensor: its element offset into its storage's raw member."""
    if info.dtype in DTYPE_BITS and info.offset:
        return None  # an element offset inside a packed byte
    assert info.storage is not None
    path = Path(reader.by_name[file].path)
    start = info.offset * DTYPE_ITEMSIZE.get(info.dtype, 1)
    where = _storages(reader, path).get(info.storage.key)
    if where is None:
        raise OperationError(
            f"{path}: storage {printable(info.storage.key, 100)} is not in the zip"
        )
    if start + nbytes(info) > where[1]:
        raise OperationError(f"{path}: a tensor past the end of its storage")
    return [Span(path, where[0] + start, nbytes(info))]


def _storages(reader: Reader, path: Path) -> dict[str, tuple[int, int]]:
    """Where each storage's bytes lie in a torch zip (stored raw, as torch writes them)."""
    if path in reader.zips:
        return reader.zips[path]
    found: dict[str, tuple[int, int]] = {}
    with open_untrusted(path, "checkpoint", **reader.gate(path)) as f:
        size = os.fstat(f.fileno()).st_size
        with zipfile.ZipFile(f) as archive:
            members = [i for i in archive.infolist() if i.filename.count("/") == 2]
        for info in members:
            _, folder, key = info.filename.split("/")
            if folder != "data" or info.compress_type != zipfile.ZIP_STORED:
                continue  # a compressed storage is not torch's: its tensors are unread
            f.seek(info.header_offset)
            local = f.read(30)  # the local header: its name and extra field lengths
            if len(local) != 30 or local[:4] != b"PK\x03\x04":
                continue
            name, extra = struct.unpack("<HH", local[26:30])
            start = info.header_offset + 30 + name + extra
            if start + info.file_size <= size:
                found[key] = (start, info.file_size)
    reader.zips[path] = found
    return found


def _safetensors_start(reader: Reader, path: Path) -> int:
    with open_untrusted(path, "checkpoint", **reader.gate(path)) as f:
        (length,) = struct.unpack("<Q", f.read(8))
    return 8 + length
