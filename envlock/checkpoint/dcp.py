"""torch.distributed.checkpoint (DCP) directories: what FSDP and most large runs write.

A DCP directory holds one `.metadata` pickle and the `*.distcp` shards each rank wrote
(`__<rank>_<n>.distcp`). The shards are raw bytes that only the metadata can place, so the
checkpoint is described from `.metadata` alone: `Metadata.state_dict_metadata` maps every
fully-qualified name to a `TensorStorageMetadata` (dtype, global size, chunks) or a
`BytesStorageMetadata` (any other object, pickled inside a shard). The pickle goes through
archive.py like any other; the classes below become inert stubs there and are read here only
when their global name is exactly torch's (torch/distributed/checkpoint/metadata.py).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from envlock.base.limits import (
    MAX_TENSORS,
    Refused,
    budget,
    check_dims,
    check_numel,
    printable,
)
from envlock.base.untrusted import open_untrusted
from envlock.checkpoint.archive import load_raw_pickle
from envlock.checkpoint.dcp_bytes import UNREAD, read_bytes_entries
from envlock.checkpoint.inert import DType, Storage, Stub, TensorInfo
from envlock.errors import OperationError

METADATA = ".metadata"
SHARD_SUFFIX = ".distcp"
_M = "torch.distributed.checkpoint.metadata."
_METADATA = _M + "Metadata"
_TENSOR = _M + "TensorStorageMetadata"
_BYTES = _M + "BytesStorageMetadata"
_PROPERTIES = _M + "TensorProperties"
_STORAGE_INFO = "torch.distributed.checkpoint.filesystem._StorageInfo"
_SHARD_NAME = re.compile(r"^__(\d+)_(\d+)\.distcp$")


def is_dcp_dir(path: Path) -> bool:
    # Whatever .metadata is (a link, a FIFO): it is judged when read, not skipped here.
    return path.is_dir() and os.path.lexists(path / METADATA)


def read_dcp(
    directory: Path, follow_links: bool = False
) -> tuple[dict[str, Any], list[Path], list[str], int]:
    """`{fqn: TensorInfo or "<object>"}`, the shard files, notes on shards and ranks, and the
    bytes of .metadata. `.metadata` and the shards are members: links out of `directory` are
    refused unless `follow_links`."""
    meta_path = directory / METADATA
    loaded = load_raw_pickle(meta_path, within=directory, follow_links=follow_links)
    meta = loaded.root
    if _name(meta) != _METADATA:
        raise OperationError(f"{meta_path}: not a torch.distributed.checkpoint Metadata")
    fields = meta.fields() or {}
    entries = fields.get("state_dict_metadata")
    if not isinstance(entries, dict):
        raise OperationError(f"{meta_path}: its state_dict_metadata is not a mapping")
    if len(entries) > MAX_TENSORS:
        raise Refused(f"{meta_path}: {len(entries):,} entries", f"{MAX_TENSORS:,} tensors a file")
    budget().spend("tensors", len(entries), str(meta_path))
    root = {_fqn(k, meta_path): _entry(directory.name, k, v, meta_path) for k, v in entries.items()}
    listed = _shard_names(fields.get("storage_data"))
    shards = sorted(p for p in directory.iterdir() if p.name.endswith(SHARD_SUFFIX))
    sizes: dict[str, int] = {}
    for shard in shards:  # never read (only .metadata places their bytes), but judged alike
        with open_untrusted(shard, "checkpoint", within=directory, follow_links=follow_links) as f:
            sizes[shard.name] = os.fstat(f.fileno()).st_size
    notes = [_shards_note(directory, listed, shards)]
    missing = sorted(set(listed) - {p.name for p in shards})
    if missing:
        raise OperationError(
            f"{directory}: shard {printable(missing[0], 200)} is listed in .metadata but "
            f"missing ({len(missing)} of {len(listed)}): an incomplete copy"
        )
    check_extents(directory, _extents(fields.get("storage_data")), sizes)
    wanted = {k for k, v in root.items() if v == UNREAD}
    if wanted:  # step, lr, betas ...: small torch.save blobs at offsets .metadata records
        values, unread = read_bytes_entries(
            directory, fields.get("storage_data"), wanted, follow_links
        )
        root.update(values)
        notes += unread
    return with_optimizer_nested(root), shards, notes, loaded.nbytes


OPTIMIZER_PARTS = ("state", "param_groups")


def by_first_name(root: dict[str, Any]) -> dict[str, Any]:
    """`model.layers.0.weight` under `model`: DCP flattens `{"model": state_dict}`, and its
    entries are that section, not "(top level)" (for a DCP directory read by itself: inside
    a directory, its folder is the section). Keys read the same either way; a name that is
    itself an entry (or one without a dot) stays where it is."""
    heads = {fqn.partition(".")[0] for fqn in root if fqn.partition(".")[2]}
    nested: dict[str, Any] = {}
    for fqn, value in root.items():
        head, _, rest = fqn.partition(".")
        if rest and head in heads and head not in root and head not in ("optimizer", "optim"):
            group = nested.setdefault(head, {})
            group[rest] = value
            continue
        nested[fqn] = value
    return nested


def with_optimizer_nested(root: dict[str, Any]) -> dict[str, Any]:
    """One DCP checkpoint may hold model and optimizer together (torchtitan's
    `{"model": …, "optimizer": …}`), flattened to `optimizer.state.…` keys: put those under one
    optimizer dict (state + param_groups, as the tree walk knows an optimizer) so they are
    optimizer state, never parameters. Keys read the same either way."""
    nested: dict[str, Any] = {}
    for fqn, value in root.items():
        head, _, rest = fqn.partition(".")
        part, _, key = rest.partition(".")
        if head in ("optimizer", "optim") and part in OPTIMIZER_PARTS and key:
            group = nested.setdefault(head, {p: {} for p in OPTIMIZER_PARTS})
            if isinstance(group, dict) and isinstance(group.get(part), dict):
                group[part][key] = value
                continue
        nested[fqn] = value
    return nested


def _name(obj: Any) -> str:
    return type(obj).global_name() if isinstance(obj, Stub) else ""


def _fqn(key: Any, where: Path) -> str:
    if type(key) is not str:
        raise OperationError(f"{where}: a state_dict_metadata key that is not a name")
    return key


def _entry(source: str, fqn: str, value: Any, where: Path) -> Any:
    if _name(value) == _BYTES:
        return UNREAD  # read from its shard once every shard is judged (dcp_bytes.py)
    if _name(value) != _TENSOR:
        raise OperationError(f"{where}: {printable(fqn, 200)} is described by an unknown object")
    fields = value.fields() or {}
    shape = fields.get("size")
    if not isinstance(shape, tuple) or any(type(d) is not int for d in shape):
        raise OperationError(f"{where}: {printable(fqn, 200)} has no tensor size")
    check_dims(shape, "shape")
    check_numel(shape)
    dtype = _dtype(fields.get("properties"))
    info = TensorInfo(dtype, shape)
    # One storage per tensor, sized from its global shape: the shards' bytes are not read.
    return TensorInfo(dtype, shape, Storage(source, fqn, dtype, info.nbytes), 0)


def _dtype(properties: Any) -> str:
    if _name(properties) != _PROPERTIES:
        return "?"
    state = properties.state  # TensorProperties pickles (dtype, layout, requires_grad, ...)
    if isinstance(state, tuple) and state and isinstance(state[0], DType):
        return state[0].name
    fields = properties.fields() or {}
    dtype = fields.get("dtype")
    return dtype.name if isinstance(dtype, DType) else "?"


def _shard_names(storage_data: Any) -> list[str]:
    if not isinstance(storage_data, dict):
        return []
    names = set()
    for info in storage_data.values():
        if _name(info) == _STORAGE_INFO:
            path = (info.fields() or {}).get("relative_path")
            if isinstance(path, str):
                names.add(path)
    return sorted(names)


def _extents(storage_data: Any) -> dict[str, int]:
    """`{shard name: the end of the last chunk .metadata places in it}`."""
    ends: dict[str, int] = {}
    if not isinstance(storage_data, dict):
        return ends
    for info in storage_data.values():
        if _name(info) != _STORAGE_INFO:
            continue
        fields = info.fields() or {}
        path, offset, length = (fields.get(k) for k in ("relative_path", "offset", "length"))
        if isinstance(path, str) and type(offset) is int and type(length) is int:
            ends[path] = max(ends.get(path, 0), offset + length)
    return ends


def check_extents(directory: Path, ends: dict[str, int], sizes: dict[str, int]) -> None:
    """Every byte range .metadata names lies inside its shard: a short shard (a copy cut
    off, a full disk) is a truncated checkpoint, said without reading its bytes."""
    for name, end in sorted(ends.items()):
        size = sizes.get(name)
        if size is not None and end > size:
            short = sum(1 for n, e in ends.items() if n in sizes and e > sizes[n])
            raise OperationError(
                f"{directory}: shard {printable(name, 200)} is truncated: .metadata places "
                f"chunks up to byte {end:,} but the file has {size:,} bytes"
                + (f" ({short} shards short)" if short > 1 else "")
            )


def _shards_note(directory: Path, listed: list[str], shards: list[Path]) -> str:
    names = listed or [p.name for p in shards]
    ranks = {m.group(1) for n in names if (m := _SHARD_NAME.match(n))}
    return (
        f"{directory.name}: torch.distributed.checkpoint, {len(names)} shard file(s) written "
        f"by {len(ranks) or '?'} rank(s); described from .metadata (global shapes)"
    )
