"""Tensor bytes, read in order through the gate: the streamed sha256 per tensor that
`diff --weights` compares, the number a 0-d tensor holds (a step saved as a tensor), and the
sizes of a nested tensor's components (its regular dims). Nothing else reads tensor data.

A tensor's digest is the sha256 of its elements' bytes in row-major order, so the same
values give the same digest from a safetensors file, a torch zip and a DCP shard. Bytes are
streamed in MiB chunks through the untrusted-bytes gate: memory stays flat whatever the
tensor's size, and every byte read is spent from the command's Budget ("tensor bytes") and
from a side's own bound, the size of its files, so a file cannot make the digest read more
than it holds (a hostile .metadata naming one blob for every chunk). What cannot be read in
row-major order without copying (a strided view, a sparse or nested tensor, a DCP tensor cut
along another dim than the first) is listed as not compared: never counted as equal.
"""

from __future__ import annotations

import hashlib
import os
import struct
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from envlock.checkpoint.archive import load_raw_pickle, load_zip_bytes
from envlock.checkpoint.inert import DTYPE_BITS, DTYPE_ITEMSIZE, Stub, TensorInfo
from envlock.checkpoint.limits import MiB, Refused, budget, printable
from envlock.checkpoint.report import CheckpointReport
from envlock.checkpoint.tree import key_text
from envlock.errors import EnvlockError, OperationError
from envlock.untrusted import Unsafe, open_untrusted

_M = "torch.distributed.checkpoint."
_INDEX = _M + "metadata.MetadataIndex"
_STORAGE_INFO = _M + "filesystem._StorageInfo"
_TENSOR = _M + "metadata.TensorStorageMetadata"
_CHUNK = _M + "metadata.ChunkStorageMetadata"


@dataclass(frozen=True)
class Digests:
    """`{key: sha256 hex}` of the tensors read, and what could not be (key: why)."""

    digests: dict[str, str]
    unread: tuple[str, ...]


@dataclass(frozen=True)
class _Span:
    """Bytes of one file: at `start`, `length` long; inside zip `member` when given, and
    inside the zip that starts at `blob` (a DCP chunk's torch.save blob) when given."""

    path: Path
    start: int
    length: int
    member: str | None = None
    blob: tuple[int, int] | None = None


class _Reader:
    """The files of one side, opened through the gate, and what reading them may cost."""

    def __init__(self, report: CheckpointReport, follow_links: bool) -> None:
        self.report, self.follow_links = report, follow_links
        self.left = sum(f.size for f in report.files)  # never more than the files hold
        top = Path(report.path)
        self.within = top if top.is_dir() else top.parent
        self.by_name = {Path(f.path).name: f for f in report.files}
        self.dcp: dict[str, dict[str, Any]] = {}  # DCP directory name → {fqn: chunks}
        # A torch zip's storages: {key: (offset of its bytes in the file, size)}, read once
        # per file (a checkpoint of 100,000 tensors opens its zip directory once, not again
        # per tensor).
        self.zips: dict[Path, dict[str, tuple[int, int]]] = {}
        self.nested = 0  # nested tensors' sizes read (MAX_NESTED_READS)

    def gate(self, path: Path) -> dict[str, Any]:
        """How `path` is opened: a member of the side's directory (the file given, itself)."""
        within = self.within if path.resolve() != Path(self.report.path).resolve() else None
        return {"within": within, "follow_links": self.follow_links}

    def spend(self, amount: int, where: Path) -> None:
        self.left -= amount
        if self.left < 0:
            raise Refused(f"{where}: the tensor bytes its digests read", "the size of its files")
        budget().spend("tensor bytes", amount, str(where))


def digests(report: CheckpointReport, follow_links: bool = False) -> Digests:
    """The digest of every tensor of `report` that can be read in row-major order."""
    reader = _Reader(report, follow_links)
    found: dict[str, str] = {}
    unread: list[str] = []
    done: dict[tuple[object, ...], str] = {}  # tied weights: one storage, read once
    for entry in report.tensors():
        key, info = key_text(entry.key), entry.info
        if info.alias in done:
            found[key] = done[info.alias]
            continue
        try:
            spans = _spans(reader, info)
            digest = _digest(reader, spans) if spans is not None else None
        except Refused:
            raise
        except (EnvlockError, OSError, zipfile.BadZipFile, ValueError) as exc:
            unread.append(f"{key}: {printable(str(exc), 300)}")
            continue
        if digest is None:
            unread.append(f"{key}: {_why(info)}: its contents are not compared")
            continue
        found[key] = done[info.alias] = digest
    return Digests(found, tuple(unread))


