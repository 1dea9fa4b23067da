"""What reading a checkpoint gives: its files, its inert object tree and its tensors."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from envlock.base.limits import Refused, printable
from envlock.checkpoint.tree import TensorEntry, entries


@dataclass(frozen=True)
class FileInfo:
    path: str
    format: str
    size: int


@dataclass(frozen=True)
class Part:
    """What one file (or an index and its shards, or a DCP directory) holds: what a format's
    reader (formats.py) gives."""

    format: str
    root: Any
    files: tuple[FileInfo, ...]
    stubbed: tuple[str, ...] = ()
    allowance: int = 0  # bytes of pickle or JSON read: what the walk may spend (tree.py)
    notes: tuple[str, ...] = ()
    metadata: tuple[tuple[str, str], ...] = ()  # a safetensors file's __metadata__


def one_file(path: str, fmt: str) -> tuple[FileInfo, ...]:
    """The file list of a part read from one file (its size is filled in by the reader)."""
    return (FileInfo(path, fmt, 0),)


@dataclass(frozen=True)
class CheckpointReport:
    """The inert object tree of a checkpoint plus the files it came from."""

    path: str
    format: str
    files: tuple[FileInfo, ...]
    root: Any
    stubbed: tuple[str, ...]
    notes: tuple[str, ...] = ()
    allowance: int = 0  # bytes of pickle and JSON read: scales what walking the tree may cost
    # A directory's members that hold no model weights ("rng", "state", "optimizer") or the
    # same weights as another member ("duplicate:<member>"): see kinds.py.
    kinds: tuple[tuple[str, str], ...] = ()
    # {file name: its safetensors __metadata__}, of the files that have one.
    metadata: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()

    def tensors(self) -> list[TensorEntry]:
        """Every tensor with its dotted key path, in the checkpoint's own order."""
        return list(self._entries)

    @cached_property
    def _entries(self) -> tuple[TensorEntry, ...]:
        try:
            return tuple(entries(self.root, self.allowance))
        except Refused as exc:
            raise exc.at(printable(self.path)) from None
