"""Sharded checkpoints: a `*.index.json` whose `weight_map` names the shard holding each
tensor (`save_pretrained`'s `model.safetensors.index.json`). The index is JSON; each shard is
read as the file it is (formats.py sniffs it), and must lie beside the index: a shard named
`../elsewhere` is refused unless links are followed."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envlock.base.limits import printable, shown
from envlock.base.untrusted import FOLLOW_HINT
from envlock.checkpoint.jsondata import read_json
from envlock.checkpoint.report import FileInfo, Part
from envlock.errors import OperationError

INDEX_SUFFIX = ".index.json"


@dataclass(frozen=True)
class Shards:
    """What an index's shards may be: the names a shard may have (never another index: no
    loops), and how one is read."""

    suffixes: tuple[str, ...]
    load: Callable[[Path, bool, Path | None], Part]


def inside(path: Path, directory: Path) -> bool:
    return path.resolve().is_relative_to(directory.resolve())


def weight_map(index: Path, follow_links: bool = False, within: Path | None = None) -> dict:
    document = read_json(index, "checkpoint index", within=within, follow_links=follow_links)
    found = document.get("weight_map") if isinstance(document, dict) else None
    if not isinstance(found, dict) or not all(
        isinstance(s, str) and s and "\0" not in s for s in found.values()
    ):
        raise OperationError(f"{index}: not a valid checkpoint index (no weight_map of names)")
    return found


def shard_names(index: Path) -> list[str]:
    """The shards an index names, or none when it cannot be read (reported when it is)."""
    try:
        return list(dict.fromkeys(weight_map(index).values()))
    except OperationError:
        return []


def _shard_path(index: Path, shard: str, follow_links: bool, suffixes: tuple[str, ...]) -> Path:
    path = index.parent / shard
    if not follow_links and not inside(path, index.parent):
        raise OperationError(
            f"{index}: refusing shard {shown(shard)}: it lies outside the index's directory",
            hint=FOLLOW_HINT,
        )
    if not path.name.endswith(suffixes):
        raise OperationError(f"{index}: shard {shown(shard)} is not a .safetensors or torch file")
    return path


@dataclass
class _Gathered:
    """The shards read so far: their tensors, files and what reading them spent."""

    tensors: dict[str, Any]
    files: list[FileInfo]
    stubbed: set[str]
    allowance: int
    metadata: tuple[tuple[str, str], ...] = ()

    def add(self, shard_path: Path, part: Part) -> None:
        if not isinstance(part.root, dict):
            raise OperationError(f"{shard_path}: a shard must hold a flat state dict")
        self.files.append(part.files[0])
        self.metadata = self.metadata or part.metadata  # each shard repeats it
        self.tensors.update(part.root)
        self.stubbed.update(part.stubbed)
        self.allowance += part.allowance


def read_index(path: Path, follow_links: bool, within: Path | None, shards: Shards) -> Part:
    """An index and every shard it names, as one part: `<shard format>-index`."""
    names = weight_map(path, follow_links, within)
    gathered = _Gathered({}, [], set(), path.stat().st_size)
    read: set[Path] = set()
    for shard in dict.fromkeys(names.values()):
        shard_path = _shard_path(path, shard, follow_links, shards.suffixes)
        if not os.path.lexists(shard_path):
            raise OperationError(
                f"{path}: shard {printable(shard)} is listed but missing: incomplete copy"
            )
        if shard_path.resolve() in read:  # one file under two spellings is read once
            continue
        read.add(shard_path.resolve())
        gathered.add(shard_path, shards.load(shard_path, follow_links, path.parent))
    missing = [k for k in names if k not in gathered.tensors]
    if missing:
        example = shown(missing[0], 100)
        raise OperationError(f"{path}: {len(missing)} indexed tensors (e.g. {example}) absent")
    fmt = f"{gathered.files[0].format}-index" if gathered.files else "index"
    files = (FileInfo(str(path), "index", 0), *gathered.files)
    stubbed = tuple(sorted(gathered.stubbed))
    return Part(fmt, gathered.tensors, files, stubbed, gathered.allowance, (), gathered.metadata)