# A 0-d tensor's value (a step saved as `torch.tensor(5)`): struct formats by dtype.
_SCALAR = {
    "int8": "<b", "uint8": "<B", "int16": "<h", "uint16": "<H", "int32": "<i",
    "uint32": "<I", "int64": "<q", "uint64": "<Q", "float16": "<e", "float32": "<f",
    "float64": "<d", "bfloat16": "bf16",
}  # fmt: skip


def reader(report: CheckpointReport) -> _Reader:
    """One reader of `report`'s files for the small reads below: each zip directory once."""
    return _Reader(report, follow_links=False)


def scalar(reader: _Reader, info: TensorInfo) -> int | float | None:
    """The number a 0-d tensor holds (a few bytes read through the gate), or None when it
    is no plain number or its bytes cannot be read in order."""
    fmt = _SCALAR.get(info.dtype)
    if info.shape != () or fmt is None:
        return None
    try:
        spans = _spans(reader, info)
        raw = b"".join(c for span in spans or () for c in _stream(reader, span))
    except Unsafe:  # a member read with --follow-links: its value is left unread
        return None
    except Refused:
        raise
    except (EnvlockError, OSError, zipfile.BadZipFile, ValueError):
        return None
    if spans is None or len(raw) != _nbytes(info):
        return None
    if fmt == "bf16":  # the top half of a float32
        return float(struct.unpack("<f", b"\0\0" + raw)[0])
    value = struct.unpack(fmt, raw)[0]
    return float(value) if isinstance(value, float) else int(value)


MAX_NESTED_SIZES = MiB  # bytes of a nested tensor's sizes read to find its regular dims
MAX_NESTED_READS = 1_000  # nested tensors whose sizes one report reads


def nested_shape(reader: _Reader, info: TensorInfo) -> tuple[int | None, ...]:
    """A strided nested tensor's shape with every dim its components share filled in
    (`[2, *, 8]`), from its int64 `sizes` part [components, dims]; any other tensor's own."""
    sizes = dict(info.parts).get("sizes") if info.layout == "nested" else None
    if sizes is None or None not in info.shape[1:] or sizes.dtype != "int64":
        return info.shape
    if len(sizes.shape) != 2 or not sizes.numel or sizes.nbytes > MAX_NESTED_SIZES:
        return info.shape
    reader.nested += 1
    if reader.nested > MAX_NESTED_READS:  # past it, shown as varying: bounded work
        return info.shape
    dims = sizes.shape[1] or 0
    try:
        spans = _spans(reader, sizes)
        raw = b"".join(c for span in spans or () for c in _stream(reader, span))
    except Unsafe:
        return info.shape
    except (EnvlockError, OSError, zipfile.BadZipFile, ValueError):
        return info.shape
    if spans is None or len(raw) != sizes.nbytes or dims != len(info.shape) - 1:
        return info.shape
    values = struct.unpack(f"<{sizes.numel}q", raw)
    columns = [values[i::dims] for i in range(dims)]  # row-major [components, dims]
    return (info.shape[0], *(c[0] if len(set(c)) == 1 else None for c in columns))


def _why(info: TensorInfo) -> str:
    if info.layout != "strided" or info.parts:
        return f"a {info.layout} tensor"
    if info.sharding:
        return "one rank's shard of a DTensor"
    return "a strided view or a tensor cut along another dim than the first"


def _row_major(info: TensorInfo) -> bool:
    if info.layout != "strided" or info.parts or info.storage is None or info.sharding:
        return False
    if info.stride is None:
        return True
    expected = 1
    for size, stride in zip(reversed(info.shape), reversed(info.stride), strict=False):
        if size is None:
            return False
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def _nbytes(info: TensorInfo) -> int:
    if info.dtype in DTYPE_BITS:
        return (info.numel * DTYPE_BITS[info.dtype] + 7) // 8
    return info.numel * DTYPE_ITEMSIZE[info.dtype]


