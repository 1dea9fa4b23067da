"""Read a torch.save file's pickle within limits: a zip archive's `<root>/data.pkl`, or a raw
pickle written by `pickle.dump`.

The zip's directory is trusted for nothing: the member's declared size is checked before it is
read, the bytes are counted while they inflate, and only the compression torch itself can read
(stored or deflated) is accepted. The pickle is then scanned (scan.py) and only then unpickled,
both reading it in chunks (pickled.py): the second reading checked, chunk by chunk, to be the
bytes the first passed.
"""

from __future__ import annotations

import zipfile
import zlib
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envlock.base.limits import (
    MAX_INFLATION,
    MAX_PICKLE_BYTES,
    MAX_ZIP_ENTRIES,
    MEMORY_BOUND,
    MiB,
    Refused,
    budget,
    printable,
)
from envlock.base.untrusted import open_untrusted, read_untrusted
from envlock.checkpoint.allowed import Work
from envlock.checkpoint.fold import FOLD_AT, Folder, Reread
from envlock.checkpoint.folding import FoldingUnpickler, Unfoldable
from envlock.checkpoint.pickled import CHUNK, Changed, Opener, Recorded, of_bytes, verified
from envlock.checkpoint.scan import Chunks, Scanned, scan
from envlock.checkpoint.unpickler import RestrictedUnpickler
from envlock.errors import OperationError, UsageError

_CORRUPT_HINT = "the checkpoint is truncated or damaged; torch.load would fail on it too"
_PICKLE_LIMIT = f"{MAX_PICKLE_BYTES // MiB} MiB"
_METHODS = {zipfile.ZIP_BZIP2: "bzip2", zipfile.ZIP_LZMA: "lzma"}


# How a pickle is read again after its first reading (a diff naming what changed in a fold):
# its opener, while the file it is read from is open.
Again = Callable[[], AbstractContextManager[Opener]]


@dataclass(frozen=True)
class LoadedPickle:
    """The inert object tree of one pickle and the globals that were stubbed."""

    root: Any
    stubbed: Counter[str]
    pickle_name: str
    nbytes: int


def load_torch_zip(
    path: Path, *, within: Path | None = None, follow_links: bool = False
) -> LoadedPickle:
    """Unpickle `<root>/data.pkl` of a torch zip checkpoint into inert descriptions."""

    @contextmanager
    def again() -> Iterator[Opener]:  # a fold's entries, read again the same way (fold.py)
        with (
            open_untrusted(path, "checkpoint", within=within, follow_links=follow_links) as f,
            _zip_member(path, f) as (opener, _, _),
        ):
            yield opener

    with open_untrusted(path, "checkpoint", within=within, follow_links=follow_links) as f:
        return _load_zip(path, f, again)


def load_zip_bytes(where: Path, f: Any) -> LoadedPickle:
    """A torch zip already in memory (a DCP shard's blob at its offset), read the same way."""
    return _load_zip(where, f, None)


def _load_zip(path: Path, f: Any, again: Again | None) -> LoadedPickle:
    with _zip_member(path, f) as (opener, member, sizes):
        where = f"{path}: {member.filename}"
        return unpickle(
            opener,
            size=member.file_size,
            where=where,
            source=path.name,
            sizes=sizes,
            name=member.filename,
            again=again,
        )


@contextmanager
def _zip_member(path: Path, f: Any) -> Iterator[tuple[Opener, zipfile.ZipInfo, dict[str, int]]]:
    """How to read the zip's data.pkl (in counted chunks, as often as asked while this is
    open), its entry, and the sizes of its storages."""
    _check_entries(path, f)
    try:
        archive = zipfile.ZipFile(f)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
        raise OperationError(
            f"{path}: not a readable zip archive ({exc}): the checkpoint is truncated or corrupt",
            hint="copy it again from its source, or inspect another checkpoint of the run",
        ) from exc
    with archive:
        _check_extents(path, archive)
        pkl = _find_data_pkl(path, archive.namelist())
        member = archive.getinfo(pkl)
        _check_member(path, member)
        prefix = pkl[: -len("data.pkl")] + "data/"
        sizes = {
            info.filename[len(prefix) :]: info.file_size
            for info in archive.infolist()
            if info.filename.startswith(prefix)
        }
        yield (lambda: _counted(f"{path}: {pkl}", archive, member)), member, sizes


