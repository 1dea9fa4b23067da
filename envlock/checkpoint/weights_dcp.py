"""Where a DCP tensor's bytes lie: its chunks, each a torch.save blob inside a shard at the
offset `.metadata` names, in row-major order when they are cut along the first dim only
(FSDP's). A hostile `.metadata` is bounded by the Reader: every byte is spent from the
side's own size and the command's Budget."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from envlock.base.untrusted import open_untrusted
from envlock.checkpoint.archive import load_raw_pickle, load_zip_bytes
from envlock.checkpoint.inert import DTYPE_ITEMSIZE, Stub, TensorInfo
from envlock.checkpoint.tensor_bytes import Reader, Span, Window, nbytes, row_major
from envlock.errors import OperationError

_M = "torch.distributed.checkpoint."
_INDEX = _M + "metadata.MetadataIndex"
_STORAGE_INFO = _M + "filesystem._StorageInfo"
_TENSOR = _M + "metadata.TensorStorageMetadata"
_CHUNK = _M + "metadata.ChunkStorageMetadata"


def dcp_spans(reader: Reader, directory: str, fqn: str, info: TensorInfo) -> list[Span] | None:
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


def _dcp_chunks(reader: Reader, directory: str) -> dict[str, Any]:
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
    reader: Reader, place: tuple[Path, int, int], info: TensorInfo, sizes: tuple
) -> Span:
    """The span of a chunk inside its torch.save blob: the blob's pickle says which storage
    and where in it (a narrowed view saves its whole storage)."""
    path, offset, length = place
    with open_untrusted(path, "checkpoint", **reader.gate(path)) as f:
        if offset + length > os.fstat(f.fileno()).st_size:
            raise OperationError(f"{path}: a chunk past the end of the shard: truncated")
        loaded = load_zip_bytes(Path(f"{path}@{offset}"), Window(f, offset, length)).root
    chunk = TensorInfo(info.dtype, tuple(sizes))
    if not isinstance(loaded, TensorInfo) or loaded.storage is None:
        raise OperationError(f"{path}@{offset}: a chunk that is not one tensor")
    if loaded.dtype != info.dtype or tuple(loaded.shape) != tuple(sizes) or not row_major(loaded):
        raise OperationError(f"{path}@{offset}: a chunk unlike .metadata's or not contiguous")
    start = loaded.offset * DTYPE_ITEMSIZE.get(info.dtype, 1)
    return Span(path, start, nbytes(chunk), loaded.storage.key, (offset, length))