def _spans(reader: _Reader, info: TensorInfo) -> list[_Span] | None:
    """Where the tensor's row-major bytes lie, in order; None if they do not lie so."""
    if not _row_major(info) or info.dtype not in {**DTYPE_ITEMSIZE, **DTYPE_BITS}:
        return None
    storage = info.storage
    assert storage is not None
    found = reader.by_name.get(storage.file)
    if found is None or found.format == "dcp-metadata":
        return _dcp_spans(reader, storage.file, storage.key, info)
    path = Path(found.path)
    if found.format == "safetensors":
        return [_Span(path, _safetensors_start(reader, path) + info.offset, _nbytes(info))]
    if found.format != "torch-zip":
        return None
    if info.dtype in DTYPE_BITS and info.offset:
        return None  # an element offset inside a packed byte
    start = info.offset * DTYPE_ITEMSIZE.get(info.dtype, 1)
    where = _storages(reader, path).get(storage.key)
    if where is None:
        raise OperationError(f"{path}: storage {printable(storage.key, 100)} is not in the zip")
    if start + _nbytes(info) > where[1]:
        raise OperationError(f"{path}: a tensor past the end of its storage")
    return [_Span(path, where[0] + start, _nbytes(info))]


def _storages(reader: _Reader, path: Path) -> dict[str, tuple[int, int]]:
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


def _safetensors_start(reader: _Reader, path: Path) -> int:
    with open_untrusted(path, "checkpoint", **reader.gate(path)) as f:
        (length,) = struct.unpack("<Q", f.read(8))
    return 8 + length


def _digest(reader: _Reader, spans: list[_Span]) -> str:
    sha = hashlib.sha256()
    for span in spans:
        for chunk in _stream(reader, span):
            sha.update(chunk)
    return sha.hexdigest()


def _stream(reader: _Reader, span: _Span) -> Iterator[bytes]:
    with open_untrusted(span.path, "checkpoint", **reader.gate(span.path)) as f:
        if span.member is None:
            yield from _read_range(reader, f, span.path, span.start, span.length)
            return
        if span.blob is not None:  # a DCP chunk: the zip inside the shard, at its offset
            f = _Window(f, *span.blob)  # type: ignore[assignment]
        with zipfile.ZipFile(f) as archive:
            info = _member(archive, span.member, span.path)
            if info.compress_type != zipfile.ZIP_STORED:  # torch stores storages raw
                raise OperationError(f"{span.path}: storage {span.member} is compressed")
            if span.start + span.length > info.file_size:
                raise OperationError(f"{span.path}: a tensor past the end of its storage")
            with archive.open(info) as member:
                yield from _read_range(reader, member, span.path, span.start, span.length)


def _member(archive: zipfile.ZipFile, key: str, path: Path) -> zipfile.ZipInfo:
    # torch's storages are `<root>/data/<key>`, the root being the file's stem.
    for info in archive.infolist():
        if info.filename.count("/") == 2 and info.filename.split("/")[1:] == ["data", key]:
            return info
    raise OperationError(f"{path}: storage {printable(key, 100)} is missing from the archive")


def _read_range(reader: _Reader, f: Any, path: Path, start: int, length: int) -> Iterator[bytes]:
    f.seek(start)
    left = length
    while left:
        chunk = f.read(min(MiB, left))
        if not chunk:
            raise OperationError(f"{path}: the tensor's bytes end early: truncated")
        reader.spend(len(chunk), path)
        left -= len(chunk)
        yield chunk


class _Window:
    """Bytes [offset, offset + length) of an open file, as a file zipfile can read."""

    def __init__(self, f: BinaryIO, offset: int, length: int) -> None:
        self.f, self.offset, self.length, self.pos = f, offset, length, 0

    def seek(self, pos: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.pos, 2: self.length}[whence]
        self.pos = max(0, min(base + pos, self.length))
        return self.pos

    def tell(self) -> int:
        return self.pos

    def read(self, n: int = -1) -> bytes:
        n = self.length - self.pos if n is None or n < 0 else min(n, self.length - self.pos)
        f = self.f  # the file the gate opened
        f.seek(self.offset + self.pos)
        data = f.read(n)
        self.pos += len(data)
        return data

    def seekable(self) -> bool:
        return True


# -- DCP -----------------------------------------------------------------------------------
def _dcp_spans(reader: _Reader, directory: str, fqn: str, info: TensorInfo) -> list[_Span] | None:
    """A DCP tensor's chunks, each a torch.save blob in a shard, in row-major order: chunks
    cut along the first dim only (FSDP's), sorted by their offset in it."""
    chunks = _dcp_chunks(reader, directory).get(fqn)
    if not chunks:
        return None
    if not info.shape:  # a 0-d tensor (an optimizer's step): one chunk, one element
        return [_blob_span(reader, place, info, ()) for _, _, place in chunks[:1]]
    end = 0
    spans = []
    for offsets, sizes, place in sorted(chunks, key=lambda c: c[0]):
        if tuple(offsets[1:]) != (0,) * (len(offsets) - 1) or tuple(sizes[1:]) != info.shape[1:]:
            return None
        if not offsets or offsets[0] != end:
            return None  # a gap or an overlap: not one tensor in order
        end = offsets[0] + sizes[0]
        spans.append(_blob_span(reader, place, info, sizes))
    return spans if end == info.shape[0] else None


