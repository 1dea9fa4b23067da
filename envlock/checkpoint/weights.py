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

The reading itself (what a side may spend, spans, the streamed read) is tensor_bytes.py;
where a tensor's bytes lie is its format's (formats.py: weights_files.py, weights_dcp.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import struct
import zipfile
from collections.abc import Callable
from dataclasses import dataclass

from envlock.base.limits import MiB, Refused, printable
from envlock.base.untrusted import Unsafe
from envlock.checkpoint import formats
from envlock.checkpoint.inert import DTYPE_BITS, DTYPE_ITEMSIZE, TensorInfo
from envlock.checkpoint.report import CheckpointReport
from envlock.checkpoint.tensor_bytes import Reader, Span, nbytes, row_major, stream
from envlock.checkpoint.tree import key_text
from envlock.errors import EnvlockError


@dataclass(frozen=True)
class Digests:
    """`{key: sha256 hex}` of the tensors read, and what could not be (key: why)."""

    digests: dict[str, str]
    unread: tuple[str, ...]


def digests(
    report: CheckpointReport, follow_links: bool = False, said: Callable[[str], None] | None = None
) -> Digests:
    """The digest of every tensor of `report` that can be read in row-major order; `said`
    is told how many megabytes of how many were read (a terminal's progress)."""
    reader = Reader(report, follow_links)
    found: dict[str, str] = {}
    unread: list[str] = []
    done: dict[tuple[object, ...], str] = {}  # tied weights: one storage, read once
    counted = _Counted(said, report)
    for entry in report.tensors():
        key, info = key_text(entry.key), entry.info
        if info.alias in done:
            found[key] = done[info.alias]
            continue
        try:
            spans = _spans(reader, info)
            digest = _digest(reader, spans, counted) if spans is not None else None
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


def reader(report: CheckpointReport) -> Reader:
    """One reader of `report`'s files for the small reads below: each zip directory once."""
    return Reader(report, follow_links=False)


def scalar(reader: Reader, info: TensorInfo) -> int | float | None:
    """The number a 0-d tensor holds (a few bytes read through the gate), or None when it
    is no plain number or its bytes cannot be read in order."""
    fmt = _SCALAR.get(info.dtype)
    if info.shape != () or fmt is None:
        return None
    try:
        spans = _spans(reader, info)
        raw = b"".join(c for span in spans or () for c in stream(reader, span))
    except Unsafe:  # a member read with --follow-links: its value is left unread
        return None
    except Refused:
        raise
    except (EnvlockError, OSError, zipfile.BadZipFile, ValueError):
        return None
    if spans is None or len(raw) != nbytes(info):
        return None
    if fmt == "bf16":  # the top half of a float32
        return float(struct.unpack("<f", b"\0\0" + raw)[0])
    value = struct.unpack(fmt, raw)[0]
    return float(value) if isinstance(value, float) else int(value)


MAX_NESTED_SIZES = MiB  # bytes of a nested tensor's sizes read to find its regular dims
MAX_NESTED_READS = 1_000  # nested tensors whose sizes one report reads


def nested_shape(reader: Reader, info: TensorInfo) -> tuple[int | None, ...]:
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
        raw = b"".join(c for span in spans or () for c in stream(reader, span))
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


def _spans(reader: Reader, info: TensorInfo) -> list[Span] | None:
    """Where the tensor's row-major bytes lie, in order (its format's row in formats.py
    says); None if they do not lie so."""
    if not row_major(info) or info.dtype not in {**DTYPE_ITEMSIZE, **DTYPE_BITS}:
        return None
    return formats.spans(reader, info)


class _Counted:
    """The tensor bytes read so far, said as megabytes of the checkpoint's tensors."""

    def __init__(self, said: Callable[[str], None] | None, report: CheckpointReport) -> None:
        self.said = said
        self.read = 0
        self.total = self.size_of(report) if said else 0
        self.add(0)

    @staticmethod
    def size_of(report: CheckpointReport) -> int:
        """The bytes of its tensors, a tied storage once (what the digests read at most)."""
        infos = {e.info.alias: e.info for e in report.tensors()}
        total = 0
        for info in infos.values():
            with contextlib.suppress(KeyError, TypeError):
                total += nbytes(info)
        return total

    def add(self, size: int) -> None:
        self.read += size
        if self.said is not None:
            self.said(f"{self.read >> 20:,} of {self.total >> 20:,} MB read")


def _digest(reader: Reader, spans: list[Span], counted: _Counted) -> str:
    sha = hashlib.sha256()
    for span in spans:
        for chunk in stream(reader, span):
            sha.update(chunk)
            counted.add(len(chunk))
    return sha.hexdigest()