def load_raw_pickle(
    path: Path, *, within: Path | None = None, follow_links: bool = False
) -> LoadedPickle:
    """Unpickle a file that is one pickle (no zip around it), e.g. from `pickle.dump`."""

    def through_gate() -> bytes:
        return read_untrusted(path, "pickle", within=within, follow_links=follow_links)

    @contextmanager
    def again() -> Iterator[Opener]:
        yield of_bytes(through_gate())

    data = through_gate()
    return unpickle(
        of_bytes(data),
        size=len(data),
        where=str(path),
        source=path.name,
        sizes={},
        name=path.name,
        again=again,
    )


def unpickle(
    data: Opener | bytes,
    *,
    where: str,
    source: str,
    sizes: Mapping[str, int],
    name: str,
    size: int | None = None,
    again: Again | None = None,
) -> LoadedPickle:
    """Scan, then unpickle with the restricted unpickler; any failure names `where`.

    The pickle is read twice, a chunk at a time (pickled.py): scanned, then unpickled, every
    chunk checked to be the one the scan passed. One with a container past FOLD_AT items is
    read by the folding unpickler (its big config values kept as digests, read `again`
    where a diff asks what changed in them)."""
    if isinstance(data, bytes):
        size, data = len(data), of_bytes(data)
    assert size is not None
    try:
        recorded = Recorded(data())
        scanned = scan(Chunks(iter(recorded), size), budget())
        budget().spend("pickle opcodes", scanned.opcodes, where)
        read = _Reading(scanned, source, sizes, size, recorded.digests)
        root, stubbed = read.tree(data, _rereader(again, read))
    except Refused as exc:
        raise exc.at(where) from None
    except Changed:
        raise OperationError(
            f"{where} changed while it was read: its second reading (unpickled) differs from "
            "its first (scanned)",
            hint="wait until whatever writes the checkpoint is done, then run again",
        ) from None
    except MemoryError:  # under a memory limit lower than MEMORY_BOUND (limits.py)
        raise OperationError(
            f"{where}: ran out of memory reading it (its pickle is within the budgets, which "
            f"need about {MEMORY_BOUND // 2**20} MiB at their limits)",
            hint="raise the process's memory limit (ulimit -v) and run again",
        ) from None
    except Exception as exc:  # any failure to parse an untrusted pickle means corruption
        detail = printable(f"{type(exc).__name__}: {exc}", 300)
        raise OperationError(f"{where} is corrupt ({detail})", hint=_CORRUPT_HINT) from exc
    return LoadedPickle(root, stubbed, name, size)


@dataclass(frozen=True)
class _Reading:
    """What unpickling one scanned pickle needs, for its first reading and any later one."""

    scanned: Scanned
    source: str
    sizes: Mapping[str, int]
    size: int
    digests: list[bytes]  # of the chunks the scan passed

    def tree(self, opener: Opener, reread: Reread | None) -> tuple[Any, Counter[str]]:
        """The tree, folded where a container passes FOLD_AT items, and the globals stubbed."""
        if self.scanned.largest > FOLD_AT:
            folding = self.folding(opener, reread)
            try:
                return folding.load(), folding.stubbed
            except Unfoldable:
                pass  # read whole, as any pickle under FOLD_AT
        unpickler = RestrictedUnpickler(
            verified(opener(), self.digests),
            source=self.source,
            storage_sizes=self.sizes,
            work=Work(self.size),
        )
        return unpickler.load(), unpickler.stubbed

    def folding(
        self, opener: Opener, reread: Reread | None, keep: dict[int, set[int]] | None = None
    ) -> FoldingUnpickler:
        return FoldingUnpickler(
            verified(opener(), self.digests),
            scanned=self.scanned,
            reread=reread,
            keep=keep,
            source=self.source,
            storage_sizes=self.sizes,
            work=Work(self.size),
        )