def _dcp_chunks(reader: _Reader, directory: str) -> dict[str, Any]:
    if directory in reader.dcp:
        return reader.dcp[directory]
    meta = next(
        (Path(f.path) for f in reader.report.files if f.format == "dcp-metadata"
         and Path(f.path).parent.name == directory),
        None,
    )  # fmt: skip
    if meta is None:
        reader.dcp[directory] = {}
        return {}
    loaded = load_raw_pickle(meta, within=meta.parent, follow_links=reader.follow_links).root
    fields = loaded.fields() or {} if isinstance(loaded, Stub) else {}
    places = _places(fields.get("storage_data"), meta.parent)
    found: dict[str, Any] = {}
    for fqn, entry in (fields.get("state_dict_metadata") or {}).items():
        if not isinstance(entry, Stub) or type(entry).global_name() != _TENSOR:
            continue
        listed = (entry.fields() or {}).get("chunks")
        chunks: list[tuple[tuple[int, ...], tuple[int, ...], tuple[Path, int, int]]] = []
        for chunk in listed if isinstance(listed, list | tuple) else ():
            offsets, sizes = _ints(chunk, "offsets"), _ints(chunk, "sizes")
            place = places.get((fqn, offsets)) if offsets is not None else None
            if place is None or sizes is None or len(offsets or ()) != len(sizes):
                chunks = []  # one chunk not placed: the tensor is not compared
                break
            chunks.append((offsets or (), sizes, place))
        found[fqn] = chunks
    reader.dcp[directory] = found
    return found


def _places(storage_data: Any, directory: Path) -> dict[tuple[str, tuple], tuple[Path, int, int]]:
    out: dict[tuple[str, tuple], tuple[Path, int, int]] = {}
    for index, info in (storage_data or {}).items() if isinstance(storage_data, dict) else ():
        if not (isinstance(index, Stub) and isinstance(info, Stub)):
            continue
        if (type(index).global_name(), type(info).global_name()) != (_INDEX, _STORAGE_INFO):
            continue
        idx, place = index.fields() or {}, info.fields() or {}
        shard, offset, length = (place.get(k) for k in ("relative_path", "offset", "length"))
        if not isinstance(shard, str) or "/" in shard or type(offset) is not int:
            continue
        if type(length) is not int or offset < 0 or length < 0:
            continue
        fqn, at = idx.get("fqn"), _ints(index, "offset")
        if isinstance(fqn, str) and at is not None:
            out[(fqn, at)] = (directory / shard, offset, length)
    return out


def _ints(obj: Any, field: str) -> tuple[int, ...] | None:
    """A chunk's offsets or sizes (a torch.Size in the pickle): a tuple of ints, or None."""
    value = (obj.fields() or {}).get(field) if isinstance(obj, Stub) else None
    if not isinstance(value, list | tuple) or any(type(v) is not int or v < 0 for v in value):
        return None
    return tuple(value)


def _blob_span(
    reader: _Reader, place: tuple[Path, int, int], info: TensorInfo, sizes: tuple
) -> _Span:
    """The span of a chunk inside its torch.save blob: the blob's pickle says which storage
    and where in it (a narrowed view saves its whole storage)."""
    path, offset, length = place
    with open_untrusted(path, "checkpoint", **reader.gate(path)) as f:
        if offset + length > os.fstat(f.fileno()).st_size:
            raise OperationError(f"{path}: a chunk past the end of the shard: truncated")
        loaded = load_zip_bytes(Path(f"{path}@{offset}"), _Window(f, offset, length)).root
    chunk = TensorInfo(info.dtype, tuple(sizes))
    if not isinstance(loaded, TensorInfo) or loaded.storage is None:
        raise OperationError(f"{path}@{offset}: a chunk that is not one tensor")
    if loaded.dtype != info.dtype or tuple(loaded.shape) != tuple(sizes) or not _row_major(loaded):
        raise OperationError(f"{path}@{offset}: a chunk unlike .metadata's or not contiguous")
    start = loaded.offset * DTYPE_ITEMSIZE.get(info.dtype, 1)
    return _Span(path, start, _nbytes(chunk), loaded.storage.key, (offset, length))
