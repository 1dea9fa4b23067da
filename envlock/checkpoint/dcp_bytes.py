"""The non-tensor values of a torch.distributed.checkpoint: step, lr, betas, weight_decay.

DCP writes each value that is not a tensor (a `BytesStorageMetadata` entry of `.metadata`) as
a small `torch.save` blob inside a shard, at the offset and length `.metadata`'s
`storage_data` records for it (`MetadataIndex(fqn)` → `_StorageInfo(relative_path, offset,
length)`). Each blob is read at that offset only, bounded, and unpickled by archive.py like
any torch zip: through the scan and the restricted unpickler, never executed.
"""

from __future__ import annotations

import hashlib
import io
from pathlib import Path
from typing import Any

from envlock.base.limits import MiB, Refused, budget
from envlock.base.untrusted import open_untrusted
from envlock.checkpoint.archive import load_zip_bytes
from envlock.checkpoint.inert import Stub
from envlock.errors import EnvlockError

_M = "torch.distributed.checkpoint."
_INDEX = _M + "metadata.MetadataIndex"
_STORAGE_INFO = _M + "filesystem._StorageInfo"
MAX_BLOB = 1 * MiB  # one value's blob (a step or an lr is ~1 kB of zip around a few bytes)
MAX_BLOBS = 100_000  # values read per checkpoint (one per optimizer field per parameter group)
UNREAD = "<object pickled in a shard>"


def _name(obj: Any) -> str:
    return type(obj).global_name() if isinstance(obj, Stub) else ""


def _locations(storage_data: Any, wanted: set[str]) -> dict[str, tuple[str, int, int]]:
    """`{fqn: (shard name, offset, length)}` of the wanted (bytes) entries."""
    found: dict[str, tuple[str, int, int]] = {}
    if not isinstance(storage_data, dict):
        return found
    for index, info in storage_data.items():
        if _name(index) != _INDEX or _name(info) != _STORAGE_INFO:
            continue
        fqn = (index.fields() or {}).get("fqn")
        fields = info.fields() or {}
        shard, offset, length = (fields.get(k) for k in ("relative_path", "offset", "length"))
        if not (isinstance(fqn, str) and fqn in wanted and isinstance(shard, str)):
            continue
        if "/" not in shard and type(offset) is int and type(length) is int and offset >= 0:
            found[fqn] = (shard, offset, length)
    return found


def read_bytes_entries(
    directory: Path, storage_data: Any, wanted: set[str], follow_links: bool
) -> tuple[dict[str, Any], list[str]]:
    """`{fqn: value}` of the bytes entries that could be read, and notes on those that could
    not (too large, too many, not a torch.save blob): they stay described, not read."""
    places = _locations(storage_data, wanted)
    values: dict[str, Any] = {}
    notes: list[str] = []
    by_shard: dict[str, list[tuple[str, int, int]]] = {}
    for fqn, (shard, offset, length) in sorted(places.items())[:MAX_BLOBS]:
        by_shard.setdefault(shard, []).append((fqn, offset, length))
    for shard, entries in sorted(by_shard.items()):
        path = directory / shard
        with open_untrusted(path, "checkpoint", within=directory, follow_links=follow_links) as f:
            for fqn, offset, length in entries:
                value = _read_blob(f, path, fqn, offset, length)
                if value is not UNREAD:
                    values[fqn] = value
    skipped = len(wanted) - len(values)
    if skipped:  # "skipped": what a diff lists as unread (its comparison is incomplete)
        notes.append(
            f"skipped {skipped} non-tensor value(s) of {directory.name}: past "
            f"{MAX_BLOB // MiB} MiB each or {MAX_BLOBS:,} in all, or not where .metadata says"
        )
    return values, notes


def _read_blob(f: Any, path: Path, fqn: str, offset: int, length: int) -> Any:
    if length > MAX_BLOB:
        return UNREAD
    f.seek(offset)
    blob = f.read(length)
    budget().spend("bytes", len(blob), str(path))
    if len(blob) != length:
        return UNREAD
    if not blob.startswith(b"PK\x03\x04"):  # an io.BytesIO value: DCP keeps its bytes raw
        return f"<{length} bytes, sha256 {hashlib.sha256(blob).hexdigest()[:16]}>"
    where = Path(f"{path}@{offset}")
    try:
        return load_zip_bytes(where, io.BytesIO(blob)).root
    except Refused:  # past a limit: hostile, as anywhere else
        raise
    except EnvlockError:  # not a readable torch.save blob: left described, and noted
        return UNREAD