def _rereader(again: Again | None, read: _Reading) -> Reread | None:
    """How a fold of this pickle is read again: its Folder, or None if it changed since.

    The same bytes (each chunk checked against the scan's digests) read the same way: the
    scan that passed them holds, and only the entries a diff asks for are kept."""
    if again is None or read.scanned.largest <= FOLD_AT:
        return None

    def reread(ordinal: int, parts: set[int]) -> Folder | None:
        try:
            with again() as opener:
                folding = read.folding(opener, None, keep={ordinal: parts})
                folding.load()
        except Exception:  # changed or unreadable since: nothing is named
            return None
        return folding.by_ordinal.get(ordinal)

    return reread


def _check_entries(path: Path, f: Any) -> None:
    # zipfile builds an object per entry before anyone can count them: read the count the
    # end-of-directory record declares first (zipfile's own reader of it, where it has one).
    end_record = getattr(zipfile, "_EndRecData", None)
    if end_record is None:
        return
    record = end_record(f)
    entries = record[getattr(zipfile, "_ECD_ENTRIES_TOTAL", 4)] if record else 0
    if entries > MAX_ZIP_ENTRIES:
        raise Refused(f"{path}: the zip's {entries:,} entries", f"{MAX_ZIP_ENTRIES:,} entries")


def _check_extents(path: Path, archive: zipfile.ZipFile) -> None:
    """Every member's bytes, as the zip's directory sizes them, lie before that directory:
    a storage cut short is a truncated checkpoint, said without reading tensor bytes."""
    start = getattr(archive, "start_dir", None)
    if not isinstance(start, int):
        return
    for info in archive.infolist():
        if info.header_offset + info.compress_size > start:
            raise OperationError(
                f"{path}: {printable(info.filename, 200)} ends past the start of the zip's "
                f"directory (byte {start:,}): the checkpoint is truncated or corrupt",
                hint="copy it again from its source, or inspect another checkpoint of the run",
            )


def _find_data_pkl(path: Path, names: list[str]) -> str:
    found = [n for n in names if n.endswith("/data.pkl") and n.count("/") == 1]
    if not found:
        raise UsageError(
            f"{path}: a zip archive without <root>/data.pkl is not a torch checkpoint",
            hint="envlock inspect reads torch.save files, safetensors files and their indexes",
        )
    # torch names the root folder after the file stem; fall back to the first candidate.
    return next((n for n in found if n == f"{path.stem}/data.pkl"), found[0])


def _check_member(path: Path, info: zipfile.ZipInfo) -> None:
    """data.pkl as the zip's directory declares it: a method torch reads, a size within the
    limits and the command's budget (spent here, before a byte is inflated)."""
    where = f"{path}: {info.filename}"
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        # zipfile inflates bzip2 and lzma without an output bound; torch reads neither.
        method = _METHODS.get(info.compress_type, f"method {info.compress_type}")
        raise OperationError(
            f"{where} is compressed with {method}, which torch cannot read",
            hint="torch.save stores data.pkl uncompressed; re-save the checkpoint with torch",
        )
    declared, packed = info.file_size, max(info.compress_size, 1)
    if declared > MAX_PICKLE_BYTES:
        raise Refused(f"{where}: the declared size ({declared:,} bytes)", _PICKLE_LIMIT)
    if declared > MiB and declared > MAX_INFLATION * packed:
        raise Refused(
            f"{where}: inflating {packed:,} bytes to {declared:,}",
            f"{MAX_INFLATION}x compression (past 1 MiB)",
        )
    budget().spend("bytes", declared, where)  # before inflating: the directory is checked


def _counted(where: str, archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> Iterator[bytes]:
    """The member's bytes in chunks of CHUNK, counted as they inflate: more than the zip
    declares is refused, fewer (or a bad CRC, checked at the last byte) is corruption."""
    total, limit = 0, info.file_size
    try:
        with archive.open(info) as member:
            while chunk := member.read(CHUNK):
                total += len(chunk)
                if total > limit:  # more than the zip declared: never trust the directory
                    raise Refused(f"{where}: inflated size", f"the {limit:,} bytes it declares")
                yield chunk
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError, RuntimeError, ValueError) as exc:
        detail = printable(f"{type(exc).__name__}: {exc}", 300)
        raise OperationError(f"{where} is corrupt ({detail})", hint=_CORRUPT_HINT) from exc
    if total != limit:
        raise OperationError(
            f"{where} is corrupt (the zip declares {limit:,} bytes; {total:,} were read)",
            hint=_CORRUPT_HINT,
        )
