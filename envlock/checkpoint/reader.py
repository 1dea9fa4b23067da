"""Inspect checkpoints without torch: keys, shapes, dtypes, parameter counts, bytes and config.

Readers turn a torch zip (`checkpoint_pickle`), a safetensors file, a sharded `*.index.json`
or a directory of them into one inert object tree, a `CheckpointReport` that lists its tensors;
`summary` builds the `--json` document and the run's config from it.
Only pickles and headers are read, so time and memory do not grow with tensor bytes.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envlock.checkpoint import summary
from envlock.checkpoint.report import CheckpointReport, FileInfo
from envlock.checkpoint.unpickler import (
    DTYPE_ITEMSIZE,
    LEGACY_MAGIC,
    Storage,
    TensorInfo,
    load_torch_zip,
)
from envlock.errors import OperationError, UsageError

_ST_DTYPES = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8", "F8_E5M2": "float8_e5m2",
    "F8_E4M3": "float8_e4m3fn", "F8_E8M0": "float8_e8m0fnu", "I16": "int16", "U16": "uint16",
    "F16": "float16", "BF16": "bfloat16", "I32": "int32", "U32": "uint32", "F32": "float32",
    "F64": "float64", "I64": "int64", "U64": "uint64", "C64": "complex64",
}  # fmt: skip
_MAX_HEADER = 100 * 1024 * 1024  # the safetensors format's own limit
_TORCH_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt", ".pt.tar", ".pth.tar")
CHECKPOINT_SUFFIXES = (*_TORCH_SUFFIXES, ".safetensors")
_DIR_JSON = ("config.json", "trainer_state.json")


def inspect_checkpoint(path: str | Path) -> CheckpointReport:
    """Read a checkpoint file, a sharded index or a directory of them, without torch."""
    path = Path(path)
    if path.is_dir():
        return _read_dir(path)
    if not path.is_file():
        raise UsageError(f"{path}: no such file or directory", hint="pass a checkpoint path")
    fmt, root, stubbed = _read_file(path)
    files = _index_files(path, root) if fmt.endswith("index") else (FileInfo(str(path), fmt, 0),)
    return CheckpointReport(str(path), fmt, _sized(files), _unwrap(root), stubbed)


def read_checkpoint_config(path: str | Path) -> dict[str, Any] | None:
    """The run's config/args/hparams as `{entry name: plain JSON-able value}`, or None."""
    path = Path(path)
    if path.is_dir() and not _dir_members(path)[0]:
        return None
    report = inspect_checkpoint(path)
    return summary.config(report.root, report.format == "directory")


def _sized(files: tuple[FileInfo, ...]) -> tuple[FileInfo, ...]:
    return tuple(FileInfo(f.path, f.format, Path(f.path).stat().st_size) for f in files)


@dataclass(frozen=True)
class _Index:
    """A sharded index's merged tensors and the shard files behind them."""

    tensors: dict[str, Any]
    shards: tuple[FileInfo, ...]


def _unwrap(root: Any) -> Any:
    return root.tensors if isinstance(root, _Index) else root


def _index_files(path: Path, root: _Index) -> tuple[FileInfo, ...]:
    return (FileInfo(str(path), "index", 0), *root.shards)


def _read_file(path: Path) -> tuple[str, Any, tuple[str, ...]]:
    if path.name.endswith(".index.json"):
        index = _read_index(path)
        return f"{index.shards[0].format}-index" if index.shards else "index", index, ()
    with path.open("rb") as f:
        head = f.read(16)
    if head.startswith(b"PK\x03\x04"):
        loaded = load_torch_zip(path)
        return "torch-zip", loaded.root, tuple(sorted(loaded.stubbed))
    if len(head) > 8 and head[8:9] == b"{":
        return "safetensors", _read_safetensors(path), ()
    if head.startswith(LEGACY_MAGIC):
        raise UsageError(
            f"{path}: legacy torch.save format (torch < 1.6 or "
            "_use_new_zipfile_serialization=False) is not supported",
            hint="re-save it with a current torch: torch.save(torch.load(p), p)",
        )
    if path.name.endswith(CHECKPOINT_SUFFIXES):
        what = "empty" if not head else "neither a torch zip archive nor a safetensors file"
        raise OperationError(f"{path}: {what}: the checkpoint is truncated or corrupt")
    raise UsageError(
        f"{path}: not a checkpoint envlock can read",
        hint="expected a torch.save file (.pt/.pth), a .safetensors file or *.index.json",
    )


