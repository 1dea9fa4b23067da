"""Tensor bytes, read through the gate: one side's files and what reading them may cost
(`Reader`: the files' own size, and the command's Budget), where a tensor's bytes lie
(`Span`), and the streamed read of a span, from a file, a zip member or the zip inside a
DCP blob, in MiB chunks. weights.py and weights_dcp.py say which spans a tensor has."""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from envlock.base.limits import MiB, Refused, budget, printable
from envlock.base.untrusted import open_untrusted, refuse_sparse
from envlock.checkpoint.inert import DTYPE_BITS, DTYPE_ITEMSIZE, TensorInfo
from envlock.checkpoint.report import CheckpointReport
from envlock.errors import OperationError

SPARSE_HINT = (
    "a checkpoint is written whole; this one was cut short, preallocated or built to exhaust "
    "time: compare it once it is written, or without --weights"
)


@dataclass(frozen=True)
class Span:
    """Bytes of one file: at `start`, `length` long; inside zip `member` when given, and
    inside the zip that starts at `blob` (a DCP chunk's torch.save blob) when given."""

    path: Path
    start: int
    length: int
    member: str | None = None
    blob: tuple[int, int] | None = None


class Reader:
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


def row_major(info: TensorInfo) -> bool:
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


def nbytes(info: TensorInfo) -> int:
    if info.dtype in DTYPE_BITS:
        return (info.numel * DTYPE_BITS[info.dtype] + 7) // 8
    return info.numel * DTYPE_ITEMSIZE[info.dtype]


def stream(reader: Reader, span: Span) -> Iterator[bytes]:
    with open_untrusted(span.path, "checkpoint", **reader.gate(span.path)) as f:
        refuse_sparse(f, span.path, SPARSE_HINT)
        if span.member is None:
            yield from read_range(reader, f, span.path, span.start, span.length)
            return
        if span.blob is not None:  # a DCP chunk: the zip inside the shard, at its offset
            f = Window(f, *span.blob)  # type: ignore[assignment]
        with zipfile.ZipFile(f) as archive:
            info = member_of(archive, span.member, span.path)
            if info.compress_type != zipfile.ZIP_STORED:  # torch stores storages raw
                raise OperationError(f"{span.path}: storage {span.member} is compressed")
            if span.start + span.length > info.file_size:
                raise OperationError(f"{span.path}: a tensor past the end of its storage")
            with archive.open(info) as member:
                yield from read_range(reader, member, span.path, span.start, span.length)


def member_of(archive: zipfile.ZipFile, key: str, path: Path) -> zipfile.ZipInfo:
    # torch's storages are `<root>/data/<key>`, the root being the file's stem.
    for info in archive.infolist():
        if info.filename.count("/") == 2 and info.filename.split("/")[1:] == ["data", key]:
            return info
    raise OperationError(f"{path}: storage {printable(key, 100)} is missing from the archive")


def read_range(reader: Reader, f: Any, path: Path, start: int, length: int) -> Iterator[bytes]:
    f.seek(start)
    left = length
    while left:
        chunk = f.read(min(MiB, left))
        if not chunk:
            raise OperationError(f"{path}: the tensor's bytes end early: truncated")
        reader.spend(len(chunk), path)
        left -= len(chunk)
        yield chunk


class Window:
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