def _read_safetensors(path: Path) -> dict[str, TensorInfo]:
    size = path.stat().st_size
    with path.open("rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        if length > min(_MAX_HEADER, size - 8):
            raise OperationError(
                f"{path}: safetensors header claims {length} bytes but the file has {size}: "
                "truncated or corrupt"
            )
        raw = f.read(length)
    try:
        header = json.loads(raw)
        if not isinstance(header, dict):
            raise ValueError("header is not a JSON object")
        header.pop("__metadata__", None)
        tensors = {name: _st_tensor(path.name, spec) for name, spec in header.items()}
    except (ValueError, TypeError, KeyError) as exc:
        raise OperationError(f"{path}: corrupt safetensors header ({exc})") from exc
    data_end = max((t.offset + t.storage.nbytes for t in tensors.values() if t.storage), default=0)
    if 8 + length + data_end > size:
        raise OperationError(
            f"{path}: tensor data ends at byte {8 + length + data_end} but the file has {size} "
            "bytes: the file is truncated"
        )
    return dict(sorted(tensors.items(), key=lambda kv: kv[1].offset))


def _st_tensor(file: str, spec: Any) -> TensorInfo:
    dtype = _ST_DTYPES.get(spec["dtype"], str(spec["dtype"]).lower())
    shape = tuple(int(d) for d in spec["shape"])
    begin, end = (int(x) for x in spec["data_offsets"])
    info = TensorInfo(dtype, shape, Storage(file, str(begin), dtype, end - begin), begin)
    if end < begin or (dtype in DTYPE_ITEMSIZE and info.nbytes != end - begin):
        raise ValueError(f"{dtype}{list(shape)} does not fit data_offsets [{begin}, {end}]")
    return info


def _read_index(path: Path) -> _Index:
    try:
        weight_map = json.loads(path.read_text())["weight_map"]
        if not isinstance(weight_map, dict):
            raise TypeError("weight_map is not an object")
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise OperationError(f"{path}: not a valid checkpoint index ({exc})") from exc
    tensors: dict[str, Any] = {}
    shards = []
    for shard in dict.fromkeys(weight_map.values()):
        shard_path = path.parent / str(shard)
        if not shard_path.is_file():
            raise OperationError(f"{path}: shard {shard} is listed but missing: incomplete copy")
        fmt, root, _ = _read_file(shard_path)
        if not isinstance(root, dict):
            raise OperationError(f"{shard_path}: a shard must hold a flat state dict")
        shards.append(FileInfo(str(shard_path), fmt, 0))
        tensors.update(root)
    missing = [k for k in weight_map if k not in tensors]
    if missing:
        raise OperationError(f"{path}: {len(missing)} indexed tensors (e.g. {missing[0]}) absent")
    return _Index(tensors, tuple(shards))


def _dir_members(path: Path) -> tuple[list[Path], list[Path]]:
    children = sorted(p for p in path.iterdir() if p.is_file())
    indexes = [p for p in children if p.name.endswith(".index.json")]
    taken = {path / str(s) for i in indexes for s in _shard_names(i)}
    ckpts = [p for p in children if p not in taken and p.name.endswith(CHECKPOINT_SUFFIXES)]
    extras = [p for p in children if p.name in _DIR_JSON]
    return [*indexes, *ckpts], extras


def _shard_names(index: Path) -> list[str]:
    try:
        return list(dict.fromkeys(json.loads(index.read_text())["weight_map"].values()))
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError):
        return []


def _read_dir(path: Path) -> CheckpointReport:
    members, extras = _dir_members(path)
    if not members:
        raise UsageError(
            f"{path}: no checkpoint files here (.pt, .pth, .bin, .ckpt, .safetensors, index)"
        )
    root: dict[str, Any] = {}
    files: list[FileInfo] = []
    stubbed: set[str] = set()
    notes = []
    for member in members:
        try:
            fmt, obj, names = _read_file(member)
        except UsageError as exc:  # e.g. a .bin that is no torch file: note it, go on
            notes.append(f"skipped {member.name}: {exc.message}")
            continue
        root[member.name] = _unwrap(obj)
        files += (
            _index_files(member, obj)
            if isinstance(obj, _Index)
            else [FileInfo(str(member), fmt, 0)]
        )
        stubbed.update(names)
    for extra in extras:
        try:
            root[extra.name] = json.loads(extra.read_text())
        except (ValueError, UnicodeDecodeError) as exc:
            notes.append(f"skipped {extra.name}: not JSON ({exc})")
            continue
        files.append(FileInfo(str(extra), "json", 0))
    return CheckpointReport(
        str(path), "directory", _sized(tuple(files)), root, tuple(sorted(stubbed)), tuple(notes)
    )
